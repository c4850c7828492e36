"""The store backend is a parameter: every test here runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statewright.store import open_store
from statewright.store.sql import SqlStore

from .backends import fresh_pg_schema, skip_unreachable_postgres


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_unreachable_postgres(items, Path(__file__).parent)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A place for a fresh database: a SQLite file, or a new PostgreSQL schema."""
    if backend == "sqlite":
        yield str(tmp_path / "state.db")
        return
    with fresh_pg_schema() as (url, _name):
        yield url


@pytest.fixture
def opener(store_url: str) -> Iterator[Callable[[], SqlStore]]:
    """Open another store (connection) on the test's database; all are closed after."""
    opened: list[SqlStore] = []

    def open_one() -> SqlStore:
        s = open_store(store_url)
        opened.append(s)
        return s

    yield open_one
    for s in opened:
        s.close()


@pytest.fixture
def store(opener: Callable[[], SqlStore]) -> SqlStore:
    return opener()
