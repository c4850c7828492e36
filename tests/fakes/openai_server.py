"""A scripted OpenAI-compatible chat completions server on 127.0.0.1, for tests.

    with FakeOpenAIServer([tool_call_reply({"approved": True})]) as server:
        run_agent({"type": "openai", "base_url": server.base_url, ...}, ...)
        server.requests[0].headers["authorization"]

Each POST to ``/v1/chat/completions`` is recorded and answered with the next scripted
reply, in order. When the script runs out the server answers HTTP 500 with an error
that says so, so a test that asks once too often fails loudly. Other paths get a 404.
The wire format is the one OpenAI documents: ``choices[0].message`` with ``content``
and ``tool_calls`` (``function.arguments`` as a JSON string), ``usage`` with
``prompt_tokens`` and ``completion_tokens``, and ``{"error": {...}}`` bodies.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ScriptedReply:
    """One answer: an HTTP status, a JSON body (or raw bytes) and extra headers.

    ``message`` replies get wrapped into a full completion at send time, so they can echo
    the requested model name.
    """

    status: int = 200
    message: dict[str, Any] | None = None
    usage: tuple[int, int] = (0, 0)
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, or None when the body was not JSON
    raw: bytes


def tool_call_reply(
    arguments: Any,
    *,
    name: str = "submit_verdict",
    content: str | None = None,
    usage: tuple[int, int] = (10, 5),
    call_id: str = "call_1",
    raw_arguments: bool = False,
) -> ScriptedReply:
    """A reply with one tool call. ``arguments`` is JSON-encoded unless ``raw_arguments``."""
    return calls_reply([(name, arguments)], content=content, usage=usage, call_id=call_id,
                       raw_arguments=raw_arguments)


def calls_reply(
    calls: Iterable[tuple[str, Any]],
    *,
    content: str | None = None,
    usage: tuple[int, int] = (10, 5),
    call_id: str = "call_1",
    raw_arguments: bool = False,
) -> ScriptedReply:
    """A reply with several tool calls, ``(name, arguments)`` each."""
    tool_calls = [
        {
            "id": f"{call_id}_{i}" if i else call_id,
            "type": "function",
            "function": {
                "name": name,
                "arguments": args if raw_arguments else json.dumps(args),
            },
        }
        for i, (name, args) in enumerate(calls)
    ]
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    return ScriptedReply(message=message, usage=usage)


def text_reply(content: str, *, usage: tuple[int, int] = (10, 5)) -> ScriptedReply:
    """A reply with text only and no tool call."""
    return ScriptedReply(message={"role": "assistant", "content": content}, usage=usage)


def error_reply(status: int, message: str, *, kind: str = "invalid_request_error") -> ScriptedReply:
    """An error status with an OpenAI-style error body."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    headers = {"Retry-After": "1"} if status == 429 else {}
    return ScriptedReply(status=status, body=body, headers=headers)


class FakeOpenAIServer:
    """A threaded HTTP server on 127.0.0.1:0 answering from a script."""

    def __init__(self, replies: Iterable[ScriptedReply] = ()) -> None:
        self._replies = list(replies)
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the fake server is not running; use it as a context manager")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: ScriptedReply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._replies.extend(replies)

    def __enter__(self) -> FakeOpenAIServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        self._httpd = None

    def _next_reply(self) -> ScriptedReply:
        with self._lock:
            if self._replies:
                return self._replies.pop(0)
        return error_reply(500, "fake server: no scripted reply left for this request",
                           kind="server_error")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.requests.append(RecordedRequest("POST", self.path, headers, body, raw))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(error_reply(404, f"no route {self.path}"), body)
                    return
                self._send(server._next_reply(), body)

            def _send(self, reply: ScriptedReply, request_body: Any) -> None:
                if reply.raw is not None:
                    payload = reply.raw
                elif reply.message is not None:
                    payload = json.dumps(_completion(reply, request_body)).encode()
                else:
                    payload = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output quiet

        return Handler


def _completion(reply: ScriptedReply, request_body: Any) -> dict[str, Any]:
    model = request_body.get("model", "fake") if isinstance(request_body, dict) else "fake"
    message = reply.message or {}
    prompt_tokens, completion_tokens = reply.usage
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
