"""Fixtures for the isolation tests: the store backend as a parameter, an engine whose
workspaces live away from the database, a worker's own import path, and secrets planted in
the worker's environment."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]
if str(TESTS_DIR) not in sys.path:  # makes ``fakes`` importable however pytest was started
    sys.path.insert(0, str(TESTS_DIR))


@pytest.fixture
def engine_defaults(tmp_path: Path) -> Callable[[], dict[str, Any]]:
    """Engines keep their workspaces under ``tmp_path/ws-root``, away from the database."""
    return lambda: {"workspace_root": tmp_path / "ws-root"}


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
