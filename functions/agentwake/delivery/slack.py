"""The ``slack`` channel: ``chat.postMessage`` to a conversation (or a thread) with the bot token,
answered by the message's ``ts`` (docs/channels.md, design §4-5).

Exactly once: each message carries metadata ``{"event_type": "agentwake_delivery", "event_payload":
{"delivery_id": ...}}``. After a crash between the post and its journal write, the core finds the
intent it wrote before the post (with :meth:`SlackChannel.probe`'s answer in it) and calls
:meth:`SlackChannel.find`, which reads ``conversations.history`` (``conversations.replies`` for a
thread) from the intent's time with ``include_all_metadata`` and matches that delivery id: found,
it is recorded (``found_by="lookup"``) and not posted again.

An approval request carries Block Kit buttons (``delivery/buttons.py``) where the stack takes the
clicks back (``SlackSigningSecretArn``); its ``text`` stays the notification's fallback.

The API base is the stack's ``AGENTWAKE_SLACK_API_URL``, never a session field. Answers are
classified here, once: 429 → the retry policy's wait; ``ok: false`` with a code no retry can fix
(``channel_not_found``, ``token_revoked``, …) → ``ChannelRefused`` naming the code and what to do;
a 5xx or an exchange broken after the request went out → ``DeliveryUncertain`` (the intent decides).

What the core calls: ``where`` and ``probe(delivery)`` (a dict: ``channel``, ``thread_ts?``,
``oldest``) for the intent written just before ``send(delivery)``; after a crash, ``find(delivery,
intent)`` with that intent (a mapping or an object with ``probe``, a dict or its JSON, and ``at``).
``retry.NOTHING_SENT`` lists what ``send`` raises when nothing was posted.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

from agentwake.delivery import Delivery, Receipt
from agentwake.delivery.buttons import offers_buttons, slack_blocks
from agentwake.delivery.kit import ChannelKit
from agentwake.delivery.retry import NotSent, RetryPolicy, Throttled, bot_token, cut, platform_base, retry_after_header
from agentwake.errors import ChannelRefused, DeliveryUncertain, DeliveryUnconfirmed
from agentwake.trust.redact import redact

#: the metadata event type every agentwake message carries (the lookup matches it)
EVENT_TYPE = "agentwake_delivery"
#: chat.postMessage truncates ``text`` past 40,000 characters: cut it ourselves, visibly
MAX_TEXT = 40_000
#: the lookup starts this long before the intent's time (our clock against Slack's)
LOOKUP_SKEW_S = 60.0
#: history pages read per lookup at most (each up to ``PAGE_LIMIT`` messages)
MAX_PAGES = 20
PAGE_LIMIT = 200

_FIX_TOKEN = (
    "put a valid bot token (xoxb-…) in the secret the stack parameter SlackBotTokenSecretArn names "
    "(or the channel's token_ref)"
)
#: ``ok: false`` codes no retry can fix, and what an operator does about each
_REFUSED: dict[str, str] = {
    "channel_not_found": "invite the bot to the channel (or check the id)",
    "not_in_channel": "invite the bot to the channel (/invite @bot)",
    "is_archived": "unarchive the channel",
    "invalid_auth": _FIX_TOKEN,
    "not_authed": _FIX_TOKEN,
    "token_revoked": _FIX_TOKEN,
    "token_expired": _FIX_TOKEN,
    "account_inactive": _FIX_TOKEN,
    "no_permission": "give the app access to the conversation",
    "missing_scope": "add the scope to the Slack app and reinstall it",
    "restricted_action": "a workspace setting stops the bot posting there: ask a Slack admin",
    "ekm_access_denied": "a workspace administrator suspended posting: ask a Slack admin",
    "access_denied": "the workspace denies the app access: ask a Slack admin",
    "team_access_not_granted": "the app is not installed for that workspace: install it",
    "thread_not_found": "the thread's parent message is gone: remove thread_ts",
}
#: ``ok: false`` codes that say nothing was done, worth a short retry
_NOT_SENT = {"service_unavailable", "request_timeout"}
#: ``ok: false`` codes after which the message may exist (Slack: "some aspect may have succeeded")
_IN_DOUBT = {"internal_error", "fatal_error"}


class SlackChannel:
    """Post a delivery to one Slack conversation; answer its ``ts`` as the receipt."""

    confirms: ClassVar[str] = "lookup"

    def __init__(self, spec: Any, kit: ChannelKit) -> None:
        self.spec = spec
        self.name = spec.target()
        self.kit = kit
        self._base = platform_base(kit, "slack_api_url", "Slack", "https://slack.com/api/")
        self._token = bot_token(
            kit,
            spec.token_ref,
            setting="slack_token_ref",
            parameter="SlackBotTokenSecretArn",
            shown=f"slack channel {spec.channel}",
        )
        self._policy = RetryPolicy(kit.clock, "Slack")

    def __repr__(self) -> str:  # never the token
        return f"SlackChannel(channel={self.spec.channel!r}, thread_ts={self.spec.thread_ts!r})"

    @property
    def where(self) -> str:
        """Where a message goes: ``C0123`` or ``C0123/thread_ts`` (the intent's and receipt's ``where``)."""
        return f"{self.spec.channel}/{self.spec.thread_ts}" if self.spec.thread_ts else self.spec.channel

    def probe(self, delivery: Delivery) -> dict[str, str]:
        """What :meth:`find` needs after a crash, stored in the intent (``probe``) just before the
        post: the channel, the thread, and ``oldest`` (epoch seconds as Slack writes a ts, a minute
        before now for clock skew)."""
        out = {"channel": self.spec.channel, "oldest": f"{self.kit.clock.wall() - LOOKUP_SKEW_S:.6f}"}
        if self.spec.thread_ts:
            out["thread_ts"] = self.spec.thread_ts
        return out

    # --- send ------------------------------------------------------------------------------

    def send(self, delivery: Delivery) -> Receipt:
        payload: dict[str, Any] = {
            "channel": self.spec.channel,
            "text": cut(delivery.text, MAX_TEXT),
            "metadata": {"event_type": EVENT_TYPE, "event_payload": {"delivery_id": delivery.delivery_id}},
        }
        if self.spec.thread_ts:
            payload["thread_ts"] = self.spec.thread_ts
        approval_id = (delivery.approval or {}).get("approval_id")
        if approval_id and offers_buttons(self.kit.settings, self.spec.token_ref, "slack"):
            # an approval request: its text and Approve/Reject (the id only, never the token)
            payload["blocks"] = slack_blocks(delivery.text, str(approval_id))
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        shown = f"slack {self.where}"

        def once() -> Receipt:
            response = self._policy.exchange(
                "POST",
                self._base + "chat.postMessage",
                shown=shown,
                headers=self._headers("application/json; charset=utf-8"),
                body=body,
                settings=self.kit.settings,
            )
            answer = self._answer(response, delivery, shown, reading=False)
            ts = answer.get("ts")
            if not isinstance(ts, str) or not ts:
                raise DeliveryUncertain(f"Slack answered ok for {shown} without a ts; the message may exist")
            return Receipt(channel="slack", target=self.name, where=self.where, ids=(ts,))

        return self._policy.call(once, shown=shown)

    # --- find (after a crash, the intent says a post was in flight) ----------------------------

    def find(self, delivery: Delivery, intent: Any) -> Receipt | None:
        """The message this delivery posted, looked up by its metadata from the intent's time
        (``found_by="lookup"``); None when Slack has no such message (the core posts it). Raises
        ``DeliveryUnconfirmed`` when the lookup cannot tell (a history scope is missing, too many
        messages since), ``ChannelRefused``/``ChannelThrottled``/``ChannelUnavailable`` as a send."""
        probe = _probe_of(intent)
        channel = str(probe.get("channel") or self.spec.channel)
        thread_ts = probe.get("thread_ts") or None
        oldest = str(probe.get("oldest") or _oldest_from(intent, self.kit.clock.wall()))
        method = "conversations.replies" if thread_ts else "conversations.history"
        where = f"{channel}/{thread_ts}" if thread_ts else channel
        shown = f"slack {where}"
        cursor = ""
        for _ in range(MAX_PAGES):
            params = {
                "channel": channel,
                "oldest": oldest,
                "inclusive": "true",
                "include_all_metadata": "true",
                "limit": str(PAGE_LIMIT),
            }
            if thread_ts:
                params["ts"] = str(thread_ts)
            if cursor:
                params["cursor"] = cursor
            form = urllib.parse.urlencode(params).encode("ascii")

            def once(form: bytes = form) -> dict[str, Any]:
                response = self._policy.exchange(
                    "POST",
                    self._base + method,
                    shown=shown,
                    headers=self._headers("application/x-www-form-urlencoded"),
                    body=form,
                    settings=self.kit.settings,
                    idempotent=True,
                )
                return self._answer(response, delivery, shown, reading=True)

            page = self._policy.call(once, shown=shown)
            for message in page.get("messages") or ():
                if _ours(message, delivery.delivery_id):
                    ts = str(message.get("ts", ""))
                    return Receipt(channel="slack", target=self.name, where=where, ids=(ts,), found_by="lookup")
            meta = page.get("response_metadata") or {}
            cursor = str(meta.get("next_cursor") or "") if isinstance(meta, dict) else ""
            if not cursor:
                return None
        raise DeliveryUnconfirmed(
            f"Slack: looked through {MAX_PAGES} pages of {shown} since {oldest} without reaching the end: "
            f"check whether delivery {delivery.delivery_id} is there and redrive with --delivered or --resend"
        )

    # --- the answer ------------------------------------------------------------------------

    def _headers(self, content_type: str) -> dict[str, str]:
        return {
            "Content-Type": content_type,
            "Authorization": f"Bearer {self._token}",
            "User-Agent": "agentwake-slack/1",
        }

    def _answer(self, response: Any, delivery: Delivery, shown: str, *, reading: bool) -> dict[str, Any]:
        """Slack's JSON answer when ``ok``; else the failure, classified once."""
        status = response.status
        if status == 429:
            raise Throttled(retry_after_header(response.headers))
        try:
            answer = json.loads(response.body)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, dict):
            if reading:
                raise NotSent(f"HTTP {status} without Slack's JSON answer")
            if 200 <= status < 300 or status >= 500:
                raise DeliveryUncertain(
                    f"Slack answered HTTP {status} for {shown} without its JSON answer; the message may exist"
                )
            raise ChannelRefused(f"Slack: HTTP {status} for {shown}: check the stack's AGENTWAKE_SLACK_API_URL")
        if answer.get("ok") is True:
            return answer
        code = str(answer.get("error") or f"HTTP {status}")[:80]
        if code in ("ratelimited", "rate_limited"):
            raise Throttled(retry_after_header(response.headers))
        if code in _NOT_SENT:
            raise NotSent(code)
        if code in _IN_DOUBT or (status >= 500 and code not in _REFUSED):
            if reading:
                raise NotSent(code)
            raise DeliveryUncertain(f"Slack answered {code} for {shown}; the message may exist")
        if code == "missing_scope" and reading:
            needed = _scope(answer) or "channels:history, groups:history, im:history or mpim:history"
            raise DeliveryUnconfirmed(
                f"Slack: missing_scope for the lookup in {shown}: the app needs {needed} to tell whether delivery "
                f"{delivery.delivery_id} was posted; add it and redrive, or check the conversation and redrive with "
                "--delivered or --resend"
            )
        raise ChannelRefused(redact(self._refusal(code, answer, delivery, shown)))

    def _refusal(self, code: str, answer: Mapping[str, Any], delivery: Delivery, shown: str) -> str:
        todo = _REFUSED.get(code, "see https://docs.slack.dev/reference/methods/chat.postMessage for the code")
        if code == "missing_scope":
            todo = f"add the scope {_scope(answer) or 'chat:write'} to the Slack app and reinstall it"
        change = f'agentwake sessions put {delivery.session_id} --delivery \'{{"type":"slack","channel":"…"}}\''
        return f"Slack: {code} for {self.spec.channel}: {todo}, or change the session's delivery: {change}"


def _scope(answer: Mapping[str, Any]) -> str:
    needed = answer.get("needed")
    return str(needed)[:120] if isinstance(needed, str) and needed else ""


def _ours(message: Any, delivery_id: str) -> bool:
    if not isinstance(message, dict):
        return False
    meta = message.get("metadata")
    if not isinstance(meta, dict) or meta.get("event_type") != EVENT_TYPE:
        return False
    payload = meta.get("event_payload")
    return isinstance(payload, dict) and payload.get("delivery_id") == delivery_id


def _field(intent: Any, name: str) -> Any:
    if isinstance(intent, Mapping):
        return intent.get(name)
    return getattr(intent, name, None)


def _probe_of(intent: Any) -> dict[str, Any]:
    probe = _field(intent, "probe")
    if isinstance(probe, str):
        try:
            probe = json.loads(probe)
        except ValueError:
            probe = None
    return dict(probe) if isinstance(probe, Mapping) else {}


def _oldest_from(intent: Any, now: float) -> str:
    """``oldest`` from the intent's ISO time where its probe has none (a minute earlier for skew);
    the last day where it has no time either (a lookup over more pages, never a missed message)."""
    at = _field(intent, "at")
    try:
        when = datetime.fromisoformat(str(at).replace("Z", "+00:00")).timestamp() if at else now - 86_400
    except ValueError:
        when = now - 86_400
    return f"{when - LOOKUP_SKEW_S:.6f}"
