"""``statewright mcp-verdict``: spoken to over stdio as a real subprocess, and unit-tested."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statewright.executors import ExecContext, Reason, mcp_verdict_command, run_agent
from statewright.executors.mcp_verdict import PROTOCOL_VERSION, VerdictServer

SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
}
SERVER_ARGV = [
    sys.executable,
    "-c",
    "from statewright.executors.mcp_verdict import mcp_verdict_command; mcp_verdict_command()",
]


class McpClient:
    """Newline-delimited JSON-RPC over a subprocess's stdin/stdout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self._next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        if self.proc.stdin is None:
            raise RuntimeError("no stdin")
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        if self.proc.stdout is None:
            raise RuntimeError("no stdout")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the server closed stdout")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        reply = self.receive()
        if reply["id"] != self._next_id:
            raise RuntimeError(f"reply to the wrong id: {reply}")
        return reply


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    schema_path = tmp_path / "schema.json"
    schema_path.write_text(json.dumps(SCHEMA))
    return schema_path, tmp_path / "out" / "verdict.json"


@pytest.fixture
def client(files: tuple[Path, Path]) -> Iterator[McpClient]:
    schema_path, out = files
    proc = subprocess.Popen(
        [*SERVER_ARGV, "--schema", str(schema_path), "--out", str(out)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        yield McpClient(proc)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_a_client_session_records_the_first_valid_verdict(
    client: McpClient, files: tuple[Path, Path]
) -> None:
    """initialize, initialized, tools/list, a rejected call, an accepted call, a refused one."""
    _, out = files
    init = client.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                         "clientInfo": {"name": "test", "version": "1"}})
    assert init["result"]["protocolVersion"] == "2025-06-18"
    assert init["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert init["result"]["serverInfo"]["name"] == "statewright-mcp-verdict"
    client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert client.request("ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}

    (tool,) = client.request("tools/list")["result"]["tools"]
    assert tool["name"] == "submit_verdict"
    assert tool["inputSchema"] == {**SCHEMA, "additionalProperties": False}

    bad = client.request("tools/call", {"name": "submit_verdict",
                                        "arguments": {"approved": "yes"}})
    assert bad["result"]["isError"] is True
    assert "'yes' is not of type 'boolean'" in bad["result"]["content"][0]["text"]
    assert not out.exists()

    extra = client.request("tools/call", {"name": "submit_verdict",
                                          "arguments": {"approved": True, "deploy": True}})
    assert extra["result"]["isError"] is True
    assert not out.exists()

    good = client.request("tools/call", {"name": "submit_verdict",
                                         "arguments": {"approved": False, "reason": "no tests"}})
    assert good["result"] == {"content": [{"type": "text", "text": "Verdict recorded."}],
                              "isError": False}
    assert json.loads(out.read_text()) == {"approved": False, "reason": "no tests"}

    again = client.request("tools/call", {"name": "submit_verdict",
                                          "arguments": {"approved": True}})
    assert again["result"]["isError"] is True
    assert "cannot be changed" in again["result"]["content"][0]["text"]
    assert json.loads(out.read_text())["approved"] is False


def test_protocol_errors(client: McpClient) -> None:
    """Unknown tools and methods, bad JSON and bad envelopes get JSON-RPC errors."""
    unknown_tool = client.request("tools/call", {"name": "approve_and_merge", "arguments": {}})
    assert unknown_tool["error"]["code"] == -32602
    assert "unknown tool" in unknown_tool["error"]["message"]
    assert client.request("resources/list")["error"]["code"] == -32601
    if client.proc.stdin is None:
        raise RuntimeError("no stdin")
    client.proc.stdin.write("{not json\n")
    client.proc.stdin.flush()
    parse_error = client.receive()
    assert parse_error["id"] is None
    assert parse_error["error"]["code"] == -32700
    assert parse_error["error"]["message"].startswith("parse error:")
    client.send([{"jsonrpc": "2.0", "id": 9, "method": "ping"}])  # type: ignore[arg-type]
    assert client.receive()["error"]["code"] == -32600


def test_the_environment_names_the_files(files: tuple[Path, Path], tmp_path: Path) -> None:
    """STATEWRIGHT_SCHEMA and STATEWRIGHT_VERDICT stand in for --schema and --out."""
    schema_path, out = files
    session = "\n".join(json.dumps(m) for m in [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "x"}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "submit_verdict", "arguments": {"approved": True}}},
    ]) + "\n"
    result = CliRunner().invoke(
        mcp_verdict_command, [], input=session,
        env={"STATEWRIGHT_SCHEMA": str(schema_path), "STATEWRIGHT_VERDICT": str(out)},
    )
    assert result.exit_code == 0, result.output
    first, second = (json.loads(line) for line in result.output.splitlines())
    assert first["result"]["protocolVersion"] == PROTOCOL_VERSION  # unknown asked version
    assert second["result"]["isError"] is False
    assert json.loads(out.read_text()) == {"approved": True}


def test_a_missing_or_unusable_schema_is_a_usage_error(tmp_path: Path) -> None:
    """The command refuses to start without a usable object schema."""
    runner = CliRunner()
    missing = runner.invoke(mcp_verdict_command, ["--out", str(tmp_path / "v.json")], env={})
    assert missing.exit_code == 2
    assert "--schema" in missing.output
    not_object = tmp_path / "s.json"
    not_object.write_text(json.dumps({"type": "array"}))
    result = runner.invoke(mcp_verdict_command,
                           ["--schema", str(not_object), "--out", str(tmp_path / "v.json")])
    assert result.exit_code == 2
    assert "must have type 'object'" in result.output


def test_server_unit_handles_notifications_and_versions(tmp_path: Path) -> None:
    """Notifications get no reply; supported older versions are echoed back."""
    server = VerdictServer(SCHEMA, tmp_path / "v.json")
    assert server.handle({"jsonrpc": "2.0", "method": "notifications/initialized"}) is None
    assert server.handle({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 1}}) is None
    init = server.handle({"jsonrpc": "2.0", "id": "a", "method": "initialize",
                          "params": {"protocolVersion": "2025-03-26"}})
    assert init is not None
    assert init["result"]["protocolVersion"] == "2025-03-26"
    assert server.handle({"jsonrpc": "1.0", "id": 1, "method": "ping"}) is not None
    bad_id = server.handle({"jsonrpc": "2.0", "id": None, "method": "ping"})
    assert bad_id is not None
    assert bad_id["error"]["code"] == -32600


def test_a_command_agent_submits_through_the_mcp_server(
    ctx: ExecContext, cli_agent: list[str]
) -> None:
    """End to end: the command executor's env lets an MCP-speaking CLI agent deliver a verdict."""
    spec = {"type": "command",
            "command": [*cli_agent, "mcp", '{"approved": "yes"}', '{"approved": true}']}
    result = run_agent(spec, {"instructions": "review"}, SCHEMA, ctx)
    assert result.error is None, (result.detail, result.artifacts)
    assert result.verdict == {"approved": True}
    lines = [json.loads(line) for line in result.note.splitlines()]
    assert lines[1]["result"]["isError"] is True  # the first try was corrected by the model
    assert lines[0]["tools"]["result"]["tools"][0]["inputSchema"]["additionalProperties"] is False


def test_a_command_agent_whose_mcp_calls_all_fail_has_no_verdict(
    ctx: ExecContext, cli_agent: list[str]
) -> None:
    """Only rejected calls: no verdict file, so no_verdict."""
    spec = {"type": "command", "command": [*cli_agent, "mcp", '{"approved": "yes"}']}
    result = run_agent(spec, {"instructions": "review"}, SCHEMA, ctx)
    assert (result.verdict, result.error) == (None, Reason.NO_VERDICT)
