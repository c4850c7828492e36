"""Fixtures for executor tests: an ExecContext in a temporary workspace, importable
throwaway modules on the worker's path, and the path to the stand-in CLI agent."""

from __future__ import annotations

import itertools
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]
if str(TESTS_DIR) not in sys.path:  # makes ``fakes`` importable however pytest was started
    sys.path.insert(0, str(TESTS_DIR))

from statewright.executors import ExecContext  # noqa: E402

CLI_AGENT = TESTS_DIR / "fakes" / "cli_agent.py"
_module_numbers = itertools.count()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def ctx(workspace: Path) -> ExecContext:
    return ExecContext(
        task_id="task-1",
        step="review",
        attempt=1,
        idempotency_key="task-1:review:1",
        workspace=workspace,
        timeout_seconds=20.0,
        env={"PATH": os.environ.get("PATH", os.defpath)},
    )


@pytest.fixture
def worker_lib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on the worker's own import path (callables load from there, never from
    a task's workspace)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    monkeypatch.syspath_prepend(str(lib))
    return lib


@pytest.fixture
def make_module(worker_lib: Path) -> Iterator[Callable[[str], str]]:
    """Write Python source as a uniquely named module on the worker's path; return its name."""
    names: list[str] = []

    def make(source: str) -> str:
        name = f"sw_test_module_{os.getpid()}_{next(_module_numbers)}"
        (worker_lib / f"{name}.py").write_text(textwrap.dedent(source))
        names.append(name)
        return name

    yield make
    for name in names:
        sys.modules.pop(name, None)


@pytest.fixture
def cli_agent() -> list[str]:
    """argv prefix that runs the stand-in CLI agent."""
    return [sys.executable, str(CLI_AGENT)]
