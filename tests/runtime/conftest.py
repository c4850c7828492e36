"""Fixtures for the runtime tests: a clean environment, a fake clock, engines that are
closed after the test, and the effect script the crash tests run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.store import open_store

from .support import EFFECT_SCRIPT


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def open_engine(db: Path) -> Iterator[Callable[..., Engine]]:
    """``open_engine(clock=...)`` opens an Engine on the test's database file; every engine
    opened is closed at teardown (closing twice is harmless)."""
    engines: list[Engine] = []

    def make(**kwargs: Any) -> Engine:
        engine = Engine(open_store(db), **kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def effect_script(tmp_path: Path) -> Path:
    path = tmp_path / "effect.py"
    path.write_text(EFFECT_SCRIPT, encoding="utf-8")
    return path
