"""``agentwake runs replay``: check a fix before redriving for real (``dlq redrive --verify`` replays
through ``agentwake_ops.replay.verify``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO, cast

import typer

from agentwake.trust.redact import redact
from agentwake_ops.cli_common import JSON_HELP, ops, parse_json_option
from agentwake_ops.render import console, dash, escape, facts_panel, print_json, when
from agentwake_ops.terminal import first_line, masked, shown

if TYPE_CHECKING:
    from agentwake_ops import replay as replay_mod


def _providers(provider: list[str] | None, providers_file: Path | None) -> list[dict[str, Any]] | None:
    from agentwake_ops.context import OpsError

    """The --provider / --providers-file specs (each checked when the replay builds its session)."""
    if provider and providers_file:
        raise OpsError("give either --provider (repeatable) or --providers-file, not both")
    if providers_file is not None:
        try:
            raw = json.loads(providers_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise OpsError(f"cannot read {providers_file} as JSON: {exc}") from exc
        raw = raw["providers"] if isinstance(raw, dict) and "providers" in raw else raw
    elif provider:
        raw = [parse_json_option(p, "--provider") for p in provider]
    else:
        return None
    if not isinstance(raw, list) or not raw or not all(isinstance(spec, dict) for spec in raw):
        raise OpsError('providers must be a non-empty list of JSON objects like {"type": "scripted"}')
    return list(raw)


def runs_replay(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="bg:{task_id} or cron:{job_id}:{scheduled_time}.", metavar="RUN_ID")],
    provider: Annotated[
        list[str] | None,
        typer.Option("--provider", help="A provider spec as JSON for the steps not yet done; repeat for fallbacks."),
    ] = None,
    providers_file: Annotated[
        Path | None, typer.Option("--providers-file", help="A JSON file with the list of provider specs.")
    ] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Model calls per run (1-50).")] = None,
    persona: Annotated[str | None, typer.Option("--persona", help="The system prompt's persona.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Re-run a failed run from its journal with a changed config, writing and delivering nothing.

    Journaled model replies and tool results are reused up to the first unfinished step; later steps use --provider (or the session's current providers). Prints the transcript and the outcome a redrive would reach. Exits 0 when the replay reaches DONE, 1 when it ends in ERROR.
    """
    from agentwake.agent.transcript import TranscriptPrinter
    from agentwake_ops import replay as replay_mod

    printer = None if as_json else TranscriptPrinter(out=cast("TextIO", _ShownStdout()), indent="  ", dry=True)
    if printer is not None:
        console().print(
            f"Replaying {escape(run_id)} (nothing is written or delivered, no side-effecting tool is called):"
        )

    outcome = replay_mod.replay(
        ops(ctx).store,
        run_id,
        providers=_providers(provider, providers_file),
        max_steps=max_steps,
        persona=persona,
        on_event=printer,
    )
    if as_json:
        print_json(masked(outcome.as_dict()))
    else:
        render_outcome(outcome)
    if not outcome.ok:
        raise typer.Exit(1)


class _ShownStdout:
    """The transcript's stream: this moment's stdout (CliRunner swaps it), through the redactor,
    task tokens masked and control characters made visible (``terminal.shown``)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(shown(redact(text)))

    def flush(self) -> None:
        sys.stdout.flush()


def render_outcome(outcome: replay_mod.ReplayOutcome) -> None:
    from rich.table import Table

    out = console()
    rows = [
        ("run id", outcome.run_id),
        ("session", outcome.session_id),
        ("was", redact(f"{dash(outcome.original_status)}: {dash(outcome.original_error)}")),
        ("replay outcome", outcome.state + (f" ({outcome.error_type})" if outcome.error_type else "")),
        ("steps", f"{outcome.steps} ({outcome.replayed_steps} reused from the journal)"),
        ("final text", redact(outcome.final_text)),
        *((f"provider {pid}", redact(err)) for pid, err in outcome.provider_errors.items()),
    ]
    out.print(facts_panel(rows, "what-if replay"))
    if outcome.would_deliver:
        table = Table(title="would be delivered (not sent)", title_justify="left")
        table.add_column("delivery id")
        table.add_column("text", overflow="fold")
        for d in outcome.would_deliver:
            table.add_row(escape(d.delivery_id), escape(redact(d.text)))
        out.print(table)
    if outcome.already_delivered:
        out.print(
            f"{len(outcome.already_delivered)} delivery(ies) already made by the run: a redrive does not resend them."
        )
    if outcome.in_doubt:
        from agentwake_ops.runs import IN_DOUBT_HINT, in_doubt_line

        table = Table(title="sent? unknown — this replay sent nothing", title_justify="left", title_style="yellow")
        for column in ("delivery id", "channel", "time", "text (start)"):
            table.add_column(column, overflow="fold")
        for i in outcome.in_doubt:
            table.add_row(
                escape(i["delivery_id"]),
                escape(in_doubt_line(i)),
                when(i.get("at")),
                escape(first_line(i["text"], 100)),
            )
        out.print(table)
        out.print(
            escape(
                f"{len(outcome.in_doubt)} send(s) in doubt: a replay never sends (nor settles) them; "
                + IN_DOUBT_HINT
                + "."
            ),
            style="yellow",
        )
    for call in outcome.not_called:
        out.print(
            f"side-effecting tool {escape(str(call['tool']))} would be called at step {call['step']} (not called)"
        )
    if outcome.would_park is not None:
        out.print(escape(outcome.park_note + "."), style="yellow")
        out.print(
            "A redrive of this run would park it again and ask for approval (it is not a failure).", style="yellow"
        )
    elif outcome.ok:
        out.print("A redrive of this run would succeed with this config.", style="green")
    else:
        out.print("A redrive of this run would fail again.", style="red")
