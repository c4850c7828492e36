"""The example loop in examples/loops/ runs to DONE from a copy."""

from __future__ import annotations

import shutil
from pathlib import Path

from statewright.machine.loop.model import LoopStatus

from .helpers import FakeClock, record, run_loop

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "loops" / "fix-backlog"


def test_example_runs_to_done_after_one_false_report(tmp_path: Path) -> None:
    """Three items; the worker's false 'Done' on export-empty costs one pass; then DONE."""
    root = tmp_path / "fix-backlog"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("work", "STOP", "__pycache__"))
    db = tmp_path / "demo.db"
    outcome = run_loop(root / "loop.yaml", db, FakeClock())
    assert outcome.status is LoopStatus.DONE
    lines = record(db, outcome.run_id)
    verdicts = [x.written["verdict"] for x in lines if x.state is LoopStatus.CHECKING]
    assert verdicts == ["pass", "pass", "fail", "pass"]
    oracles = lines[-1].written["oracle_output"]
    assert [(o["name"], o["outcome"]) for o in oracles] == [("tests", "pass"), ("lint", "pass")]
    assert oracles[0]["output"].strip() == "3 passed, 0 failed"
