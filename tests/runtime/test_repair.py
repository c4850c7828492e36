"""A schema-invalid verdict from a real agent gets exactly one repair turn, then fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from statewright.definition import workflow_from_dict
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker
from statewright.store import open_store

AGENTS = '''
CALLS = []

def repairs(brief, ctx):
    CALLS.append(brief.get("repair"))
    if "repair" in brief:
        return {"verdict": {"approved": True, "must_fix": []}}
    return {"verdict": {"approved": "yes, looks fine"}}

def never(brief, ctx):
    CALLS.append(brief.get("repair"))
    return {"verdict": {"approved": True, "extra": "unknown fields fail closed"}}
'''


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    pkg = tmp_path / "mods"
    pkg.mkdir()
    (pkg / "repair_agents.py").write_text(AGENTS)
    monkeypatch.syspath_prepend(str(pkg))
    import repair_agents  # type: ignore[import-not-found]

    repair_agents.CALLS.clear()
    return repair_agents


def _run(tmp_path: Path, fn: str) -> tuple[Engine, str]:
    wf = workflow_from_dict({
        "workflow": "review-only",
        "steps": [{"id": "review", "kind": "ai", "owner": "t", "output_schema": "review",
                   "agent": {"type": "python", "callable": f"repair_agents:{fn}"}}],
    })
    engine = Engine(open_store(tmp_path / "s.db"), clock=FakeClock(), workspace_root=tmp_path / "ws")
    tid = engine.submit(wf, {})
    Worker(engine).run(until_idle=True)
    return engine, tid


def test_one_repair_turn_then_pass(tmp_path: Path, agents: object) -> None:
    """The first invalid verdict earns one repair turn quoting the error; a valid repair passes."""
    engine, tid = _run(tmp_path, "repairs")
    st = engine.state(tid)
    assert st.status.value == "completed"
    assert len(st.attempts) == 1 and st.attempts[0].number == 1
    calls = agents.CALLS  # type: ignore[attr-defined]
    assert len(calls) == 2 and calls[0] is None and "approved" in calls[1]["error"]
    engine.close()


def test_second_invalid_verdict_fails_the_attempt(tmp_path: Path, agents: object) -> None:
    """A verdict still invalid after the repair turn fails as invalid_verdict and is routed (halt)."""
    engine, tid = _run(tmp_path, "never")
    st = engine.state(tid)
    assert st.status.value == "halted"
    assert [a.reason for a in st.attempts] == ["invalid_verdict"]
    assert len(agents.CALLS) == 2  # type: ignore[attr-defined]
    engine.close()
