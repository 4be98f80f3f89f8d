"""The approval rule of a tool spec (domain/approvals.py): what it gates, its bounds, what a person is shown."""

from __future__ import annotations

import pytest

from agentwake.domain.approvals import (
    DEFAULT_EXPIRES_IN_S,
    HIDDEN,
    approval_id,
    decision_result,
    parse_rule,
    shown_arguments,
)


def test_always_gates_every_call_with_the_defaults() -> None:
    rule = parse_rule("always")
    assert rule is not None
    assert rule.matches({}) == "always"
    assert (rule.expires_in_s, rule.on_expiry, rule.deciders) == (DEFAULT_EXPIRES_IN_S, "reject", ["owners", "token"])


@pytest.mark.parametrize(
    ("condition", "args", "gated"),
    [
        ({"arg": "amount", "gt": 100}, {"amount": 101}, True),
        ({"arg": "amount", "gt": 100}, {"amount": 100}, False),
        ({"arg": "amount", "ge": 100}, {"amount": 100}, True),
        ({"arg": "amount", "lt": 0}, {"amount": "-5"}, False),  # a comparison holds only for a number
        ({"arg": "to", "glob": "*@*.external.com"}, {"to": "a@b.external.com"}, True),
        ({"arg": "to", "glob": "*@*.external.com"}, {"to": "a@internal.com"}, False),
        ({"arg": "order.country", "in": ["FR", "DE"]}, {"order": {"country": "FR"}}, True),
        ({"arg": "order.country", "eq": "FR"}, {"order": {}}, False),  # missing matches only exists: false
        ({"arg": "order.country", "exists": False}, {"order": {}}, True),
        ({"arg": "dry", "ne": True}, {"dry": False}, True),
    ],
)
def test_a_condition_gates_on_parsed_arguments(condition: dict, args: dict, gated: bool) -> None:
    rule = parse_rule({"when": [condition]})
    assert rule is not None
    assert (rule.matches(args) is not None) is gated


def test_the_match_says_which_condition_in_words() -> None:
    rule = parse_rule({"when": [{"arg": "to", "eq": "x"}, {"arg": "amount", "gt": 100}]})
    assert rule is not None
    assert rule.matches({"amount": 500}) == "amount > 100"


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ({"when": [{"arg": "a", "gt": 1, "lt": 5}]}, "exactly one operator"),
        ({"when": [{"arg": "a"}]}, "exactly one operator"),
        ({"when": [{"arg": "a.b.c.d.e", "exists": True}]}, "dot path"),
        ({"when": [{"arg": "a", "exists": True}] * 9}, "at most 8"),
        ({"when": [{"arg": "a", "glob": "x" * 201}]}, "at most 200"),
        ({"when": [{"arg": "a", "in": list(range(51))}]}, "at most 50"),
        ({"expires_in_s": 59}, "greater than or equal to 60"),
        ({"expires_in_s": 604_801}, "less than or equal to 604800"),
        ({"on_expiry": "maybe"}, "on_expiry"),
        ({"deciders": ["everyone"]}, "deciders"),
        ({"colour": "red"}, "colour"),
        ("sometimes", "always"),
    ],
)
def test_a_bad_rule_is_refused_saying_why(raw: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_rule(raw)


def test_a_person_is_shown_arguments_hidden_and_redacted() -> None:
    shown = shown_arguments(
        {"to": "a@b.c", "api_key": "k-123", "nested": {"pin": "1234"}, "note": "x" * 20_000},
        ["api_key", "nested.pin"],
    )
    assert shown["api_key"] == HIDDEN
    assert shown["nested"]["pin"] == HIDDEN
    assert shown["to"] == "a@b.c"
    assert len(shown["note"]) < 9_000


def test_the_approval_id_is_stable_per_call() -> None:
    assert approval_id("bg:t1", 2, 0) == approval_id("bg:t1", 2, 0)
    assert approval_id("bg:t1", 2, 0) != approval_id("bg:t1", 2, 1)
    assert approval_id("bg:t1", 2, 0).startswith("apr-")


def test_the_model_reads_who_rejected_and_why() -> None:
    assert decision_result("rejected", by="alice", reason="wrong customer") == (
        'not run: alice rejected this call: "wrong customer"'
    )
    # an owner's decision over the API: whom it was made on behalf of, never the owner's principal
    owner = "arn:aws:iam::123456789012:role/product"
    assert decision_result("rejected", by=f"{owner} on behalf of bob", via="api-owner") == (
        "not run: bob rejected this call (no reason given)"
    )
    assert decision_result("rejected", by=owner, via="api-owner") == (
        "not run: the session's owner rejected this call (no reason given)"
    )
    assert decision_result("rejected", by="expiry", expired=True, expires_in_s=86400) == (
        "not run: nobody decided within 86400 s, so it was rejected by default"
    )


def _tool(**kw: object) -> dict:
    return {"type": "http", "name": "create_ticket", "description": "d", "url": "https://tickets.example.com/t", **kw}


def test_the_config_write_refuses_a_bad_rule_saying_why() -> None:
    from agentwake.domain.models import SessionConfig
    from agentwake.errors import ConfigError
    from agentwake.trust.session_checks import ConfigRules, check_session

    def config(approval: object) -> SessionConfig:
        return SessionConfig(session_id="s1", providers=[{"type": "scripted"}], tools=[_tool(approval=approval)])

    check_session(config("always"), ConfigRules())
    with pytest.raises(ConfigError, match="create_ticket.*expires_in_s"):
        check_session(config({"expires_in_s": 5}), ConfigRules())


def test_a_subagent_may_not_use_a_tool_that_asks_but_may_be_gated_itself() -> None:
    from agentwake.agent.subagents import parse_subagents
    from agentwake.errors import ConfigError

    tools = [_tool(approval="always")]
    with pytest.raises(ConfigError, match="asks for approval"):
        parse_subagents([{"name": "r", "persona": "p", "tools": ["create_ticket"]}], tools)
    (spec,) = parse_subagents([{"name": "r", "persona": "p", "approval": "always"}], tools)
    assert spec.approval == "always"
