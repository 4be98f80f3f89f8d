"""Operator tooling: the ``agentwake`` CLI, the demo. Not on any Lambda cold-start path."""
