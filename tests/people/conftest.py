"""The people tests run on SQLite and on PostgreSQL; no token leaks in from the environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store.backends import fresh_pg_schema, skip_unreachable_postgres


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_unreachable_postgres(items, Path(__file__).parent)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STATEWRIGHT_DB", "STATEWRIGHT_TOKEN", "STATEWRIGHT_USERS", "STATEWRIGHT_CRASH_AT"):
        monkeypatch.delenv(name, raising=False)


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
