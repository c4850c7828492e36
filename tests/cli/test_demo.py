"""``statewright demo`` runs the fix-a-bug example end to end, as a real process."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .support import sw_process


@pytest.mark.slow  # about 5 s of CPU in a dozen processes (git, pytest, agents): 6-18 s of wall time
def test_the_demo_loops_back_is_approved_by_alice_and_completes(tmp_path: Path) -> None:
    """The demo's output shows the loop-back, alice's approval quoting the hash, and a completed task."""
    workdir = tmp_path / "demo"

    result = sw_process("demo", "--workdir", workdir)

    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    shown = re.search(r"its hash is what an approval quotes:\n  ([0-9a-f]{64})\n", out)
    assert shown is not None, out
    proposal = shown.group(1)
    review = out[: shown.start()]
    assert f"proposal at approve (hash {proposal}):" in review
    assert '"results.implement.summary": "add() now returns a + b' in review
    assert "| -    return a - b\n    | +    return a + b" in review  # the diff the hash covers
    history = out[out.index("history of "):]
    assert re.search(r"FAIL test +code +#1 .*exit_status", history)
    assert "<- loop_back to implement" in history
    assert re.search(r"ok +implement +ai +#2", history)
    assert f"approved by alice, proposal {proposal[:12]}" in history
    assert f"--as alice --hash {proposal}" in out
    assert re.search(r"history of t-[0-9a-f]{19} \(fix-bug\), status completed", history)
    assert "tests on main: 2 passed" in out
    assert (workdir / "state.db").exists() and (workdir / "repo" / ".git").is_dir()
    assert "the demo now approves as alice" in out
    assert f"the demo's repository and database are left in {workdir}" in out
