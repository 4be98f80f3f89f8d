"""One module per command group (``agentwake runs|history|jobs|sessions|tasks|dlq``), each a typer
app that ``agentwake_ops.cli`` mounts. A group parses its options, calls the plain-Python code and
prints through ``agentwake_ops.render``; no group imports another.
"""
