"""Fixtures for the isolation tests: the store backend as a parameter, an engine whose
workspaces live away from the database, a worker's own import path, and secrets planted in
the worker's environment."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statewright.runtime.engine import Engine
from statewright.store import open_store
from store.backends import fresh_pg_schema, skip_unreachable_postgres

TESTS_DIR = Path(__file__).resolve().parents[1]
if str(TESTS_DIR) not in sys.path:  # makes ``fakes`` importable however pytest was started
    sys.path.insert(0, str(TESTS_DIR))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_unreachable_postgres(items, Path(__file__).parent)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STATEWRIGHT_DB", "STATEWRIGHT_USERS", "STATEWRIGHT_CRASH_AT", "STATEWRIGHT_TOKEN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh database: a SQLite file, or a new PostgreSQL schema."""
    if backend == "sqlite":
        (tmp_path / "db").mkdir()
        yield str(tmp_path / "db" / "state.db")
        return
    with fresh_pg_schema() as (url, _name):
        yield url


@pytest.fixture
def open_engine(store_url: str, tmp_path: Path) -> Iterator[Callable[..., Engine]]:
    """``open_engine()``: an Engine on the test's database with workspaces under
    ``tmp_path/ws-root``; every engine opened is closed after the test."""
    engines: list[Engine] = []

    def make(**kwargs: Any) -> Engine:
        kwargs.setdefault("workspace_root", tmp_path / "ws-root")
        engine = Engine(open_store(store_url), **kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture
def worker_lib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on the worker's own import path."""
    lib = tmp_path / "lib"
    lib.mkdir()
    monkeypatch.syspath_prepend(str(lib))
    return lib


def secret(label: str) -> str:
    """A value nobody would write by chance, named so a leak says where it came from."""
    return f"{label}-{uuid.uuid4().hex}"
