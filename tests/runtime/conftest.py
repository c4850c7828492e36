"""Fixtures for the runtime tests: a clean environment, a fake clock, engines that are
closed after the test, and the effect script the crash tests run."""

from __future__ import annotations

from pathlib import Path

import pytest

from statewright.runtime.clock import FakeClock

from .support import EFFECT_SCRIPT


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def store_url(db: Path | str) -> str:
    """The runtime tests name their database ``db`` (a file, or a URL where a test says so)."""
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
