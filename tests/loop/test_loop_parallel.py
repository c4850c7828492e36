"""``parallel: N``: a loop run works a wave of up to N items at once, one pass and one record
row each, through the same state table; budgets are charged per pass and never overspent.

The scripted worker's ``barrier`` proves the passes of a wave run at once: each waits until
all of its wave's workers have arrived, which passes worked one at a time never do."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from statewright._errors import IllegalEventError
from statewright.cli import cli as main_cli
from statewright.loop.definition import load_loop
from statewright.machine.loop.codec import state_from_dict, state_to_dict
from statewright.machine.loop.events import (
    ApprovalGranted,
    AwaitPass,
    BriefReady,
    CheckFinished,
    GateSleep,
    ItemsFound,
    LaunchWorker,
    PassEnded,
    PassWaiting,
    ProcessStarted,
    RecordAppended,
    RequestApproval,
    RunChecks,
    StopWorker,
    TriggerArrived,
    WakeRun,
    WorkerReturned,
)
from statewright.machine.loop.model import CheckOutcome, CheckResult, LineKind, LoopConfig, LoopState, LoopStatus
from statewright.machine.loop.reducer import initial_state, transition
from statewright.runtime.engine import Engine
from statewright.runtime.verify import verify_all

from .helpers import FIX, FakeClock, record, run_loop, write_loop

S = LoopStatus


def _waves(lines: list[Any]) -> list[list[str]]:
    """The items each wave picked, from the FINDING lines."""
    return [ln.written.get("wave") or [ln.written["pick"]] for ln in lines if "pick" in ln.written]


def test_a_wave_works_its_items_at_once_one_record_row_each(tmp_path: Path, db: Path, clock: FakeClock) -> None:
    items = [{"id": f"i{n}", "barrier": [f"w{n // 3}", 3]} for n in range(6)]
    path = write_loop(tmp_path, items, parallel=3)
    out = run_loop(path, db, clock)
    assert out.status is S.DONE, out
    lines = record(db, out.run_id)
    assert _waves(lines) == [["i0", "i1", "i2"], ["i3", "i4", "i5"]]
    appended = [ln for ln in lines if ln.event_type == "RecordAppended"]
    assert [ln.written["outcome"]["item"] for ln in appended] == [f"i{n}" for n in range(6)]
    assert {ln.written["outcome"]["verdict"] for ln in appended} == {"pass"}
    # Each state is left only when the whole wave is through it: PROGRESS lines until then.
    progress = Counter((ln.state, ln.event_type) for ln in lines if ln.kind is LineKind.PROGRESS)
    assert progress == {
        (S.ASSIGNING, "BriefReady"): 4,
        (S.RUNNING, "WorkerReturned"): 4,
        (S.CHECKING, "CheckFinished"): 4,
        (S.RECORDING, "RecordAppended"): 4,
    }
    moves = [(ln.state, ln.next_state) for ln in lines if ln.kind is LineKind.MOVE]
    assert moves.count((S.RUNNING, S.CHECKING)) == 2 and moves.count((S.RECORDING, S.DECIDING)) == 2
    launches = (tmp_path / "launches.log").read_text().splitlines()
    assert sorted(ln.split()[0] for ln in launches) == [f"i{n}" for n in range(6)]


def test_a_waves_checks_run_at_once(tmp_path: Path, db: Path, clock: FakeClock) -> None:
    items = [{"id": f"i{n}", "check_barrier": ["c", 3]} for n in range(3)]
    out = run_loop(write_loop(tmp_path, items, parallel=3), db, clock)
    assert out.status is S.DONE, out
    checked = [ln for ln in record(db, out.run_id) if ln.event_type == "CheckFinished"]
    assert [ln.written["verdict"] for ln in checked] == ["pass"] * 3


def test_a_wave_never_launches_more_passes_than_the_budget_has_left(
    tmp_path: Path, db: Path, clock: FakeClock
) -> None:
    items = [{"id": f"i{n}"} for n in range(6)]
    path = write_loop(tmp_path, items, parallel=3, budgets={"passes": 5})
    out = run_loop(path, db, clock)
    assert out.status is S.OUT_OF_BUDGET, out
    assert _waves(record(db, out.run_id)) == [["i0", "i1", "i2"], ["i3", "i4"]]
    assert len((tmp_path / "launches.log").read_text().splitlines()) == 5


def test_a_pass_share_of_tokens_is_reserved_at_launch(tmp_path: Path, db: Path, clock: FakeClock) -> None:
    """1000 tokens, 300 a pass, 100 spent by each: waves of 3 (900 reserved), 2 (700 left),
    1 (500 left); the budget is never overspent."""
    items = [{"id": f"i{n}", "tokens": 100} for n in range(6)]
    budgets = {"passes": 20, "tokens": 1000, "per_pass": {"tokens": 300}}
    path = write_loop(tmp_path, items, parallel=3, budgets=budgets)
    out = run_loop(path, db, clock)
    assert out.status is S.DONE, out
    assert [len(w) for w in _waves(record(db, out.run_id))] == [3, 2, 1]


def test_a_pass_that_spends_over_its_share_is_no_result_and_charged(
    tmp_path: Path, db: Path, clock: FakeClock
) -> None:
    items = [{"id": "cheap", "tokens": 100}, {"id": "greedy", "tokens": 450, "fix_on_attempt": 2}]
    budgets = {"passes": 20, "tokens": 2000, "per_pass": {"tokens": 400}}
    path = write_loop(tmp_path, items, parallel=2, budgets=budgets)
    out = run_loop(path, db, clock)
    lines = record(db, out.run_id)
    capped = [ln for ln in lines if ln.event_type == "WorkerReturned" and ln.written.get("verdict") == "no_result"]
    assert capped and "cap fired: the pass spent 450 tokens, over the 400 one pass may" in capped[0].written["cause"]
    counters = [ln.written["counters"] for ln in lines if ln.event_type == "RecordAppended"]
    assert counters[-1]["tokens_spent"] <= 2000
    assert any(c["tokens_spent"] >= 550 for c in counters)  # the greedy pass's 450 were charged


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"parallel": 4, "budgets": {"passes": 3}}, "parallel: 4 passes at once is over the budget of 3 passes"),
        ({"parallel": 2, "budgets": {"passes": 9, "tokens": 100}},
         "budgets.per_pass.tokens: required with parallel: 2 and budgets.tokens"),
        ({"parallel": 2, "budgets": {"passes": 9, "money_usd": 5, "per_pass": {"money_usd": 6}}},
         "budgets.per_pass.money_usd: 6 is over the whole budget of 5"),
        ({"parallel": 0}, "parallel: must be at least 1, got 0"),
        ({"budgets": {"passes": 9, "per_pass": {"minutes": 3}}}, "budgets.per_pass.minutes: unknown field"),
    ],
)
def test_a_wave_that_cannot_fit_its_budgets_is_refused_at_load(
    tmp_path: Path, fields: dict[str, Any], said: str
) -> None:
    path = write_loop(tmp_path, [{"id": "a"}], **fields)
    result = CliRunner().invoke(main_cli, ["validate", str(path)])
    assert result.exit_code == 1, result.output
    assert said in result.output and "Traceback" not in result.output


def test_validate_accepts_a_loop_with_a_wave(tmp_path: Path) -> None:
    budgets = {"passes": 9, "tokens": 1000, "money_usd": 5, "per_pass": {"tokens": 200, "money_usd": 1}}
    path = write_loop(tmp_path, [{"id": "a"}], parallel=3, budgets=budgets)
    result = CliRunner().invoke(main_cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "3 at once" in load_loop(path).describe()


# ------------------------------------------------------------------ the reducer, by hand

CFG = LoopConfig(loop="w", check_names=("suite",), oracle_names=("tests",), max_passes=10, parallel=2,
                 gate_role="maintainer", gate_timeout_ms=60_000)


class Drive:
    def __init__(self, state: LoopState) -> None:
        self.state = state
        self.lines: list[Any] = []

    def __call__(self, event: Any) -> Any:
        step = transition(self.state, event)
        self.state = step.state
        self.lines.append(step.line)
        assert state_from_dict(yaml.safe_load(yaml.safe_dump(state_to_dict(self.state)))) == self.state
        return step


def _launched() -> Drive:
    d = Drive(initial_state("r1", CFG))
    d(TriggerArrived("manual", 1))
    step = d(ItemsFound(("a", "b", "c"), 2))
    assert [p.item for p in d.state.wave] == ["a", "b"] and len(step.commands) == 2
    assert d(BriefReady("b", "brief b", 3)).commands == () and d.state.status is S.ASSIGNING
    step = d(BriefReady("a", "brief a", 4))
    assert d.state.status is S.RUNNING
    assert [(c.item, c.attempt) for c in step.commands if isinstance(c, LaunchWorker)] == [("a", 1), ("b", 1)]
    return d


def _ok(item: str, at: int) -> CheckFinished:
    return CheckFinished(item, 1, (CheckResult("suite", CheckOutcome.PASS, "ok"),), at)


def test_a_wave_at_the_gate_is_decided_pass_by_pass_by_hash() -> None:
    d = _launched()
    d(WorkerReturned("b", 1, 5))
    d(WorkerReturned("a", 1, 6))
    assert d.state.status is S.CHECKING
    d(_ok("a", 7))
    step = d(_ok("b", 8))
    assert d.state.status is S.AWAITING_HUMAN
    gates = [c for c in step.commands if isinstance(c, RequestApproval)]
    assert [g.item for g in gates] == ["a", "b"] and gates[0].proposal_hash != gates[1].proposal_hash
    sleep = d(GateSleep(9))  # the first gate to time out wakes the run
    assert next(c for c in sleep.commands if isinstance(c, WakeRun)).due_at_ms == 7 + 60_000
    by_hash = {g.item: g.proposal_hash for g in gates}
    step = d(ApprovalGranted(by_hash["b"], "maria", 10, ("maintainer",)))
    assert d.state.status is S.AWAITING_HUMAN and step.line.kind is LineKind.PROGRESS and step.commands == ()
    with pytest.raises(IllegalEventError):  # b is decided: its hash no longer names a pass at the gate
        transition(d.state, ApprovalGranted(by_hash["b"], "maria", 11, ("maintainer",)))
    step = d(ApprovalGranted(by_hash["a"], "maria", 12, ("maintainer",)))
    assert d.state.status is S.RECORDING and any(isinstance(c, WakeRun) for c in step.commands)
    d(RecordAppended("r1 record 1", 13))
    assert d.state.status is S.RECORDING and [p.item for p in d.state.wave] == ["b"]
    d(RecordAppended("r1 record 2", 14))
    assert d.state.status is S.DECIDING and d.state.wave == () and d.state.passes == 2
    assert [i.status for i in d.state.items if i.id in ("a", "b")] == ["closed", "closed"]


def test_a_restart_while_a_wave_runs_gives_up_its_lost_passes_and_waits_on_its_tasks() -> None:
    d = _launched()
    d(PassWaiting("a", 1, "t-a", 5, step="approve", role="maintainer"))  # b is still being worked
    assert d.lines[-1].kind is LineKind.PROGRESS and not d.state.clean_stop
    step = d(ProcessStarted(6))
    assert d.state.status is S.RUNNING
    assert [c for c in step.commands if isinstance(c, StopWorker)] == [StopWorker("b", 1)]
    assert [c for c in step.commands if isinstance(c, AwaitPass)] == [AwaitPass("a", 1, "t-a")]
    step = d(PassEnded("a", 1, "t-a", "completed", 7))
    assert d.state.status is S.CHECKING
    assert [(c.item, type(c)) for c in step.commands] == [("a", RunChecks)]


def test_a_wave_of_passes_that_wait_for_a_person_sleeps_only_when_none_is_worked_here() -> None:
    d = _launched()
    d(PassWaiting("a", 1, "t-a", 5))
    assert not d.state.clean_stop
    d(PassWaiting("b", 1, "t-b", 6))
    assert d.state.clean_stop and d.state.current is not None and d.state.current.asleep
    step = d(PassEnded("b", 1, "t-b", "completed", 7))
    assert d.state.status is S.RUNNING and step.commands == ()  # a still waits: no wake yet
    step = d(PassEnded("a", 1, "t-a", "halted", 8, reason="step_failed"))
    assert d.state.status is S.CHECKING and any(isinstance(c, WakeRun) for c in step.commands)


def test_a_single_pass_state_reads_and_writes_as_before() -> None:
    """A run of ``parallel: 1`` stores no wave fields: runs stored before waves replay as they were."""
    d = Drive(initial_state("r1", replace(CFG, parallel=1)))
    d(TriggerArrived("manual", 1))
    d(ItemsFound(("a", "b"), 2))
    stored = state_to_dict(d.state)
    assert "more" not in stored and "parallel" not in stored["config"] and "returned" not in stored["current"]


# ------------------------------------------------------------------ child tasks on every backend

def test_a_wave_of_child_tasks_completes_and_verifies(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    wf = root / "wave-fix.yaml"
    wf.write_text(yaml.safe_dump({"workflow": "wave-fix", "steps": [FIX]}))
    path = write_loop(root, [{"id": str(n)} for n in range(5)], workflow=str(wf), parallel=3)
    out = run_loop(path, store_url, clock)
    assert out.status is S.DONE, out
    lines = record(store_url, out.run_id)
    assert _waves(lines) == [["0", "1", "2"], ["3", "4"]]
    ended = [ln for ln in lines if ln.event_type == "PassEnded"]
    assert len(ended) == 5 and {ln.written["status"] for ln in ended} == {"completed"}
    tasks = engine.store.list_tasks(workflow="wave-fix")
    assert len(tasks) == 5 and {t.status for t in tasks} == {"completed"}
    count, findings = verify_all(engine)
    assert findings == [] and count >= 6
