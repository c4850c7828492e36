"""``statewright mcp-verdict``: an MCP server over stdio with one tool, ``submit_verdict``.

A CLI agent that speaks the Model Context Protocol (Claude Code, Codex CLI, goose, ...)
runs as a ``type: command`` agent and is configured with this server. The command agent
executor sets ``STATEWRIGHT_SCHEMA`` (the step's closed verdict schema as a JSON file)
and ``STATEWRIGHT_VERDICT`` (where the verdict goes), so the server needs no arguments:

    {"mcpServers": {"statewright": {"command": "statewright", "args": ["mcp-verdict"]}}}

The tool's ``inputSchema`` is the step's schema. A call whose arguments do not match it
gets a tool result with ``isError: true`` and the validation message, so the model can
correct itself; the first valid call is written to the verdict file and is final.

Transport: newline-delimited JSON-RPC 2.0 on stdin/stdout (nothing else is written to
stdout; diagnostics go to stderr). Methods: ``initialize``, ``notifications/initialized``,
``ping``, ``tools/list``, ``tools/call``. Protocol version ``2025-06-18``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import click

from .._errors import PermanentError
from ._verdict import VerdictSchema

PROTOCOL_VERSION = "2025-06-18"
SUPPORTED_VERSIONS = (PROTOCOL_VERSION, "2025-03-26", "2024-11-05")
TOOL_NAME = "submit_verdict"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


class VerdictServer:
    """The protocol logic, without I/O: ``handle(message)`` returns the reply or None."""

    def __init__(self, schema: Mapping[str, Any], out: Path) -> None:
        self.verdicts = VerdictSchema(schema, where="the verdict schema")
        if self.verdicts.schema.get("type") != "object":
            msg = "the verdict schema must have type 'object' (MCP tool inputs are objects)"
            raise PermanentError(msg)
        self.out = out
        self.recorded = False

    def handle_line(self, line: str) -> str | None:
        """One line in, at most one line out (without the newline)."""
        reply: dict[str, Any] | None
        try:
            message = json.loads(line)
        except json.JSONDecodeError as exc:
            reply = _error(None, PARSE_ERROR, f"parse error: {exc.msg}")
        except (RecursionError, ValueError):  # nested too deep, or an integer too long
            reply = _error(None, PARSE_ERROR, "parse error: the message is nested too deep or holds too long a number")
        else:
            reply = self.handle(message)
        return None if reply is None else json.dumps(reply, separators=(",", ":"))

    def handle(self, message: object) -> dict[str, Any] | None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _error(None, INVALID_REQUEST, "expected one JSON-RPC 2.0 object per line")
        if "method" not in message:
            return None  # a response to something we never ask; ignore it
        method = message["method"]
        if "id" not in message:
            return None  # notifications: notifications/initialized, cancelled, ...
        request_id = message["id"]
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return _error(None, INVALID_REQUEST, "request id must be a string or an integer")
        params = message.get("params", {})
        if not isinstance(method, str) or not isinstance(params, dict):
            return _error(request_id, INVALID_REQUEST, "method must be a string, params an object")
        if method == "initialize":
            return _result(request_id, self._initialize(params))
        if method == "ping":
            return _result(request_id, {})
        if method == "tools/list":
            return _result(request_id, {"tools": [self._tool()]})
        if method == "tools/call":
            return self._call(request_id, params)
        return _error(request_id, METHOD_NOT_FOUND, f"method not found: {method}")

    def _initialize(self, params: Mapping[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        version = asked if asked in SUPPORTED_VERSIONS else PROTOCOL_VERSION
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "statewright-mcp-verdict", "title": "statewright verdict",
                           "version": _version()},
            "instructions": f"Report this step's result by calling {TOOL_NAME} exactly once.",
        }

    def _tool(self) -> dict[str, Any]:
        return {
            "name": TOOL_NAME,
            "title": "Submit verdict",
            "description": (
                "Submit this workflow step's verdict. Call it exactly once, when the work is "
                "done, with arguments that match the input schema. The first valid verdict "
                "is final."
            ),
            "inputSchema": self.verdicts.schema,
        }

    def _call(self, request_id: str | int, params: Mapping[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if name != TOOL_NAME:
            return _error(request_id, INVALID_PARAMS, f"unknown tool: {name!r}; the only tool is "
                          f"{TOOL_NAME}")
        if self.recorded:
            text = "A verdict was already recorded for this attempt; it cannot be changed."
            return _result(request_id, _tool_result(text, is_error=True))
        arguments = params.get("arguments", {})
        problem = self.verdicts.problem(arguments)
        if problem is not None:
            text = f"Verdict rejected: {problem}. Fix the arguments and call {TOOL_NAME} again."
            return _result(request_id, _tool_result(text, is_error=True))
        _write_atomically(self.out, json.dumps(arguments, sort_keys=True))
        self.recorded = True
        return _result(request_id, _tool_result("Verdict recorded.", is_error=False))


def serve(server: VerdictServer, stdin: IO[str], stdout: IO[str]) -> None:
    """Answer requests until stdin closes."""
    for line in stdin:
        if not line.strip():
            continue
        reply = server.handle_line(line)
        if reply is not None:
            stdout.write(reply + "\n")
            stdout.flush()


@click.command("mcp-verdict")
@click.option(
    "--schema", "schema_path", envvar="STATEWRIGHT_SCHEMA", required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSON file holding the step's verdict schema [env: STATEWRIGHT_SCHEMA].",
)
@click.option(
    "--out", "out_path", envvar="STATEWRIGHT_VERDICT", required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the verdict JSON [env: STATEWRIGHT_VERDICT].",
)
def mcp_verdict_command(schema_path: Path, out_path: Path) -> None:
    """Serve the submit_verdict tool over stdio (Model Context Protocol)."""
    try:
        schema = json.loads(schema_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise click.UsageError(f"cannot read the verdict schema {schema_path}: {exc}") from None
    try:
        server = VerdictServer(schema, out_path)
    except PermanentError as exc:
        raise click.UsageError(f"{schema_path}: {exc}") from None
    serve(server, sys.stdin, sys.stdout)


def _tool_result(text: str, *, is_error: bool) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def _result(request_id: str | int, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _error(request_id: str | int | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".verdict-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _version() -> str:
    try:
        return metadata.version("statewright")
    except metadata.PackageNotFoundError:
        return "0"
