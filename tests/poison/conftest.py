"""Poison tests run on both backends: a SQLite file and a fresh PostgreSQL schema."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine


@pytest.fixture
def engine_defaults(tmp_path: Path) -> Callable[[], dict[str, Any]]:
    """Each engine gets a fake clock of its own, and workspaces under ``tmp_path/workspaces``."""
    return lambda: {"clock": FakeClock(), "workspace_root": tmp_path / "workspaces"}


@pytest.fixture
def engine(open_engine: Callable[..., Engine]) -> Engine:
    return open_engine()
