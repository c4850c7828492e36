"""Real receivers on 127.0.0.1: an HTTP server that records each POST and answers as a test
scripts it (a status, or a hang), and an SMTP server (aiosmtpd) that keeps each message."""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG = -1  # a scripted answer: read the request, then never answer
GARBAGE = -2  # a scripted answer that is not HTTP


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class HttpReceiver:
    """``answers`` are given in order (HANG: hang until the receiver stops; GARBAGE: not HTTP),
    then 200."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.answers: deque[int] = deque()
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.requests.append(Received(self.path, dict(self.headers.items()), body))
                status = receiver.answers.popleft() if receiver.answers else 200
                if status == HANG:
                    receiver.release.wait(30)
                    return
                if status == GARBAGE:
                    self.wfile.write(b"SMTP READY\r\n\r\n")
                    self.close_connection = True
                    return
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class SmtpReceiver:
    """aiosmtpd on a free port; ``refuse`` (an address) is refused at RCPT with 550."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[EmailMessage] = []
        self.refuse: set[str] = set()
        receiver = self

        class Handler:
            async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                                  rcpt_options: list[str]) -> str:
                if address in receiver.refuse:
                    return "550 no such mailbox here"
                envelope.rcpt_tos.append(address)
                return "250 OK"

            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                receiver.messages.append(message_from_bytes(envelope.content, policy=policy.default))  # type: ignore[arg-type]
                return "250 Message accepted"

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def close(self) -> None:
        self.controller.stop()
