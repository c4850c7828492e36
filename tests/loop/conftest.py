"""The loop suites' fixtures. ``db`` is the database a loop's runs are kept in, on every store
backend (``store_url``: an in-memory database, a SQLite file, a fresh PostgreSQL schema); a
test whose loop runs in another process (the ``cli`` helper) takes ``sql_db``, the two that
outlive a process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statewright.runtime.engine import Engine
from statewright.store import open_store
from store.backends import SQL_BACKENDS, fresh_pg_schema

from .helpers import ENGINE_AGENT, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(store_url: str) -> str:
    return store_url


@pytest.fixture(params=SQL_BACKENDS)
def sql_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | str]:
    if request.param == "sqlite":
        yield tmp_path / "state" / "state.db"
        return
    with fresh_pg_schema() as (url, _name):
        yield url


# A loop whose passes are child tasks: the agent module its workflow names, and the folder
# the loop runs in (the agent writes fixed-<id> there).

@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "loop_engine_agent.py").write_text(ENGINE_AGENT)
    monkeypatch.syspath_prepend(str(mods))
    root = tmp_path / "loop"
    root.mkdir()
    monkeypatch.setenv("LOOP_ROOT", str(root))
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    engine = Engine(open_store(store_url))
    yield engine
    engine.close()


