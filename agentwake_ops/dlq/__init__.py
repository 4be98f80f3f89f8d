"""The DLQ work as a pipeline, one module per step; each imports only the steps before it.

    scan      agentwake_ops.dlq.scan (on agentwake_ops.sqs_scan): which DLQs; every message received
              once, held invisible, or the scan says it could not be sure
    describe  agentwake_ops.dlq.describe: a message as it reads (``read``), then joined with the run,
              task or job it names (``join``: one Query of the run's partition)
    select    agentwake_ops.dlq.select: the operator's filters, first on what the message carries,
              then on the joined view of the candidates only
    claim     agentwake_ops.dlq.claim: the selected messages kept held for an action, the rest released
    act       agentwake_ops.dlq.act: redrive, delete, purge, export

Plain Python (no typer or rich): ``agentwake_ops.commands.dlq`` parses the options and renders.
"""
