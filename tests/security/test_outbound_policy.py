"""Build 2 and 3: secret references are scoped, and every outbound URL passes one policy
(agentwake.trust.outbound): https only, no loopback/link-local/private/non-HTTP targets, checked after DNS
resolution and after redirects, the connection made to the address that was checked. A refused URL
is a configuration error and nothing is sent (DESIGN §6)."""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Callable

import pytest
from werkzeug import Response

from agentwake.agent.providers import parse_spec
from agentwake.agent.providers.openai_compat import OpenAICompatProvider
from agentwake.agent.types import ChatRequest
from agentwake.delivery import Delivery
from agentwake.delivery.factory import build_channel
from agentwake.delivery.webhook import WebhookChannel
from agentwake.domain.conversation import Message
from agentwake.errors import ConfigError, DeliveryError, OutboundRefused, SecretRefRefused
from agentwake.trust import outbound
from agentwake.trust.outbound import OutboundPolicy, address_refusal, check_url, http_exchange
from agentwake.trust.secrets import SecretScope, resolve_secret
from tests.security.servers import RawServer

STRICT = OutboundPolicy()  # what the deployed template sets
LOOPBACK_OK = OutboundPolicy(allow_loopback=True, allow_http=True)  # what the local stack sets
DELIVERY = Delivery(delivery_id="bg:t#0#0", run_id="bg:t", session_id="s", text="hello")


def request() -> ChatRequest:
    return ChatRequest(messages=(Message(role="user", content="hi"),), timeout=5.0)


class Recorder(RawServer):
    """Answers 200 with an OpenAI-shaped reply; records every request it gets."""

    def behave(self, conn: socket.socket) -> None:
        body = json.dumps({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


# --- scoped secret references ----------------------------------------------------------------------


def test_env_reference_to_the_functions_own_credentials_is_refused_before_any_call(
    httpserver, monkeypatch: pytest.MonkeyPatch, stackless_settings: None
) -> None:
    # GIVEN the function's AWS credentials in its environment and a provider that names them
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    provider = OpenAICompatProvider(
        id="p", base_url=httpserver.url_for("/v1"), model="m", api_key_ref="env:AWS_SECRET_ACCESS_KEY"
    )
    # WHEN the provider is called
    with pytest.raises(SecretRefRefused) as info:
        provider.complete(request())
    # THEN it is refused with the allowed prefix in the message, and nothing reached the server
    assert "AGENTWAKE_SECRET_" in str(info.value)
    assert isinstance(info.value, ConfigError)
    assert httpserver.log == []


@pytest.mark.parametrize(
    ("ref", "allowed"),
    [
        ("env:AWS_SECRET_ACCESS_KEY", "AGENTWAKE_SECRET_"),
        ("env:AGENTWAKE_TABLE", "AGENTWAKE_SECRET_"),
        ("secretsmanager:prod/db-password", "agentwake/"),
        ("secretsmanager:arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf", "agentwake/"),
        ("ssm:/prod/db/password", "/agentwake/"),
        ("ssm:/agentwake/../prod/password", "/agentwake/"),
    ],
)
def test_references_outside_the_scope_are_refused_with_the_allowed_prefix(ref: str, allowed: str) -> None:
    with pytest.raises(SecretRefRefused) as info:
        resolve_secret(ref, {"AWS_SECRET_ACCESS_KEY": "x", "AGENTWAKE_TABLE": "t"}, scope=SecretScope())
    assert allowed in str(info.value)


def test_references_inside_the_scope_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_secret("env:AGENTWAKE_SECRET_LLM", {"AGENTWAKE_SECRET_LLM": "v4lue-1"}) == "v4lue-1"
    # the stack's OpenAIApiKeySecretArn is allowed as it is, whatever its name
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:openai-AbCdEf"
    scope = SecretScope(extra_secret_arn=arn)
    from agentwake.trust.secrets import check_ref

    assert check_ref(f"secretsmanager:{arn}", scope) == ("secretsmanager", arn)
    assert check_ref("secretsmanager:agentwake/llm-key", scope)[1] == "agentwake/llm-key"
    assert check_ref("ssm:/agentwake/llm-key", scope)[1] == "/agentwake/llm-key"


def test_the_stacks_bot_tokens_resolve_whatever_their_names_and_no_other_arn_does() -> None:
    # GIVEN a stack deployed with SlackBotTokenSecretArn and TelegramBotTokenSecretArn outside SecretsPrefix
    from agentwake.settings import Settings
    from agentwake.trust.secrets import check_ref
    from agentwake.trust.session_checks import ConfigRules, _check_delivery

    slack = "arn:aws:secretsmanager:us-east-1:123456789012:secret:team/slack-bot-AbCdEf"
    telegram = "arn:aws:secretsmanager:us-east-1:123456789012:secret:telegram-XyZ123"
    settings = Settings(
        table_name="t", slack_token_ref=f"secretsmanager:{slack}", telegram_token_ref=f"secretsmanager:{telegram}"
    )
    scope = SecretScope.from_settings(settings)
    # THEN the channels' default tokens pass the scope where a bot token is resolved ...
    assert check_ref(f"secretsmanager:{slack}", scope, bot_token=True) == ("secretsmanager", slack)
    assert check_ref(f"secretsmanager:{telegram}", scope, bot_token=True) == ("secretsmanager", telegram)
    # ... and a neighbouring secret outside SecretsPrefix is still refused
    with pytest.raises(SecretRefRefused):
        check_ref(
            "secretsmanager:arn:aws:secretsmanager:us-east-1:123456789012:secret:team/other-AbCdEf",
            scope,
            bot_token=True,
        )
    # ... and no other reference may name them: a webhook's secret_ref naming the Slack token is refused
    rules = ConfigRules(scope=scope)
    webhook = {"type": "webhook", "url": "https://hooks.example.com/x", "secret_ref": f"secretsmanager:{slack}"}
    with pytest.raises(SecretRefRefused):
        _check_delivery(webhook, rules)
    slack_channel = {"type": "slack", "channel": "C0123ABCD", "token_ref": f"secretsmanager:{slack}"}
    _check_delivery(slack_channel, rules)  # a Slack channel's token_ref may


def test_the_callback_secrets_resolve_only_for_the_callback_never_as_a_bot_token_or_a_session_ref() -> None:
    # GIVEN a stack deployed with SlackSigningSecretArn and TelegramWebhookSecretArn outside SecretsPrefix
    from agentwake.settings import Settings
    from agentwake.trust.secrets import check_ref
    from agentwake.trust.session_checks import ConfigRules, _check_delivery

    signing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:team/slack-signing-AbCdEf"
    webhook = "arn:aws:secretsmanager:us-east-1:123456789012:secret:telegram-webhook-XyZ123"
    settings = Settings(
        table_name="t",
        slack_signing_secret_ref=f"secretsmanager:{signing}",
        telegram_webhook_secret_ref=f"secretsmanager:{webhook}",
    )
    scope = SecretScope.from_settings(settings)
    # THEN the callback endpoint resolves them ...
    assert check_ref(f"secretsmanager:{signing}", scope, callback=True) == ("secretsmanager", signing)
    assert check_ref(f"secretsmanager:{webhook}", scope, callback=True) == ("secretsmanager", webhook)
    # ... and nothing else may name them: not a channel's bot token (it would go to the platform as a
    # bearer token or in Telegram's URL), not a webhook's secret_ref
    for arn in (signing, webhook):
        with pytest.raises(SecretRefRefused):
            check_ref(f"secretsmanager:{arn}", scope, bot_token=True)
        with pytest.raises(SecretRefRefused):
            check_ref(f"secretsmanager:{arn}", scope)
        rules = ConfigRules(scope=scope)
        with pytest.raises(SecretRefRefused):
            _check_delivery({"type": "slack", "channel": "C0123ABCD", "token_ref": f"secretsmanager:{arn}"}, rules)


# --- URLs refused before anything is sent ----------------------------------------------------------


@pytest.mark.parametrize("base_url", ["file:///proc/self/environ#", "ftp://llm.example/v1", "gopher://x/"])
def test_non_http_base_urls_are_refused(base_url: str) -> None:
    # a session's spec is refused when parsed ...
    with pytest.raises(ConfigError, match="https"):
        parse_spec({"type": "openai", "base_url": base_url, "model": "m"})
    # ... and a provider built around it directly is refused too
    with pytest.raises(OutboundRefused, match="only https"):
        OpenAICompatProvider(id="p", base_url=base_url, model="m", policy=LOOPBACK_OK)


@pytest.mark.parametrize(
    "host",
    ["169.254.169.254", "[::1]", "0x7f000001", "2130706433", "127.1", "10.0.0.1", "192.168.1.10", "[fd00:ec2::254]",
     "[::ffff:169.254.169.254]", "0.0.0.0", "100.100.100.200", "[::]", "localhost"],
)  # fmt: skip
def test_webhook_urls_to_internal_addresses_are_refused_and_nothing_is_sent(host: str) -> None:
    # GIVEN a server listening on 127.0.0.1 (where several of these forms lead)
    with Recorder() as server:
        url = f"https://{host}:{server.port}/hook"
        # WHEN a webhook names it, under the deployed policy
        with pytest.raises(OutboundRefused) as info:
            WebhookChannel(url, None, policy=STRICT).send(DELIVERY)
        # THEN it is a clear configuration error, and no connection was even made
        assert "refused" in str(info.value)
        assert server.connections == 0


def test_plain_http_is_refused_unless_the_local_setting_allows_it() -> None:
    with pytest.raises(OutboundRefused, match="plain http"):
        check_url("http://llm.example/v1", STRICT, resolve=False)
    assert check_url("http://llm.example/v1", OutboundPolicy(allow_http=True), resolve=False).host == "llm.example"


def test_credentials_in_urls_are_refused() -> None:
    with pytest.raises(OutboundRefused, match="credentials"):
        check_url("https://user:pass@llm.example/v1", STRICT, resolve=False)


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "::1", "10.1.2.3", "172.16.0.1", "192.168.0.1", "169.254.169.254", "fd00:ec2::254", "fe80::1",
     "0.0.0.0", "::", "100.64.0.1", "224.0.0.1", "::ffff:127.0.0.1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1"],
)  # fmt: skip
def test_every_internal_address_form_is_refused(address: str) -> None:
    assert address_refusal(address, STRICT) is not None


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::6810:84e5", "8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert address_refusal(address, STRICT) is None


def test_a_name_is_checked_after_resolution() -> None:
    # GIVEN a public-looking name whose DNS answer is the metadata endpoint
    def resolver(host: str, port: int) -> list[str]:
        return ["169.254.169.254"]

    # WHEN it is checked THEN the resolved address is what counts
    with pytest.raises(OutboundRefused, match="link-local"):
        check_url("https://innocent.example/", STRICT, resolver=resolver)


def test_a_refused_webhook_fails_the_run_as_a_config_error_not_a_tool_result() -> None:
    # GIVEN a session's delivery config naming the metadata endpoint
    # WHEN the channel is built for the run
    with pytest.raises(OutboundRefused):
        build_channel({"type": "webhook", "url": "https://169.254.169.254/latest/meta-data/"})
    # THEN it is a ConfigError (the run fails with it; the model never sees an error: to retry)
    assert issubclass(OutboundRefused, ConfigError)


# --- IPv6 forms that embed an IPv4 address (RFC 4291, 2765, 3056, 4380, 5214, 6052, 8215) ----------


def _v6(value: int) -> str:
    return str(ipaddress.IPv6Address(value))


def _v4(address: str) -> int:
    return int(ipaddress.IPv4Address(address))


def rfc6052(prefix: str, length: int, v4: str) -> str:
    """``v4`` embedded in ``prefix``/``length`` as RFC 6052 2.2 lays it out (bits 64-71 stay zero)."""
    bits = int(ipaddress.IPv6Address(prefix))
    value = _v4(v4)
    if length == 96:
        return _v6(bits | value)
    before = (64 - length) // 8  # octets of the IPv4 address before the u octet
    octets = value.to_bytes(4, "big")
    head, tail = octets[:before], octets[before:]
    embedded = int.from_bytes(head, "big") << (128 - length - 8 * len(head)) if head else 0
    if tail:
        embedded |= int.from_bytes(tail, "big") << (56 - 8 * len(tail))
    return _v6(bits | embedded)


def teredo(server: str, client: str) -> str:
    """2001:0:SERVER:flags:~port:~CLIENT (RFC 4380 4): port and client address obfuscated."""
    return _v6((0x20010000 << 96) | (_v4(server) << 64) | (0x8000 << 48) | (0xC3AF << 32) | (_v4(client) ^ 0xFFFFFFFF))


PUBLIC_V4 = "93.184.215.14"
#: every IPv6 form that embeds or translates an IPv4 address: name -> address for an IPv4 address
EMBEDDINGS: dict[str, Callable[[str], str]] = {
    "mapped ::ffff:a.b.c.d": lambda v4: f"::ffff:{v4}",
    "compatible ::a.b.c.d": lambda v4: f"::{v4}",
    "translated ::ffff:0:a.b.c.d": lambda v4: f"::ffff:0:{v4}",
    "nat64 64:ff9b::/96": lambda v4: rfc6052("64:ff9b::", 96, v4),
    **{f"local-use nat64 64:ff9b:1::/{n}": (lambda v4, n=n: rfc6052("64:ff9b:1::", n, v4)) for n in (48, 56, 64, 96)},
    "6to4 2002::/16": lambda v4: _v6((0x2002 << 112) | (_v4(v4) << 80) | 1),
    "teredo server": lambda v4: teredo(v4, PUBLIC_V4),
    "teredo client": lambda v4: teredo(PUBLIC_V4, v4),
    "isatap global prefix": lambda v4: f"2606:4700:10::5efe:{v4}",
    "isatap u-bit": lambda v4: f"2606:4700:10::200:5efe:{v4}",
    "isatap link-local": lambda v4: f"fe80::5efe:{v4}",
}
INTERNAL_V4 = {"loopback": "127.0.0.1", "metadata": "169.254.169.254", "private": "10.0.0.1"}
EMBEDDED_CASES = [
    pytest.param(form(v4), what, id=f"{name}-{what}")
    for name, form in EMBEDDINGS.items()
    for what, v4 in INTERNAL_V4.items()
]


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """Every socket.create_connection attempted (each one refused here: nothing may get that far)."""
    calls: list[tuple[object, ...]] = []

    def record(address: object, *args: object, **kwargs: object) -> socket.socket:
        calls.append((address, *args))
        raise ConnectionRefusedError("recorded, not connected")

    monkeypatch.setattr(socket, "create_connection", record)
    return calls


def test_the_embedding_helpers_put_the_ipv4_address_where_the_rfcs_say() -> None:
    # the RFC 6052 2.4 examples (192.0.2.33 under 2001:db8::/N) and the RFC 4380 example address
    assert rfc6052("2001:db8::", 32, "192.0.2.33") == "2001:db8:c000:221::"
    assert rfc6052("2001:db8:100::", 40, "192.0.2.33") == "2001:db8:1c0:2:21::"
    assert rfc6052("2001:db8:122::", 48, "192.0.2.33") == "2001:db8:122:c000:2:2100::"
    assert rfc6052("2001:db8:122:300::", 56, "192.0.2.33") == "2001:db8:122:3c0:0:221::"
    assert rfc6052("2001:db8:122:344::", 64, "192.0.2.33") == "2001:db8:122:344:c0:2:2100:0"
    assert rfc6052("2001:db8:122:344::", 96, "192.0.2.33") == "2001:db8:122:344::c000:221"
    assert ipaddress.IPv6Address(teredo("65.54.227.120", "192.0.2.45")).teredo == (
        ipaddress.IPv4Address("65.54.227.120"),
        ipaddress.IPv4Address("192.0.2.45"),
    )


@pytest.mark.parametrize(("address", "what"), EMBEDDED_CASES)
def test_an_ipv6_literal_embedding_an_internal_ipv4_address_is_refused_at_config_time(address: str, what: str) -> None:
    # GIVEN a webhook URL whose host is the IPv6 literal  WHEN it is checked at config time
    # THEN it is refused (no DNS needed: the literal is judged by the IPv4 address inside)
    with pytest.raises(OutboundRefused, match="refused"):
        check_url(f"https://[{address}]/hook", STRICT, what="webhook url", resolve=False)
    with pytest.raises(OutboundRefused, match="refused"):
        WebhookChannel(f"https://[{address}]/hook", None, policy=STRICT)
    # AND the local stack's allowances let no metadata or private target through either
    if what != "loopback":
        with pytest.raises(OutboundRefused):
            check_url(f"http://[{address}]/hook", LOOPBACK_OK, resolve=False)


@pytest.mark.parametrize(("address", "what"), EMBEDDED_CASES)
def test_an_ipv6_literal_embedding_an_internal_ipv4_address_is_refused_before_any_connect(
    address: str, what: str, connects: list[tuple[object, ...]]
) -> None:
    # GIVEN the deployed policy  WHEN an exchange names the IPv6 literal
    with pytest.raises(OutboundRefused, match="refused"):
        http_exchange("POST", f"https://[{address}]:8443/hook", body=b"{}", policy=STRICT)
    # THEN no connection was even attempted
    assert connects == []


@pytest.mark.parametrize(("address", "what"), EMBEDDED_CASES)
def test_a_dns_answer_embedding_an_internal_ipv4_address_is_refused_before_any_connect(
    address: str, what: str, connects: list[tuple[object, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a public-looking name whose DNS answers are a public address and the IPv6 form
    def getaddrinfo(host: str, port: object, *args: object, **kwargs: object) -> list[tuple[object, ...]]:
        assert host == "hooks.example"
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (answer, 443, 0, 0))
            for answer in ("2606:4700::6810:84e5", address)
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    # WHEN a webhook delivery goes to it, under the deployed policy
    with pytest.raises(OutboundRefused, match="refused") as info:
        WebhookChannel("https://hooks.example/hook", None, policy=STRICT).send(DELIVERY)
    # THEN refused (the reason names what is inside), and nothing was connected to
    assert connects == []
    assert INTERNAL_V4[what] in str(info.value) or "local-use NAT64" in str(info.value)


@pytest.mark.parametrize(
    "address",
    ["::ffff:" + PUBLIC_V4, "::ffff:0:" + PUBLIC_V4, rfc6052("64:ff9b::", 96, PUBLIC_V4),
     _v6((0x2002 << 112) | (_v4(PUBLIC_V4) << 80) | 1), "2606:4700:10::5efe:" + PUBLIC_V4],
)  # fmt: skip
def test_forms_that_translate_a_public_ipv4_address_pass(address: str) -> None:
    # an IPv6-only subnet's DNS64 answers 64:ff9b::/96 for a public name: that must keep working
    assert address_refusal(address, STRICT) is None


@pytest.mark.parametrize(
    ("address", "why"),
    [("::" + PUBLIC_V4, "IPv4-compatible"), (teredo(PUBLIC_V4, "8.8.8.8"), "Teredo"),
     (rfc6052("64:ff9b:1::", 96, PUBLIC_V4), "local-use NAT64"), ("4000::1", "2000::/3"), ("3fff::1", "routable")],
)  # fmt: skip
def test_forms_no_one_should_reach_are_refused_whatever_they_embed(address: str, why: str) -> None:
    reason = address_refusal(address, STRICT)
    assert reason is not None and why in reason


def test_the_refusal_names_the_embedded_address() -> None:
    reason = address_refusal("64:ff9b::a9fe:a9fe", STRICT)
    assert reason is not None and "169.254.169.254" in reason and "NAT64" in reason


# --- redirects ---------------------------------------------------------------------------------------


def test_a_webhook_redirect_to_loopback_is_not_followed(httpserver) -> None:
    # GIVEN a webhook receiver that redirects to another server on loopback
    with Recorder() as target:
        httpserver.expect_request("/hook", method="POST").respond_with_response(
            Response(status=307, headers={"Location": f"{target.url}/internal"})
        )
        channel = WebhookChannel(httpserver.url_for("/hook"), None, policy=LOOPBACK_OK)
        # WHEN a delivery is sent
        with pytest.raises(DeliveryError) as info:
            channel.send(DELIVERY)
        # THEN it failed clearly, and the redirect target never got a request
        assert "307" in str(info.value) and "not followed" in str(info.value)
        assert target.connections == 0


@pytest.mark.parametrize(
    "location",
    ["http://169.254.169.254/latest/meta-data/", "http://0x0a000001/", "http://[::ffff:10.0.0.1]/",
     "http://[::127.0.0.1]/", "http://[64:ff9b::a9fe:a9fe]/", "http://[2001:0:7f00:1:8000:c3af:f5ff:fffe]/"],
)  # fmt: skip
def test_a_redirect_to_an_internal_address_is_returned_never_followed(httpserver, location: str) -> None:
    # GIVEN a server that redirects to an internal address
    httpserver.expect_request("/start").respond_with_response(Response(status=302, headers={"Location": location}))
    # WHEN an exchange is made to it
    response = http_exchange("GET", httpserver.url_for("/start"), deadline=None, policy=LOOPBACK_OK)
    # THEN the 302 is the answer (the caller reports it), and nothing else was asked of anyone
    assert (response.status, response.headers["location"]) == (302, location)
    assert len(httpserver.log) == 1


def test_the_connection_goes_to_the_checked_address_with_the_name_in_the_host_header() -> None:
    # GIVEN a name that resolves (for this exchange) to the recorder on loopback
    with Recorder() as server:

        def resolver(host: str, port: int) -> list[str]:
            return ["127.0.0.1"]

        # WHEN an exchange is made to the name
        response = http_exchange(
            "POST",
            f"http://llm.internal.test:{server.port}/v1/chat/completions",
            headers={"Content-Type": "application/json"},
            body=b"{}",
            policy=LOOPBACK_OK,
            resolver=resolver,
        )
        # THEN it reached the checked address, and the Host header still names the host
        assert response.status == 200
        [raw] = server.requests
        assert f"Host: llm.internal.test:{server.port}".encode() in raw


def test_the_policy_comes_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentwake.settings import Settings

    strict = Settings.from_env({"AGENTWAKE_TABLE": "t"})
    local = Settings.from_env(
        {"AGENTWAKE_TABLE": "t", "AGENTWAKE_OUTBOUND_ALLOW_LOOPBACK": "1", "AGENTWAKE_OUTBOUND_ALLOW_HTTP": "1"}
    )
    assert OutboundPolicy.from_settings(strict) == STRICT
    assert OutboundPolicy.from_settings(local) == LOOPBACK_OK
    assert outbound.DEFAULT_TIMEOUT_S > 0
