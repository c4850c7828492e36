"""The API under test, on every backend: an engine with a fake clock, its people (each with a
token), the workflows the server may start, and a Starlette TestClient on ``create_app``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.support import World, workflows
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.server import create_app, sign
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


__all__ = ["HOOK_SECRET", "sign"]
