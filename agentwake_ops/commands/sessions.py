"""``agentwake sessions put|show|list|delete``: session configs (persona, provider chain, limits, delivery)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentwake_ops import render
from agentwake_ops.cli_common import (
    JsonOpt,
    WideOpt,
    YesOpt,
    check_id,
    confirm,
    fail,
    ops,
    parse_json_option,
    user_error,
)

if TYPE_CHECKING:
    from agentwake.domain.models import SessionConfig
    from agentwake_ops.context import OpsContext

app = typer.Typer(help="Session configs: persona, provider chain, limits, delivery.", no_args_is_help=True)


def _providers(provider: list[str] | None, providers_file: Path | None) -> list[dict[str, Any]] | None:
    from agentwake.agent.providers import parse_spec

    if provider and providers_file:
        raise user_error("give either --provider (repeatable) or --providers-file, not both")
    from agentwake.errors import ConfigError

    raw: Any
    if providers_file is not None:
        try:
            raw = json.loads(providers_file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise user_error(f"cannot read {providers_file}: {exc.strerror}") from exc
        except ValueError as exc:
            raise user_error(f"{providers_file} is not valid JSON: {exc}") from exc
        if isinstance(raw, dict) and "providers" in raw:
            raw = raw["providers"]
        if not isinstance(raw, list) or not raw:
            raise user_error(f"{providers_file} must hold a non-empty JSON list of provider specs (primary first)")
    elif provider:
        raw = [parse_json_option(p, "--provider") for p in provider]
    else:
        return None
    for index, spec in enumerate(raw):
        where = "--provider" if provider else f"{providers_file} item {index + 1}"
        if not isinstance(spec, dict):
            raise user_error(
                f'{where}: a provider spec must be a JSON object like {{"type": "scripted"}}, got {spec!r}'
            )
        try:
            parse_spec(spec)
        except ConfigError as exc:
            raise user_error(f"{where}: {exc}") from None
    return list(raw)


#: shown by ``sessions put --help``, and named by the error of a new session without providers
PUT_EPILOG = (
    "A new session names its providers (primary first; nothing runs without one, and the scripted "
    "provider only where it is named). Example: agentwake sessions put s1 --persona 'You are terse.' "
    '--provider \'{"type":"bedrock","model_id":"amazon.nova-lite-v1:0"}\' '
    '--provider \'{"type":"openai","base_url":"https://llm.example.com/v1","model":"m",'
    '"api_key_ref":"secretsmanager:agentwake/llm-key"}\' --max-steps 6. '
    "Secret references and URLs are checked against the stack's rules when the config is written."
)


def _channels_epilog() -> str:
    """One paragraph per channel (rich keeps a blank line's paragraphs apart), from the examples
    the docs and the product API's schema use."""
    from agentwake.delivery.examples import CHANNEL_EXAMPLES

    lines = [
        "Delivery (--delivery, docs/channels.md): one channel, or a route over up to four: first (the first "
        "that takes it) or each (every one). Slack and Telegram need a bot token (token_ref, or the stack's "
        "SlackBotTokenSecretArn / TelegramBotTokenSecretArn); sns a topic under the stack's NotifyTopicPrefix; "
        "websocket the stack's push API."
    ]
    lines += [
        f"{name}: --delivery '{json.dumps(spec, separators=(',', ':'))}'" for name, spec in CHANNEL_EXAMPLES.items()
    ]
    return "\n\n".join(lines)


def save_session(octx: OpsContext, session: str, changes: dict[str, Any]) -> tuple[SessionConfig, SessionConfig | None]:
    """``changes`` merged into the stored config of ``session`` (a new one when there is none),
    validated, and written under the stack's rules: the one write of a session config
    (``sessions put``, the console's "apply this replay"). Returns the config written and the one
    it replaced."""
    from pydantic import ValidationError

    from agentwake.domain.models import SessionConfig, utcnow_iso
    from agentwake.errors import describe_validation_error
    from agentwake_ops.stack_settings import config_rules

    existing = octx.store.records.get_session(session)
    data: dict[str, Any] = existing.model_dump() if existing else {"session_id": session}
    data.update(changes)
    data["updated_at"] = utcnow_iso()
    try:
        config = SessionConfig.model_validate(data)
    except ValidationError as exc:
        raise user_error(f"invalid session config: {describe_validation_error(exc)}") from exc
    # the rules of the stack's wakes (its secret prefixes, its outbound policy): a config that
    # could never run is refused here, with the wake's message (ConfigError: error: <one line>)
    octx.store.records.put_session(config, config_rules(octx.settings, source=octx.source))
    return config, existing


@app.command("put", epilog=PUT_EPILOG + "\n\n" + _channels_epilog())
def sessions_put(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session id.", metavar="SESSION")],
    persona: Annotated[str | None, typer.Option("--persona", help="The system prompt's persona.")] = None,
    provider: Annotated[
        list[str] | None,
        typer.Option("--provider", help="A provider spec as JSON; repeat for fallbacks, primary first."),
    ] = None,
    providers_file: Annotated[
        Path | None, typer.Option("--providers-file", help="A JSON file with the list of provider specs.")
    ] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Model calls per run (1-50).")] = None,
    history_window: Annotated[
        int | None, typer.Option("--history-window", help="History entries a wake reads (0-200).")
    ] = None,
    delivery: Annotated[
        str | None,
        typer.Option(
            "--delivery",
            help="Where messages go, as JSON: one channel (log, webhook, websocket, slack, telegram, sns) or a "
            "first/each route over them; an example of each below.",
        ),
    ] = None,
    role: Annotated[str | None, typer.Option("--role", help="user or admin.", metavar="user|admin")] = None,
    tools: Annotated[
        str | None, typer.Option("--tools", help="HTTP/Python tools as a JSON list (docs/tools.md); [] for none.")
    ] = None,
    owner: Annotated[
        list[str] | None,
        typer.Option(
            "--owner",
            help=(
                "An IAM principal ARN the product API acts on this session for (role or user; a role's "
                "sessions count as the role). Repeatable; given, it replaces the owners. Without any, the "
                "API refuses every call for the session."
            ),
            metavar="ARN",
        ),
    ] = None,
    setting: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help=(
                "Any other session setting as NAME=VALUE (VALUE is JSON, else text; null clears it), e.g. "
                "deliver_final=always, max_tokens_per_run=20000, max_deliveries_per_day=5, "
                'prices=\'{"p": {"input_per_mtok": 3, "output_per_mtok": 15}}\'. Repeatable.'
            ),
            metavar="NAME=VALUE",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a session config, or update only the given fields of an existing one."""
    from agentwake.domain.models import SessionConfig

    check_id(session, "session id")
    data: dict[str, Any] = {}  # the fields given, merged into the stored config by save_session
    providers = _providers(provider, providers_file)
    if providers is not None:
        data["providers"] = providers
    if persona is not None:
        data["persona"] = persona
    if max_steps is not None:
        data["max_steps"] = max_steps
    if history_window is not None:
        data["history_window"] = history_window
    if delivery is not None:
        from agentwake.delivery.factory import parse_spec as parse_delivery

        spec = parse_json_option(delivery, "--delivery")
        parse_delivery(spec)
        data["delivery"] = spec
    if role is not None:
        if role not in ("user", "admin"):
            raise user_error(f"--role must be user or admin, got {role!r}")
        data["role"] = role
    if tools is not None:
        from agentwake.agent.tools.config import parse_tool_spec

        specs = parse_json_option(tools, "--tools")
        if not isinstance(specs, list):
            raise user_error('--tools must be a JSON list like [{"type": "python", "name": "word_count"}]')
        for spec in specs:
            parse_tool_spec(spec)  # ConfigError naming the problem
        data["tools"] = specs
    if owner:
        data["owners"] = list(owner)  # normalised and checked by the config model below
    settable = sorted(set(SessionConfig.model_fields) - {"session_id", "updated_at"})
    for item in setting or ():
        name, sep, raw = item.partition("=")
        if not sep or name.strip() not in settable:
            raise user_error(
                f"--set takes NAME=VALUE with NAME a session setting, got {item!r}; the settings: {', '.join(settable)}"
            )
        try:
            data[name.strip()] = json.loads(raw)
        except ValueError:
            data[name.strip()] = raw
    config, existing = save_session(ops(ctx), session, data)
    python_tools = [str(t.get("name")) for t in config.tools if t.get("type") == "python"]
    if python_tools and ops(ctx).source != "local":
        # the bundle's packages are not visible from here: say so rather than let it pass for checked
        typer.echo(
            f"note: Python tool(s) {', '.join(python_tools)} not checked: this stack's functions run from its "
            "Lambda bundle (functions/requirements.txt), checked at the wake; the local stack checks them here",
            err=True,
        )
    if as_json:
        render.print_json(config.model_dump(mode="json"))
        return
    render.console().print(f"{'Updated' if existing else 'Created'} session {render.escape(session)}.")
    render.session_panel(config)


@app.command("show", epilog="Example: agentwake sessions show s1 --json")
def sessions_show(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session id.", metavar="SESSION")],
    as_json: JsonOpt = False,
) -> None:
    """Show a session's config: persona, provider chain, limits, delivery, role."""
    check_id(session, "session id")
    config = ops(ctx).store.records.get_session(session)
    if config is None:
        fail(f"no session {session!r} (create it with: agentwake sessions put {session})")
    if as_json:
        render.print_json(config.model_dump(mode="json"))
        return
    render.session_panel(config)


@app.command("list", epilog="Example: agentwake sessions list --json")
def sessions_list(ctx: typer.Context, as_json: JsonOpt = False, wide: WideOpt = False) -> None:
    """List every session config: providers, tools, delivery, role."""
    from agentwake.store.operator import OperatorStore

    configs = OperatorStore(ops(ctx).store).sessions()
    if as_json:
        render.print_json([c.model_dump(mode="json") for c in configs])
        return
    render.sessions_table(configs, wide=wide)


@app.command("delete", epilog="Example: agentwake sessions delete s1 --yes")
def sessions_delete(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="The session id.", metavar="SESSION")],
    force: Annotated[
        bool, typer.Option("--force", help="Delete even while jobs or unfinished tasks still reference the session.")
    ] = False,
    yes: YesOpt = False,
) -> None:
    """Delete a session: its config and its history (refuses while jobs or unfinished tasks use it)."""
    from agentwake.store.operator import OperatorStore

    check_id(session, "session id")
    context = ops(ctx)
    store = OperatorStore(context.store)
    if context.store.records.get_session(session) is None and not context.store.history.history_window(session, 1):
        fail(
            f"no session {session!r} (list the jobs and runs that name one with: agentwake jobs list / agentwake runs list)"
        )
    jobs = [j for j in context.jobs.list() if j.session_id == session]
    tasks = [t for t in store.tasks_of_session(session) if t.status in ("running", "finished")]
    if (jobs or tasks) and not force:
        users = []
        if jobs:
            users.append(f"{len(jobs)} job(s) ({', '.join(j.job_id for j in jobs[:5])})")
        if tasks:
            users.append(f"{len(tasks)} unfinished task(s) ({', '.join(t.task_id for t in tasks[:5])})")
        fail(
            f"session {session!r} is still used by {' and '.join(users)}: delete those first "
            "(agentwake jobs delete JOB_ID), or pass --force"
        )
    confirm(f"Delete session {session} (config and history) for good?", yes, what="delete a session")
    removed = store.delete_session(session)
    render.console().print(f"Deleted session {render.escape(session)} ({removed} item(s): config, history, lease).")
    if jobs or tasks:
        render.console().print(
            f"Left in place: {len(jobs)} job(s) and {len(tasks)} task(s) that name it; their wakes will fail "
            "until they are deleted.",
            style="yellow",
        )
