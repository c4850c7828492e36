"""The API under test, on every backend: an engine with a fake clock, its people (each with a
token), the workflows the server may start, and a Starlette TestClient on ``create_app``;
and ``serve(app)``, a real uvicorn on a free local port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.testclient import TestClient

from server.support import World, workflows
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.server import create_app
from statewright.server.hooks import Hook

HOOK_SECRET = b"0123456789abcdef-a-test-secret"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine_defaults(tmp_path: Path, clock: FakeClock) -> Callable[[], dict[str, Any]]:
    return lambda: {"clock": clock, "workspace_root": tmp_path / "ws"}


@pytest.fixture
def world(open_engine: Callable[..., Engine], tmp_path: Path) -> Iterator[World]:
    engine = open_engine()
    wfs = workflows()
    hooks = {
        "order": Hook("order", wfs["payment"], "ORDER_SECRET", HOOK_SECRET,
                      {"region": _ref("input.order.region"), "amount": _ref("input.order.amount")}),
        "raw": Hook("raw", wfs["payment"], "RAW_SECRET", HOOK_SECRET, None),
    }
    app = create_app(lambda: engine, workflows=list(wfs.values()), hooks=hooks,
                     loop_db=str(tmp_path / "loop.db"))
    with TestClient(app) as client:
        yield World(engine, client, wfs, tmp_path / "loop.db")


def _ref(text: str) -> Any:
    from statewright.machine.paths import parse_ref

    return parse_ref(text)


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
