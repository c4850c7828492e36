"""The store backend is a parameter: every test here runs on the in-memory store, SQLite and
PostgreSQL, but for those that edit SQL rows behind the store's back (``SQL_BACKENDS``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from statewright.store import open_store
from statewright.store.base import Store


@pytest.fixture
def opener(store_url: str) -> Iterator[Callable[[], Store]]:
    """Open another store (connection) on the test's database; all are closed after."""
    opened: list[Store] = []

    def open_one() -> Store:
        s = open_store(store_url)
        opened.append(s)
        return s

    yield open_one
    for s in opened:
        s.close()


@pytest.fixture
def store(opener: Callable[[], Store]) -> Store:
    return opener()
