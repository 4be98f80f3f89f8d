"""Thin Lambda entry points: parse the event, call one use case, map the result or raise."""
