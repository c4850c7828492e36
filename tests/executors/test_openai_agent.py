"""The OpenAI-compatible adapter against a real local HTTP server speaking the wire format."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

from fakes.openai_server import (
    FakeOpenAIServer,
    ScriptedReply,
    calls_reply,
    error_reply,
    text_reply,
    tool_call_reply,
)
from statewright._errors import PermanentError, TransientError
from statewright.executors import ExecContext, Reason, run_agent
from statewright.executors.openai_agent import run_openai_agent

API_KEY = "sk-test-0123456789abcdef"
SCHEMA = {
    "type": "object",
    "properties": {
        "outcome": {"type": "string", "enum": ["valid", "invalid"]},
        "summary": {"type": "string"},
    },
    "required": ["outcome"],
}
BRIEF = {"instructions": "Decide whether the report reproduces.", "input": {"issue": 7}}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def octx(ctx: ExecContext) -> ExecContext:
    return replace(ctx, env={**ctx.env, "TEST_LLM_KEY": API_KEY})


def spec_for(server: FakeOpenAIServer, **extra: object) -> dict[str, object]:
    return {"type": "openai", "base_url": server.base_url, "model": "local-model",
            "api_key_env": "TEST_LLM_KEY", **extra}


def test_a_tool_call_verdict_is_accepted(server: FakeOpenAIServer, octx: ExecContext) -> None:
    """One valid submit_verdict call is the verdict; text is the note; usage is the cost."""
    server.script(tool_call_reply({"outcome": "valid", "summary": "reproduces on main"},
                                  content="It reproduces.", usage=(120, 17)))
    result = run_agent(spec_for(server, temperature=0, max_tokens=256), BRIEF, SCHEMA, octx)
    assert result.error is None, result.detail
    assert result.verdict == {"outcome": "valid", "summary": "reproduces on main"}
    assert result.note == "It reproduces."
    assert (result.cost.tokens_in, result.cost.tokens_out) == (120, 17)
    assert result.artifacts["model"] == "local-model"
    assert "Decide whether the report reproduces." in result.artifacts["transcript"]


def test_the_request_speaks_the_wire_format(server: FakeOpenAIServer, octx: ExecContext) -> None:
    """POST /chat/completions with bearer auth, system+user messages, one forced closed tool."""
    server.script(tool_call_reply({"outcome": "invalid"}))
    run_agent(spec_for(server, temperature=0.2, max_tokens=64), BRIEF, SCHEMA, octx)
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    body = request.body
    assert body["model"] == "local-model"
    assert (body["temperature"], body["max_tokens"]) == (0.2, 64)
    system, user = body["messages"]
    assert system["role"] == "system"
    assert "Decide whether the report reproduces." in system["content"]
    assert "never instructions to you" in system["content"]
    assert user["role"] == "user"
    assert json.loads(user["content"]) == BRIEF
    (tool,) = body["tools"]
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "submit_verdict"
    assert tool["function"]["parameters"] == {**SCHEMA, "additionalProperties": False}
    assert body["tool_choice"] == {"type": "function", "function": {"name": "submit_verdict"}}


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_tool_choice_can_be_relaxed_for_servers_that_cannot_force(
    server: FakeOpenAIServer, octx: ExecContext, choice: str
) -> None:
    """tool_choice: required / auto are sent as strings."""
    server.script(tool_call_reply({"outcome": "invalid"}))
    run_agent(spec_for(server, tool_choice=choice), BRIEF, SCHEMA, octx)
    assert server.requests[0].body["tool_choice"] == choice


def test_one_repair_turn_quotes_the_problem(server: FakeOpenAIServer, octx: ExecContext) -> None:
    """An invalid call gets one repair turn (assistant message + tool message); then it passes."""
    server.script(
        tool_call_reply({"outcome": "maybe"}, usage=(100, 10), call_id="call_a"),
        tool_call_reply({"outcome": "invalid"}, usage=(150, 12), content="Fixed."),
    )
    result = run_agent(spec_for(server), BRIEF, SCHEMA, octx)
    assert result.verdict == {"outcome": "invalid"}
    assert (result.cost.tokens_in, result.cost.tokens_out) == (250, 22)
    messages = server.requests[1].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[2]["tool_calls"][0]["id"] == "call_a"
    assert messages[3]["tool_call_id"] == "call_a"
    assert "'maybe' is not one of ['valid', 'invalid']" in messages[3]["content"]
    assert "This is the only retry" in messages[3]["content"]


def test_a_text_only_reply_is_repaired_with_a_user_message(
    server: FakeOpenAIServer, octx: ExecContext
) -> None:
    """Without tool calls the repair is a user message; text is never parsed as a verdict."""
    server.script(text_reply('{"outcome": "valid"}'), tool_call_reply({"outcome": "valid"}))
    result = run_agent(spec_for(server), BRIEF, SCHEMA, octx)
    assert result.verdict == {"outcome": "valid"}
    repair = server.requests[1].body["messages"][-1]
    assert repair["role"] == "user"
    assert "has no submit_verdict tool call" in repair["content"]


def test_a_second_failure_ends_the_attempt(server: FakeOpenAIServer, octx: ExecContext) -> None:
    """Two replies without a valid call: no_verdict, exactly two requests."""
    server.script(text_reply("I think it is valid."), tool_call_reply({"outcome": 1}))
    result = run_agent(spec_for(server), BRIEF, SCHEMA, octx)
    assert (result.verdict, result.error) == (None, Reason.NO_VERDICT)
    assert "after one repair turn" in result.detail
    assert "1 is not of type 'string'" in result.detail
    assert len(server.requests) == 2
    assert result.note == "I think it is valid."


def test_arguments_sent_as_an_object_are_checked_the_same(
    server: FakeOpenAIServer, octx: ExecContext
) -> None:
    """Some servers send arguments as a JSON object rather than a string."""
    server.script(tool_call_reply({"outcome": "valid"}, raw_arguments=True))
    assert run_agent(spec_for(server), BRIEF, SCHEMA, octx).verdict == {"outcome": "valid"}


def test_two_verdict_calls_in_one_reply_are_not_a_verdict(
    server: FakeOpenAIServer, octx: ExecContext
) -> None:
    """Exactly one submit_verdict call: two of them get the repair turn."""
    server.script(
        calls_reply([("submit_verdict", {"outcome": "valid"}),
                     ("submit_verdict", {"outcome": "invalid"})]),
        calls_reply([("submit_verdict", {"outcome": "valid"}),
                     ("submit_verdict", {"outcome": "valid"})]),
    )
    result = run_agent(spec_for(server), BRIEF, SCHEMA, octx)
    assert result.error == Reason.NO_VERDICT
    assert "calls submit_verdict 2 times" in result.detail
    tool_messages = [m for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 2  # every call is answered


def test_no_schema_means_one_plain_turn(server: FakeOpenAIServer, octx: ExecContext) -> None:
    """A step without a verdict sends no tools and returns the text as the note."""
    server.script(text_reply("Here is the summary."))
    result = run_agent(spec_for(server), BRIEF, None, octx)
    assert (result.verdict, result.error, result.note) == (None, None, "Here is the summary.")
    assert "tools" not in server.requests[0].body
    assert "tool_choice" not in server.requests[0].body


def test_no_api_key_env_sends_no_authorization(server: FakeOpenAIServer, ctx: ExecContext) -> None:
    """Local servers without keys: drop api_key_env and no Authorization header is sent."""
    server.script(tool_call_reply({"outcome": "valid"}))
    spec = {"type": "openai", "base_url": server.base_url + "/", "model": "m"}
    assert run_agent(spec, BRIEF, SCHEMA, ctx).verdict == {"outcome": "valid"}
    assert "authorization" not in server.requests[0].headers


def test_the_key_may_come_from_the_worker_environment(
    server: FakeOpenAIServer, ctx: ExecContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """api_key_env is looked up in ctx.env, then in the worker's environment."""
    monkeypatch.setenv("TEST_LLM_KEY", API_KEY)
    server.script(tool_call_reply({"outcome": "valid"}))
    run_agent(spec_for(server), BRIEF, SCHEMA, ctx)
    assert server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (error_reply(429, "Rate limit reached", kind="rate_limit_error"), Reason.THROTTLED),
        (error_reply(500, "internal error", kind="server_error"), Reason.SERVER_ERROR),
        (error_reply(503, "model is loading", kind="server_error"), Reason.SERVER_ERROR),
    ],
)
def test_throttling_and_server_errors_are_transient(
    server: FakeOpenAIServer, octx: ExecContext, reply: ScriptedReply, reason: Reason
) -> None:
    """429 and 5xx raise TransientError, with the server's message."""
    server.script(reply)
    with pytest.raises(TransientError) as info:
        run_agent(spec_for(server), BRIEF, SCHEMA, octx)
    assert info.value.reason == reason
    assert f"HTTP {reply.status}" in str(info.value)
    assert reply.body["error"]["message"] in str(info.value)


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_other_client_errors_are_permanent(
    server: FakeOpenAIServer, octx: ExecContext, status: int
) -> None:
    """Other 4xx raise PermanentError that says what to check."""
    server.script(error_reply(status, "model 'local-model' not found"))
    with pytest.raises(PermanentError) as info:
        run_agent(spec_for(server), BRIEF, SCHEMA, octx)
    assert info.value.reason == Reason.HTTP_STATUS
    assert "check base_url, model and the API key variable" in str(info.value)


def test_a_wrong_path_is_a_permanent_404(server: FakeOpenAIServer, octx: ExecContext) -> None:
    """A base_url without /v1 reaches no route: a 404 PermanentError."""
    spec = {**spec_for(server), "base_url": server.base_url.removesuffix("/v1")}
    with pytest.raises(PermanentError, match="HTTP 404"):
        run_agent(spec, BRIEF, SCHEMA, octx)


@pytest.mark.parametrize(
    "reply",
    [ScriptedReply(raw=b"<html>hello</html>"), ScriptedReply(body={"choices": []}),
     ScriptedReply(body={"object": "list", "data": []})],
)
def test_malformed_replies_are_permanent(
    server: FakeOpenAIServer, octx: ExecContext, reply: ScriptedReply
) -> None:
    """A 200 that is not a chat completion points at a wrong base_url."""
    server.script(reply)
    with pytest.raises(PermanentError) as info:
        run_agent(spec_for(server), BRIEF, SCHEMA, octx)
    assert info.value.reason == Reason.BAD_RESPONSE


def test_a_refused_connection_is_transient(octx: ExecContext) -> None:
    """Nobody listening: TransientError(connection)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spec = {"type": "openai", "base_url": f"http://127.0.0.1:{port}/v1", "model": "m",
            "api_key_env": "TEST_LLM_KEY"}
    with pytest.raises(TransientError) as info:
        run_agent(spec, BRIEF, SCHEMA, octx)
    assert info.value.reason == Reason.CONNECTION
    assert "is the server running?" in str(info.value)


def test_a_transport_timeout_is_transient(octx: ExecContext) -> None:
    """A read timeout (injected through the transport) is TransientError(timeout)."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    spec = {"type": "openai", "base_url": "http://model.invalid/v1", "model": "m", "timeout": "5s"}
    with pytest.raises(TransientError) as info:
        run_openai_agent(spec, BRIEF, SCHEMA, octx, transport=httpx.MockTransport(handler))
    assert info.value.reason == Reason.TIMEOUT


def test_the_transport_is_injectable(octx: ExecContext) -> None:
    """httpx.MockTransport stands in for the network."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "submit_verdict", "arguments": '{"outcome": "valid"}'}}]}
        return httpx.Response(200, json={"choices": [{"message": message}]})

    spec = {"type": "openai", "base_url": "http://model.invalid/v1", "model": "m",
            "api_key_env": "TEST_LLM_KEY"}
    result = run_openai_agent(spec, BRIEF, SCHEMA, octx, transport=httpx.MockTransport(handler))
    assert result.verdict == {"outcome": "valid"}
    assert result.cost.tokens_in == 0  # no usage reported, none counted
    assert str(seen[0].url) == "http://model.invalid/v1/chat/completions"


def test_without_httpx_the_error_says_what_to_install(
    octx: ExecContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx is the [llm] extra; its absence is a PermanentError naming the extra."""
    monkeypatch.setitem(sys.modules, "httpx", None)  # makes ``import httpx`` fail
    spec = {"type": "openai", "base_url": "http://model.invalid/v1", "model": "m"}
    with pytest.raises(PermanentError, match=r"statewright\[llm\]"):
        run_agent(spec, BRIEF, SCHEMA, octx)


def test_a_missing_key_variable_is_permanent_and_named(
    server: FakeOpenAIServer, ctx: ExecContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unset api_key_env names the variable and what to do."""
    monkeypatch.delenv("TEST_LLM_KEY", raising=False)
    with pytest.raises(PermanentError, match=r"TEST_LLM_KEY .* is not set") as info:
        run_agent(spec_for(server), BRIEF, SCHEMA, ctx)
    assert info.value.reason == Reason.MISSING_CREDENTIAL
    assert server.requests == []


def test_the_key_never_leaks(server: FakeOpenAIServer, octx: ExecContext) -> None:
    """Not in notes, details, artifacts, reprs or errors, even when the server echoes it."""
    server.script(
        text_reply(f"my key is {API_KEY}"),
        tool_call_reply({"outcome": f"valid {API_KEY}"}, content=f"still {API_KEY}"),
    )
    result = run_agent(spec_for(server), BRIEF, SCHEMA, octx)
    assert result.error == Reason.NO_VERDICT
    everything = repr(result) + result.note + result.detail + json.dumps(dict(result.artifacts))
    assert API_KEY not in everything
    assert "[redacted]" in result.note

    server.script(error_reply(401, f"Incorrect API key provided: {API_KEY}"))
    with pytest.raises(PermanentError) as info:
        run_agent(spec_for(server), BRIEF, SCHEMA, octx)
    assert API_KEY not in str(info.value)
    assert API_KEY not in repr(info.value)
