"""The suite gives the runtime the outbound environment the local stack gives its functions, and
the strict one is the deployed template's (tests/support/outbound.py names both)."""

from __future__ import annotations

from agentwake.settings import Settings
from agentwake.trust.outbound import OutboundPolicy, default_policy
from tests.support.aws import TEMPLATE_PATH
from tests.support.outbound import DEPLOYED_OUTBOUND_ENV, LOCAL_OUTBOUND_ENV


def test_the_suites_outbound_environment_is_the_local_stacks() -> None:
    from agentwake_local.stack import LOCAL_OUTBOUND_ENV as STACK_ENV

    assert LOCAL_OUTBOUND_ENV == STACK_ENV
    local = Settings.from_env({"AGENTWAKE_TABLE": "t", **LOCAL_OUTBOUND_ENV})
    assert OutboundPolicy.from_settings(local) == OutboundPolicy(allow_loopback=True, allow_http=True)


def test_the_strict_outbound_environment_is_the_deployed_templates() -> None:
    from agentwake_local.template import load_template

    variables = load_template(TEMPLATE_PATH).body["Globals"]["Function"]["Environment"]["Variables"]
    assert {name: variables[name] for name in DEPLOYED_OUTBOUND_ENV} == DEPLOYED_OUTBOUND_ENV
    deployed = Settings.from_env({"AGENTWAKE_TABLE": "t", **DEPLOYED_OUTBOUND_ENV})
    assert OutboundPolicy.from_settings(deployed) == OutboundPolicy()


def test_every_test_reads_the_local_policy_from_settings(resources: object) -> None:
    # GIVEN the autouse environment and a stack's settings  THEN the runtime's own default is local
    assert default_policy() == OutboundPolicy(allow_loopback=True, allow_http=True)
