"""Serve a Starlette app with uvicorn on a free local port, in a thread of the test."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import uvicorn
from starlette.applications import Starlette


@contextmanager
def served(app: Starlette) -> Iterator[str]:
    """The app's base URL while uvicorn serves it on 127.0.0.1 and a free port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    started = time.monotonic()
    while not server.started:  # uvicorn sets it once it listens; no fixed sleep
        if not thread.is_alive() or time.monotonic() - started > 10:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Starlette], str]]:
    """``serve(app)`` -> base URL; every server started is stopped at teardown."""
    stack: list[Iterator[str]] = []

    def start(app: Starlette) -> str:
        cm = served(app)
        url = cm.__enter__()
        stack.append(cm)  # type: ignore[arg-type]
        return url

    yield start
    for cm in reversed(stack):
        cm.__exit__(None, None, None)  # type: ignore[attr-defined]
