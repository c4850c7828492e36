"""Fixtures for the GitHub integration: the fake GitHub (a local HTTP server) with the
worker's environment pointing at it, the example workflow with its scripted agents on the
path, engines on every store backend with a fake clock, and its people."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statewright.definition.loader import load_workflow
from statewright.definition.model import Workflow
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.users import Principal

from .fake_github import TOKEN, FakeGitHub, serve
from .support import EXAMPLE, EXAMPLE_DIR


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    with serve() as fake:
        monkeypatch.setenv("GITHUB_API_URL", fake.url)
        monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
        yield fake


@pytest.fixture
def review_workflow(monkeypatch: pytest.MonkeyPatch) -> Workflow:
    monkeypatch.syspath_prepend(str(EXAMPLE_DIR))
    return load_workflow(EXAMPLE)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine_defaults(clock: FakeClock, tmp_path: Path) -> Callable[[], dict[str, Any]]:
    return lambda: {"clock": clock, "workspace_root": tmp_path / "ws"}


@pytest.fixture
def engine(open_engine: Callable[..., Engine]) -> Engine:
    return open_engine()


@pytest.fixture
def people(engine: Engine) -> dict[str, Principal]:
    """alice (maintainer), bob (developer, no approval role) and olga (operator), with tokens."""
    root = engine.users.authenticate(engine.users.bootstrap("root").token)
    out = {}
    for name, roles in (("alice", ["maintainer"]), ("bob", ["developer"]), ("olga", ["operator"])):
        engine.users.add(root, name, roles)
        out[name] = engine.users.authenticate(engine.users.issue_token(root, name).token)
    return out
