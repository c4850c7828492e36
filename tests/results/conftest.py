"""Results tests run on both backends: a SQLite file and a fresh PostgreSQL schema."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.store import open_store


@pytest.fixture
def open_engine(store_url: str, tmp_path: Path) -> Iterator[Callable[..., Engine]]:
    """``open_engine()`` opens an Engine on the test's database with a fake clock; every
    engine opened is closed at teardown."""
    engines: list[Engine] = []

    def make(**kwargs: Any) -> Engine:
        kwargs.setdefault("clock", FakeClock())
        kwargs.setdefault("workspace_root", tmp_path / "workspaces")
        engine = Engine(open_store(store_url), **kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture
def engine(open_engine: Callable[..., Engine]) -> Engine:
    return open_engine()
