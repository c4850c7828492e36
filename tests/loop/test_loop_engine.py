"""A loop whose passes run as durable tasks in the task engine (EnginePassRunner)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from statewright.machine.loop.model import LoopStatus
from statewright.runtime.engine import Engine

from .helpers import record, run_loop, write_loop

AGENT = '''
import os
import pathlib

def fix(brief, ctx):
    item = brief["input"]["item"]
    if item.get("hard") and brief["input"]["attempt"] == 1:
        return {"verdict": None, "note": "Done. All tests pass."}  # a false report
    pathlib.Path(os.environ["LOOP_ROOT"], f"fixed-{item['id']}").write_text("ok")
    return {"verdict": None, "note": "fixed"}
'''


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "loop_engine_agent.py").write_text(AGENT)
    monkeypatch.syspath_prepend(str(mods))
    root = tmp_path / "loop"
    root.mkdir()
    monkeypatch.setenv("LOOP_ROOT", str(root))
    monkeypatch.chdir(root)
    return root


def test_each_pass_is_a_task_and_a_false_done_costs_one_pass(root: Path, tmp_path: Path) -> None:
    """Every pass runs one engine task; the worker's false "done" is a FAIL; the loop ends DONE."""
    wf = root / "fix.yaml"
    wf.write_text(yaml.safe_dump({
        "workflow": "fix-item",
        "steps": [{"id": "fix", "kind": "ai", "owner": "t",
                   "agent": {"type": "python", "callable": "loop_engine_agent:fix"}}],
    }))
    db = tmp_path / "state.db"
    path = write_loop(root, [{"id": "1"}, {"id": "2", "hard": True}], workflow=str(wf))
    outcome = run_loop(path, db)
    assert outcome.status is LoopStatus.DONE, outcome
    lines = record(db, outcome.run_id)
    assert sum(1 for ln in lines if ln.event_type == "WorkerReturned") == 3
    engine = Engine.open(db)
    tasks = engine.store.list_tasks(workflow="fix-item")
    assert len(tasks) == 3 and {t.status for t in tasks} == {"completed"}
    notes = [a["note"] for t in tasks for a in t.state["attempts"]]
    assert notes.count("Done. All tests pass.") == 1
    engine.close()
