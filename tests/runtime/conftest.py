"""Fixtures for the runtime tests: a clean environment, a fake clock, engines that are
closed after the test, and the effect script the crash tests run. Every test that takes
``db`` (or ``open_engine``) runs on each store backend; one that needs a SQLite file (rows
edited behind the store's back, a worker in another process) says so with
``@pytest.mark.parametrize("backend", ["sqlite"])``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statewright.runtime.clock import FakeClock
from statewright.store.memory import drop_database
from store.backends import fresh_pg_schema

from .support import EFFECT_SCRIPT


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(backend: str, tmp_path: Path) -> Iterator[Path | str]:
    """The test's database: a SQLite file, or the URL of an in-memory database or of a fresh
    PostgreSQL schema."""
    if backend == "memory":
        url = f"memory:{tmp_path.name}-{uuid.uuid4().hex[:8]}"
        yield url
        drop_database(url)
    elif backend == "sqlite":
        yield tmp_path / "state.db"
    else:
        with fresh_pg_schema() as (url, _name):
            yield url


@pytest.fixture
def store_url(db: Path | str) -> str:
    """The runtime tests name their database ``db``; ``open_engine`` opens it."""
    return str(db)


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
