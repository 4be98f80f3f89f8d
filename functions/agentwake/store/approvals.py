"""Approval requests on the table (``APPROVAL#{approval}`` / ``APPROVAL``; docs/table-design.md):
the request write, the one decision write, the expiry chain's place, the resume mark, and reads.

Every state change is one conditional write: a request moves from ``pending`` only once, and the
decision's journal step (``STEP#{n}.decision.{i}``) is written only by that same transaction, so
the request and the run's journal never disagree about what was decided.
"""

from __future__ import annotations

import json
from typing import Any

from agentwake.domain.approvals import Approval
from agentwake.domain.models import utcnow_iso
from agentwake.domain.steps import approval_delivery_id, asked_key, decision_key
from agentwake.domain.steps import approval_key as approval_step_key
from agentwake.errors import ForgedDecision
from agentwake.store.codec import key
from agentwake.store.journal import Journals
from agentwake.store.keys import (
    TREE_APPROVAL,
    approval_key,
    approvals_gsi_pk,
    delivery_sk,
    run_key,
    run_pk,
    step_sk,
    tree_keys,
)
from agentwake.store.outcomes import outcome_unknown
from agentwake.store.port_approvals import Decided, Requested
from agentwake.store.table import Table, pages


class Approvals:
    """Approval requests: request, decide, claim_check, the resume mark, reads."""

    def __init__(self, table: Table, journals: Journals) -> None:
        self.table = table
        self.journals = journals

    # --- items -----------------------------------------------------------------------------

    def _item(self, approval: Approval) -> dict[str, Any]:
        return self.table.item(
            approval,
            *approval_key(approval.approval_id),
            gsi1pk=approvals_gsi_pk(approval.session_id),
            gsi1sk=f"{approval.requested_at}#{approval.approval_id}",
            expires_at=int(self.table.now()) + self.table.journal_ttl_s,
            **tree_keys(
                approval.session_id, approval.run_id, approval.requested_at, TREE_APPROVAL, approval.approval_id
            ),
        )

    def get(self, approval_id: str) -> Approval | None:
        item = self.table.read_item(*approval_key(approval_id))
        return None if item is None else self.table.load(Approval, item)

    def load(self, item: dict[str, Any]) -> Approval:
        return self.table.load(Approval, item)

    def delivered_to(self, approval: Approval) -> list[dict[str, Any]]:
        """The receipts (``Receipt.to_dict()``) on the marker of the request's delivery: where the
        person was asked (a Slack channel and ``ts``, a Telegram chat and ``message_id``). [] when it
        was not delivered, or its receipts were not kept."""
        delivery_id = approval_delivery_id(approval.run_id, approval.step, approval.call_index)
        item = self.table.read_item(run_pk(approval.run_id), delivery_sk(delivery_id))
        raw = ((item or {}).get("receipts") or {}).get("S")
        try:
            receipts = json.loads(raw) if raw else []
        except ValueError:
            return []
        return [r for r in receipts if isinstance(r, dict)] if isinstance(receipts, list) else []

    # --- request -----------------------------------------------------------------------------

    def request(self, approval: Approval, step: dict[str, Any]) -> Requested:
        """Record the request (pending) and its journal step (``STEP#{n}.approval.{i}``) in one
        transaction. If it exists already (a retry of the run re-parks the same call): the same
        pending request whose delivery was not reported (no ``asked`` step) gets this caller's
        token (``token_gen`` + 1), so the resend carries a token that works; otherwise it stays as
        it is and the caller sends nothing with its token."""
        items = [
            (
                "approval",
                {
                    "Put": {
                        "TableName": self.table.name,
                        "Item": self._item(approval),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ),
            (
                "step",
                self.journals.step_put(approval.run_id, approval_step_key(approval.step, approval.call_index), step),
            ),
        ]
        try:
            self.table.transact(items)
            return Requested(approval, token_current=True)
        except Exception as exc:
            failed = getattr(exc, "failed_tags", None)
            if not (failed and "approval" in failed) and not outcome_unknown(exc):
                raise
        stored = self.get(approval.approval_id)
        if stored is None:
            raise RuntimeError(f"approval {approval.approval_id}: the request write's outcome is unknown; retry")
        if stored.token_sha256 == approval.token_sha256:
            return Requested(stored, token_current=True)  # it landed: only its answer was lost
        asked = self.table.read_item(run_pk(stored.run_id), step_sk(asked_key(stored.step, stored.call_index)))
        if not stored.pending or asked is not None or stored.run_id != approval.run_id:
            return Requested(stored, token_current=False)
        return self._rotate(stored, approval.token_sha256)

    def _rotate(self, stored: Approval, token_sha256: str) -> Requested:
        try:
            self.table.db.update_item(
                TableName=self.table.name,
                Key=key(*approval_key(stored.approval_id)),
                UpdateExpression="SET token_sha256 = :h, token_gen = :next",
                ConditionExpression="#s = :pending AND token_gen = :read",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={
                    ":h": {"S": token_sha256},
                    ":next": {"N": str(stored.token_gen + 1)},
                    ":read": {"N": str(stored.token_gen)},
                    ":pending": {"S": "pending"},
                },
            )
        except self.table.db.exceptions.ConditionalCheckFailedException:
            again = self.get(stored.approval_id)
            return Requested(again or stored, token_current=False)
        rotated = stored.model_copy(update={"token_sha256": token_sha256, "token_gen": stored.token_gen + 1})
        return Requested(rotated, token_current=True)

    def asked_item(self, approval_id: str, at: str | None = None) -> tuple[str, dict[str, Any]]:
        """The park transaction's approval update: ``asked_at``, on ``state = pending`` (a request
        decided meanwhile cancels the park: the run goes on in place)."""
        return (
            "approval",
            {
                "Update": {
                    "TableName": self.table.name,
                    "Key": key(*approval_key(approval_id)),
                    "UpdateExpression": "SET asked_at = :at",
                    "ConditionExpression": "#s = :pending",
                    "ExpressionAttributeNames": {"#s": "state"},
                    "ExpressionAttributeValues": {":at": {"S": at or utcnow_iso()}, ":pending": {"S": "pending"}},
                }
            },
        )

    # --- decide ------------------------------------------------------------------------------

    def decide(
        self,
        approval: Approval,
        decision: str,
        *,
        by: str,
        via: str,
        reason: str | None = None,
        expired: bool = False,
        token_sha256: str | None = None,
        at: str | None = None,
        before: float | None = None,
    ) -> Decided:
        """The one decision write: the request (``state = pending``, and the token's hash on the
        token path), its ``decision`` journal step (never written before) and the run's ``decided``
        in one transaction. Refused on the request: read it back and return it as it stands
        (``written`` False); the caller says whether that is the same decision."""
        at = at or utcnow_iso()
        decided = approval.model_copy(
            update={
                "state": decision,
                "decided_by": by,
                "decided_via": via,
                "reason": reason,
                "decided_at": at,
                "expired": expired,
            }
        )
        values: dict[str, Any] = {
            ":st": {"S": decision},
            ":by": {"S": by},
            ":via": {"S": via},
            ":at": {"S": at},
            ":exp": {"BOOL": expired},
            ":pending": {"S": "pending"},
        }
        update = "SET #s = :st, decided_by = :by, decided_via = :via, decided_at = :at, expired = :exp"
        if reason:
            update += ", reason = :why"
            values[":why"] = {"S": reason}
        condition = "#s = :pending"
        if before is not None:  # a person's decision: only while the request has not expired
            condition += " AND expiry_epoch > :now"
            values[":now"] = {"N": str(before)}
        if token_sha256 is not None:
            condition += " AND token_sha256 = :h"
            values[":h"] = {"S": token_sha256}
        step = self.journals.step_put(
            approval.run_id, decision_key(approval.step, approval.call_index), decided.decision_step()
        )
        step["Put"]["ConditionExpression"] = "attribute_not_exists(pk)"
        items = [
            (
                "approval",
                {
                    "Update": {
                        "TableName": self.table.name,
                        "Key": key(*approval_key(approval.approval_id)),
                        "UpdateExpression": update,
                        "ConditionExpression": condition,
                        "ExpressionAttributeNames": {"#s": "state"},
                        "ExpressionAttributeValues": values,
                    }
                },
            ),
            ("step", step),
            (
                "run",
                {
                    "Update": {
                        "TableName": self.table.name,
                        "Key": key(*run_key(approval.run_id)),
                        "UpdateExpression": "SET decided = :id",
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeValues": {":id": {"S": approval.approval_id}},
                    }
                },
            ),
        ]
        try:
            self.table.transact(items)
        except Exception as exc:
            failed = getattr(exc, "failed_tags", None)
            if not (failed and ("approval" in failed or "step" in failed)) and not outcome_unknown(exc):
                raise
            stored = self.get(approval.approval_id)
            if stored is None:
                raise
            if outcome_unknown(exc) and stored.state == decision and stored.decided_at == at:
                return Decided(stored, written=True)  # it landed: only its answer was lost
            if stored.pending:
                if before is not None and stored.expiry_epoch <= before:
                    return Decided(stored, written=False)  # expired meanwhile: the caller lets time decide
                if token_sha256 is not None and stored.token_sha256 != token_sha256:
                    raise ForgedDecision(
                        f"approval {approval.approval_id}: that decision token is not current"
                    ) from exc
                raise  # nothing landed: the caller retries
            return Decided(stored, written=False)
        return Decided(decided, written=True)

    # --- the expiry chain and the resume -----------------------------------------------------

    def claim_check(self, approval_id: str, *, after: str | None, check: str) -> bool:
        """Check ``check``, sent by ``after`` (None: the first of the chain), takes the request's one
        place in its chain (``check_id``): False if another successor of ``after`` took it first."""
        values: dict[str, Any] = {":c": {"S": check}}
        if after is None:
            condition = "attribute_exists(pk) AND attribute_not_exists(check_id)"
        else:
            condition = "check_id = :after"
            values[":after"] = {"S": after}
        try:
            self.table.db.update_item(
                TableName=self.table.name,
                Key=key(*approval_key(approval_id)),
                UpdateExpression="SET check_id = :c",
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
            )
        except self.table.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def resumed_item(self, approval_id: str, attempt: int, at: str | None = None) -> tuple[str, dict[str, Any]]:
        return resumed_item(self.table, approval_id, attempt, at)

    def set_resume(self, approval_id: str, resume: dict[str, Any]) -> None:
        """Keep the copy that re-queues the run (``{kind, body, attributes, target}``)."""
        self.table.db.update_item(
            TableName=self.table.name,
            Key=key(*approval_key(approval_id)),
            UpdateExpression="SET #r = :r",
            ExpressionAttributeNames={"#r": "resume"},
            ExpressionAttributeValues={":r": {"S": json.dumps(resume, separators=(",", ":"))}},
        )

    # --- reads -------------------------------------------------------------------------------

    def session_approvals(
        self, session_id: str, *, limit: int = 50, before: str | None = None, state: str | None = None
    ) -> tuple[list[Approval], str | None]:
        """A session's requests, newest first (a Query of ``APPROVALS#{session}`` on gsi1): at most
        ``limit``, before the cursor ``before``; ``state``: only those in it. Returns the page and the
        next cursor (None: no more)."""
        cond = "gsi1pk = :p"
        values: dict[str, Any] = {":p": {"S": approvals_gsi_pk(session_id)}}
        if before is not None:
            cond += " AND gsi1sk < :before"
            values[":before"] = {"S": before}
        request: dict[str, Any] = {
            "TableName": self.table.name,
            "IndexName": "gsi1",
            "KeyConditionExpression": cond,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if state is not None:
            request["FilterExpression"] = "#s = :st"
            request["ExpressionAttributeNames"] = {"#s": "state"}
            values[":st"] = {"S": state}
        resp = self.table.db.query(**request)
        # the next page starts after the last item *read* (a state filter may have kept none of them)
        last = resp.get("LastEvaluatedKey")
        return [self.load(i) for i in resp.get("Items", [])], (last["gsi1sk"]["S"] if last else None)

    def all_approvals(self, *, state: str | None = None) -> list[Approval]:
        """Every request on the table (a Scan, as ``tasks list`` does): the operator's list."""
        request: dict[str, Any] = {
            "TableName": self.table.name,
            "FilterExpression": "begins_with(pk, :p) AND sk = :sk",
            "ExpressionAttributeValues": {":p": {"S": "APPROVAL#"}, ":sk": {"S": "APPROVAL"}},
        }
        if state is not None:
            request["FilterExpression"] += " AND #s = :st"
            request["ExpressionAttributeNames"] = {"#s": "state"}
            request["ExpressionAttributeValues"][":st"] = {"S": state}
        found = [self.load(i) for i in pages(self.table.db.scan, request)]
        return sorted(found, key=lambda a: a.requested_at, reverse=True)


def resumed_item(table: Table, approval_id: str, attempt: int, at: str | None = None) -> tuple[str, dict[str, Any]]:
    """The resume's mark, in the run's attempt transaction at its start (``Runs.begin_run``): ``resumed_at``,
    ``resumed_attempt`` on a decided request."""
    return (
        "approval",
        {
            "Update": {
                "TableName": table.name,
                "Key": key(*approval_key(approval_id)),
                "UpdateExpression": "SET resumed_at = :at, resumed_attempt = :n",
                "ConditionExpression": "attribute_exists(pk) AND #s <> :pending",
                "ExpressionAttributeNames": {"#s": "state"},
                "ExpressionAttributeValues": {
                    ":at": {"S": at or utcnow_iso()},
                    ":n": {"N": str(attempt)},
                    ":pending": {"S": "pending"},
                },
            }
        },
    )
