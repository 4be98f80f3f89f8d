"""agentwake: wake a chat agent when nobody is talking to it."""

__version__ = "0.1.0"
