"""Callables are imported from the worker's own path: a module an agent leaves in a task's
workspace never runs, for that task or for the next one in the same worker, and sys.path is
never changed per task."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from statewright.definition import workflow_from_dict
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker

PLANTED = '''
from pathlib import Path
Path(__file__).with_name("PLANTED-MODULE-RAN").write_text("imported")

def step(ctx):
    return {"ok": True, "output": "the planted module ran"}
'''

GENUINE = '''
def step(ctx):
    return {"ok": True, "output": "the worker's own module ran"}
'''


def _workflow(module: str) -> object:
    return workflow_from_dict({"workflow": "call", "steps": [
        {"id": "run", "kind": "code", "owner": "t", "run": {"callable": f"{module}:step"}},
    ]})


def test_a_module_in_the_workspace_never_shadows_or_adds_a_callable(
    open_engine: Callable[..., Engine], worker_lib: Path, tmp_path: Path,
) -> None:
    """Two tasks share a workspace holding modules named like the callables: the one the
    worker has runs; the one only the workspace has is not found; nothing planted ever runs."""
    workspace = tmp_path / "shared-ws"
    workspace.mkdir()
    (workspace / "sw_iso_genuine.py").write_text(PLANTED)
    (workspace / "sw_iso_only_here.py").write_text(PLANTED)
    (worker_lib / "sw_iso_genuine.py").write_text(GENUINE)
    engine = open_engine()
    path_before = list(sys.path)
    try:
        first = engine.submit(_workflow("sw_iso_genuine"), {"workspace": str(workspace)})
        second = engine.submit(_workflow("sw_iso_only_here"), {"workspace": str(workspace)})
        third = engine.submit(_workflow("sw_iso_genuine"), {"workspace": str(workspace)})
        Worker(engine).run(until_idle=True)
    finally:
        sys.modules.pop("sw_iso_genuine", None)
        sys.modules.pop("sw_iso_only_here", None)

    assert sys.path == path_before
    assert not (workspace / "PLANTED-MODULE-RAN").exists()
    for tid in (first, third):
        st = engine.state(tid)
        assert st.status is TaskStatus.COMPLETED
        assert st.attempts[0].output == "the worker's own module ran"
    st = engine.state(second)
    assert st.status is TaskStatus.HALTED
    assert st.attempts[0].reason == "not_found"
    assert "cannot import module 'sw_iso_only_here'" in st.attempts[0].detail
