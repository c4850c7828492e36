"""Fixtures for the command-line tests: a clean environment, a database on each store
backend (``db``; a module whose tests read a SQLite file's rows, or start real processes,
pins ``backend``), and the workflow files the tests submit."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statewright.store import open_store
from statewright.store.memory import drop_database
from store.backends import fresh_pg_schema

from .support import HOMES

BUILD = """\
workflow: build
input_schema:
  type: object
  properties: {n: {type: integer}, workspace: {type: string}}
  required: [n]
steps:
  - {id: build, kind: code, owner: ci, run: {command: [sh, -c, "echo built"]}}
  - {id: ship, kind: code, owner: ci, run: {command: [sh, -c, "echo shipped"]}}
"""

GATE = """\
workflow: gate
steps:
  - {id: build, kind: code, owner: ci, run: {command: [sh, -c, "echo built"]}}
  - id: approve
    kind: human
    owner: leads
    approvers: {role: maintainer}
    expires_after: 1d
  - {id: ship, kind: code, owner: ci, run: {command: [sh, -c, "echo shipped"]}, on_success: complete}
"""

DUTY = """\
workflow: duty
steps:
  - {id: propose, kind: human, owner: authors, approvers: {role: author}}
  - id: sign-off
    kind: human
    owner: leads
    approvers: {role: maintainer}
    separate_from: [propose]
"""

FLAG = """\
workflow: flag
steps:
  - {id: check-flag, kind: code, owner: ops, run: {command: [sh, -c, "test -f fixed"]}}
"""

BROKEN = """\
workflow: broken
steps:
  - {id: test, kind: code, owner: ci, run: {command: [pytest]}, on_failure: {loop_back: deploy, max_attempts: 2}}
  - {id: deploy, kind: code, owner: ci, run: {command: [make, deploy]}, colour: blue}
"""


@pytest.fixture
def db(backend: str, tmp_path: Path) -> Iterator[Path | str]:
    """The test's database: a SQLite file, a fresh PostgreSQL schema, or an in-memory
    database this process holds (the commands run in this process, so they share it)."""
    if backend == "memory":
        url = f"memory:{tmp_path.name}-{uuid.uuid4().hex[:8]}"
        open_store(url).close()  # made now: a command refuses a memory database it would make
        HOMES[url] = tmp_path
        yield url
        drop_database(url)
    elif backend == "sqlite":
        yield tmp_path / "state.db"
    else:
        with fresh_pg_schema() as (url, _name):
            HOMES[url] = tmp_path
            yield url


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, text in {"build": BUILD, "gate": GATE, "duty": DUTY, "flag": FLAG, "broken": BROKEN}.items():
        out[name] = tmp_path / f"{name}.yaml"
        out[name].write_text(text, encoding="utf-8")
    return out
