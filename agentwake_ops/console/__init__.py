"""``agentwake console``: the operator's web UI on 127.0.0.1, over the CLI's own read models and
actions (no query or action written twice).

    server   the loopback HTTP server: token per start, Host check, CSRF on every POST, routing
    pages    the GET pages: DLQ (counts, filters, paging), a message, a run's timeline, runs,
             sessions, jobs, charts; built on agentwake_ops.dlq, agentwake_ops.runs, the jobs service
    actions  the POST actions: replay (agentwake_ops.replay), redrive with --verify semantics and
             delete (agentwake_ops.dlq.act, after a confirmation naming the exact count), export
    html     escaping (every value: task tokens masked, controls made visible, then html.escape),
             the layout, tables and inline SVG charts
    assets   the stylesheet and the little script, served from the package (nothing from the internet)

Standard library only (``http.server``): nothing beyond the ``ops`` extra.
"""
