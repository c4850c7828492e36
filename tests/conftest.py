"""Shared pytest setup. Test helpers live in ``tests/strategies.py``; this directory is on
``sys.path`` because pytest imports this conftest from it (rootdir-based import mode).

Every test starts without the statewright variables an operator's shell may hold (a
database, a token, a chain key, a crash point). Tests that run on every store backend take
``store_url`` (or ``backend``): an in-memory database, a SQLite file, then a fresh
PostgreSQL schema. ``open_engine`` opens engines on ``store_url`` with what a suite's
``engine_defaults`` gives (a fake clock, a workspace root) and closes them after the test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statewright.runtime.engine import Engine
from statewright.store import open_store
from statewright.store.memory import drop_database
from store.backends import BACKENDS, fresh_pg_schema, skip_unreachable_postgres

_OPERATOR_ENV = (
    "STATEWRIGHT_DB", "STATEWRIGHT_USERS", "STATEWRIGHT_TOKEN", "STATEWRIGHT_CHAIN_KEY",
    "STATEWRIGHT_CRASH_AT", "STATEWRIGHT_LOOP_CRASH_AT",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_unreachable_postgres(items, Path(__file__).parent)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _OPERATOR_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A place for a fresh database: a named in-memory database, a SQLite file, or a new
    PostgreSQL schema."""
    if backend == "memory":
        url = f"memory:{tmp_path.name}-{uuid.uuid4().hex[:8]}"
        open_store(url).close()  # made now: a command refuses a memory database it would make
        yield url
        drop_database(url)
        return
    if backend == "sqlite":
        (tmp_path / "db").mkdir()
        yield str(tmp_path / "db" / "state.db")
        return
    with fresh_pg_schema() as (url, _name):
        yield url


@pytest.fixture
def engine_defaults() -> Callable[[], dict[str, Any]]:
    """The keyword arguments every engine of a suite starts from; a suite overrides this."""
    return dict


@pytest.fixture
def open_engine(store_url: str, engine_defaults: Callable[[], dict[str, Any]]) -> Iterator[Callable[..., Engine]]:
    """``open_engine(**kwargs)`` opens an Engine on the test's database, ``kwargs`` over the
    suite's defaults; every engine opened is closed at teardown (closing twice is harmless)."""
    engines: list[Engine] = []

    def make(**kwargs: Any) -> Engine:
        engine = Engine(open_store(store_url), **{**engine_defaults(), **kwargs})
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()
