"""The runner against real scripts, with an injected clock, on every store backend (memory,
SQLite, PostgreSQL): the seed table, rule order, budgets, gates, the hold after STUCK, parked items."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import pytest

from statewright._errors import InputError
from statewright.loop.errors import RunHeldError, SourceError
from statewright.loop.runner import clear_hold, decide_gate, request_stop
from statewright.loop.store import LoopStore
from statewright.loop.wake import handlers
from statewright.machine.loop.model import ItemStatus, LineKind, LoopStatus
from statewright.runtime.clock import FakeClock as RuntimeClock
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker
from statewright.store import open_store

from .helpers import FakeClock, command, launches, person, record, run_loop, table, write_loop

S = LoopStatus


@pytest.fixture
def db(store_url: str) -> str:
    """The run's database: an in-memory one, a SQLite file, or a PostgreSQL schema."""
    return store_url


def test_traced_run_reproduced(tmp_path: Path, db: str, clock: FakeClock) -> None:
    """'Done. All tests pass.' while a test fails -> FAIL recorded, go again, PASS, DONE."""
    loop = write_loop(tmp_path / "loop", [{"id": "88", "fix_on_attempt": 2}])
    outcome = run_loop(loop, db, clock)
    assert outcome.status is S.DONE and outcome.reason == "goal met"
    lines = record(db, outcome.run_id)
    assert [(x.state, x.next_state) for x in lines] == [
        (S.IDLE, S.FINDING),
        (S.FINDING, S.ASSIGNING),
        (S.ASSIGNING, S.RUNNING),
        (S.RUNNING, S.CHECKING),
        (S.CHECKING, S.RECORDING),
        (S.RECORDING, S.DECIDING),
        (S.DECIDING, S.FINDING),
        (S.FINDING, S.ASSIGNING),
        (S.ASSIGNING, S.RUNNING),
        (S.RUNNING, S.CHECKING),
        (S.CHECKING, S.RECORDING),
        (S.RECORDING, S.DECIDING),
        (S.DECIDING, S.DONE),
    ]
    running1 = lines[3]
    assert running1.event == "launched; returns 'Done. All tests pass.'"
    assert running1.written["note"] == "Done. All tests pass."
    checking1 = lines[4]
    assert checking1.written["verdict"] == "fail"
    assert "1 failed (test_export_empty)" in checking1.written["output"]["suite"]
    assert "FAILED tests/test_export.py::test_export_empty" in checking1.written["output"]["suite"]
    assert lines[5].summary == "88 failed; open; passes 1; since last close 1"
    assert lines[6].event == "goal false; 1 workable; 1 < 5; budget left"
    assert lines[8].event == "brief complete, with the prior failure"
    assert "1 failed (test_export_empty)" in lines[8].written["brief"]
    assert lines[10].written["verdict"] == "pass"
    done = lines[-1]
    assert done.written["reason"] == "goal met"
    assert done.written["oracle_output"][0]["output"].startswith("suite: 0 failed, 1 passed")
    assert launches(tmp_path / "loop") == [("88", 1), ("88", 2)]
    with LoopStore.open(db) as store:
        assert [p["verdict"] for p in store.passes(outcome.run_id)] == ["fail", "pass"]
        assert store.run(outcome.run_id).state.tokens_spent == 200


def test_escalated_parked_item_persists_across_runs(tmp_path: Path, db: str) -> None:
    """An always-failing item is parked after 3 attempts and gets no fresh attempts next run."""
    loop = write_loop(tmp_path / "loop", [{"id": "7", "fix_on_attempt": None}])
    first = run_loop(loop, db)
    assert first.status is S.ESCALATED
    assert launches(tmp_path / "loop") == [("7", 1), ("7", 2), ("7", 3)]
    last = record(db, first.run_id)[-1]
    assert last.written["parked"] == ["7"]
    second = run_loop(loop, db)
    assert second.status is S.ESCALATED and second.run_id != first.run_id
    assert len(launches(tmp_path / "loop")) == 3  # no fresh attempts
    with LoopStore.open(db) as store:
        (item,) = store.ledger("nightly")
    assert (item.status, item.attempts) == (ItemStatus.PARKED, 3)


def test_stuck_holds_new_runs_until_cleared(tmp_path: Path, db: str, clock: FakeClock) -> None:
    """STUCK by passes-since-last-close; the next run refuses to start until cleared with a reason."""
    items = [{"id": "a", "fix_on_attempt": None}, {"id": "b", "fix_on_attempt": None}]
    loop = write_loop(tmp_path / "loop", items, stuck_after=2)
    outcome = run_loop(loop, db, clock)
    assert outcome.status is S.STUCK
    assert "no item closed in 2 passes" in outcome.reason
    with pytest.raises(RunHeldError, match=f"clear {outcome.run_id} --reason TEXT"):
        run_loop(loop, db, clock)
    with LoopStore.open(db) as store:
        clear_hold(store, outcome.run_id, actor="ann", reason="b's test was flaky; fixed", at_ms=clock())
        assert store.run(outcome.run_id).cleared_by == "ann"
    again = run_loop(loop, db, clock)
    assert again.run_id != outcome.run_id


def test_out_of_budget_on_passes_and_tokens(tmp_path: Path, db: str) -> None:
    """A spent cap ends the run OUT_OF_BUDGET, naming the cap."""
    loop = write_loop(tmp_path / "a", [{"id": "x", "fix_on_attempt": 3}], budgets={"passes": 1})
    outcome = run_loop(loop, db)
    assert outcome.status is S.OUT_OF_BUDGET
    assert record(db, outcome.run_id)[-1].written["caps"] == ["passes"]

    loop = write_loop(
        tmp_path / "b",
        [{"id": "y", "fix_on_attempt": 3, "tokens": 600}],
        loop="tokens",
        budgets={"passes": 9, "tokens": 1000},
    )
    outcome = run_loop(loop, tmp_path / "b.db")
    assert outcome.status is S.OUT_OF_BUDGET
    assert record(tmp_path / "b.db", outcome.run_id)[-1].written["caps"] == ["tokens"]


def test_wall_time_budget_uses_the_injected_clock(tmp_path: Path, db: str) -> None:
    """Wall time is measured from the trigger with the clock the runner was given."""

    class Jumpy(FakeClock):
        def __call__(self) -> int:
            self.now_ms += 3_600_000  # every read is an hour later
            return self.now_ms

    loop = write_loop(tmp_path / "l", [{"id": "x", "fix_on_attempt": 3}], budgets={"passes": 9, "wall_time": "2h"})
    outcome = run_loop(loop, db, Jumpy())
    assert outcome.status is S.OUT_OF_BUDGET
    assert record(db, outcome.run_id)[-1].written["caps"] == ["wall_time"]


def test_worker_failing_to_launch_is_a_no_result_pass(tmp_path: Path, db: str) -> None:
    """A worker that exits non-zero, or cannot start, is 'no result' and spends the pass."""
    loop = write_loop(tmp_path / "l", [{"id": "x", "exit": 3}], attempts_per_item=1)
    outcome = run_loop(loop, db)
    assert outcome.status is S.ESCALATED
    lines = record(db, outcome.run_id)
    running = next(x for x in lines if x.state is S.RUNNING)
    assert running.next_state is S.RECORDING
    assert running.written == {"verdict": "no_result", "cause": "the worker exited with status 3"}

    loop = write_loop(
        tmp_path / "m",
        [{"id": "x"}],
        loop="nolaunch",
        attempts_per_item=1,
        workflow={"command": ["/nonexistent/worker"]},
    )
    outcome = run_loop(loop, tmp_path / "m.db")
    running = next(x for x in record(tmp_path / "m.db", outcome.run_id) if x.state is S.RUNNING)
    assert "launch failed" in running.written["cause"]


def test_gate_sleeps_then_approval_resumes(tmp_path: Path, db: str, clock: FakeClock) -> None:
    """A gated pass parks the process (clean stop); an approval for the proposal_hash carries on."""
    loop = write_loop(tmp_path / "l", [{"id": "x"}], gate={"role": "maintainer"})
    paused = run_loop(loop, db, clock)
    assert paused.status is S.AWAITING_HUMAN and paused.paused == "asleep at the gate"
    with LoopStore.open(db) as store:
        (pending,) = store.pending_approvals(paused.run_id)
        assert pending.shown["checks"][0]["outcome"] == "pass"
        ann = person(store.store, "ann", "maintainer")
        decide_gate(store, paused.run_id, by=ann, proposal_hash=pending.proposal_hash, approve=True, at_ms=clock())
    done = run_loop(loop, db, clock)
    assert done.status is S.DONE and done.run_id == paused.run_id
    lines = record(db, done.run_id)
    kinds = [(x.state, x.kind) for x in lines if x.kind is not LineKind.MOVE]
    # the approval moves the sleeping run on; the next start is excused, as the sleep was
    assert kinds == [(S.AWAITING_HUMAN, LineKind.CLEAN_STOP), (S.RECORDING, LineKind.START)]
    approved = next(x for x in lines if x.event_type == "ApprovalGranted")
    assert approved.written["actor"] == "ann" and approved.written["proposal_hash"] == pending.proposal_hash


def _work(db: str, now_ms: int) -> int:
    """What a worker with the loop's handlers does, on a clock of its own at ``now_ms``, until
    nothing is left to claim: the number of commands it performed."""
    engine = Engine(open_store(db), clock=RuntimeClock(now_ms))
    try:
        return Worker(engine, handlers=handlers(engine.store, clock=engine.clock.now_ms)).run(until_idle=True).commands
    finally:
        engine.close()


def test_a_decision_at_the_gate_wakes_the_sleeping_run(tmp_path: Path, db: str, clock: FakeClock) -> None:
    """A run asleep at the gate: the approval's line and a WakeRun row are one commit; a
    worker claims the wake and drives the run to DONE, with no second 'loop run'."""
    loop = write_loop(tmp_path / "l", [{"id": "x"}], gate={"role": "maintainer"})
    paused = run_loop(loop, db, clock)
    with LoopStore.open(db) as store:
        (pending,) = store.pending_approvals(paused.run_id)
        assert store.store.outbox() == []  # a gate without a time limit sets no wake
        ann = person(store.store, "ann", "maintainer")
        decide_gate(store, paused.run_id, by=ann, proposal_hash=pending.proposal_hash, approve=True, at_ms=clock())
        [row] = store.store.outbox()
        assert (row["task_id"], row["type"]) == (f"loop-run-{paused.run_id}", "WakeRun")
        decided = store.lines(paused.run_id)[-1]
        assert decided.event_type == "ApprovalGranted" and [c["type"] for c in decided.commands][-1] == "WakeRun"
    assert _work(db, clock.now_ms) == 1
    lines = record(db, paused.run_id)
    assert lines[-1].next_state is S.DONE
    after = lines[[x.event_type for x in lines].index("ApprovalGranted") + 1]
    assert (after.event_type, after.kind, after.state) == ("ProcessStarted", LineKind.START, S.RECORDING)
    with LoopStore.open(db) as store:
        assert store.store.outbox() == []


def test_a_stopped_run_or_a_changed_loop_file_is_not_woken(
    tmp_path: Path, db: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The kill switch after the decision keeps the run stopped (the worker leaves it); a loop
    file changed since the run opened is refused (the run stays where it is)."""
    loop = write_loop(tmp_path / "l", [{"id": "x"}, {"id": "y"}], gate={"role": "m"})
    paused = run_loop(loop, db, clock)
    with LoopStore.open(db) as store:
        (p,) = store.pending_approvals(paused.run_id)
        ann = person(store.store, "ann", "m")
        decide_gate(store, paused.run_id, by=ann, proposal_hash=p.proposal_hash, approve=True, at_ms=clock())
        request_stop(store, paused.run_id, reason="hold on", at_ms=clock())
        before = store.run(paused.run_id).lines
    caplog.set_level(logging.INFO, logger="statewright.worker")
    assert _work(db, clock.now_ms) == 1  # claimed, and the stopped run left as it is
    assert f"loop run {paused.run_id} not woken: it is recording, and stopped" in caplog.text
    with LoopStore.open(db) as store:
        assert store.run(paused.run_id).lines == before and store.store.outbox() == []

    again = run_loop(loop, db, clock)  # takes the run up, and sleeps at the next item's gate
    assert again.run_id == paused.run_id and again.status is S.AWAITING_HUMAN
    loop.write_text(loop.read_text() + "# edited\n")
    with LoopStore.open(db) as store:
        (p,) = store.pending_approvals(again.run_id)
        decide_gate(store, again.run_id, by=ann, proposal_hash=p.proposal_hash, approve=True, at_ms=clock())
        before = store.run(again.run_id).lines
    assert _work(db, clock.now_ms) == 1  # claimed, and the changed file refused
    assert f"loop run {again.run_id} not woken: {loop} changed since run {again.run_id} opened" in caplog.text
    with LoopStore.open(db) as store:
        assert store.run(again.run_id).lines == before and store.run(again.run_id).status is S.RECORDING


def test_a_wake_the_run_was_taken_up_past_leaves_it_alone(
    tmp_path: Path, db: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Approved while asleep, the run is taken up by a 'loop run' before any worker claims
    the wake; that process drives it to the next item's gate. The wake, claimed later, finds
    the run moved on past its line and leaves it asleep there (no line written)."""
    loop = write_loop(tmp_path / "l", [{"id": "x"}, {"id": "y"}], gate={"role": "m"})
    paused = run_loop(loop, db, clock)
    with LoopStore.open(db) as store:
        (p,) = store.pending_approvals(paused.run_id)
        decide_gate(store, paused.run_id, by=person(store.store, "ann", "m"), proposal_hash=p.proposal_hash,
                    approve=True, at_ms=clock())
        decided = store.run(paused.run_id).lines
    again = run_loop(loop, db, clock)
    assert again.status is S.AWAITING_HUMAN and again.paused == "asleep at the gate"
    before = record(db, paused.run_id)
    caplog.set_level(logging.INFO, logger="statewright.worker")
    assert _work(db, clock.now_ms) == 1
    assert f"loop run {paused.run_id} not woken: a 'loop run' process took it up after line {decided}" in caplog.text
    assert record(db, paused.run_id) == before


def test_a_gates_time_limit_wakes_the_run_that_sleeps_there(tmp_path: Path, db: str, clock: FakeClock) -> None:
    """Asleep at a gate with a time limit: nothing wakes the run before the limit; once it
    passes, a worker drives the run on and the gate times out (the item parks), with no
    second 'loop run'. A gate decided before its limit leaves its timer nothing to do."""
    loop = write_loop(tmp_path / "l", [{"id": "x"}], gate={"role": "m", "timeout": "2d"})
    paused = run_loop(loop, db, clock)
    assert paused.status is S.AWAITING_HUMAN
    assert _work(db, clock.now_ms) == 0
    assert record(db, paused.run_id)[-1].kind is LineKind.CLEAN_STOP
    assert _work(db, clock.now_ms + 2 * 86_400_000) == 1
    lines = record(db, paused.run_id)
    assert lines[-1].next_state is S.ESCALATED
    timed_out = next(x for x in lines if x.event_type == "GateTimedOut")
    assert timed_out.written["timeout"] == "no decision within 2d"

    decided = write_loop(tmp_path / "m", [{"id": "x"}], loop="decided", gate={"role": "m", "timeout": "2d"})
    paused = run_loop(decided, db, clock)
    with LoopStore.open(db) as store:
        (p,) = store.pending_approvals(paused.run_id)
        decide_gate(store, paused.run_id, by=person(store.store, "ann", "m"), proposal_hash=p.proposal_hash,
                    approve=False, reason_code="touches billing", at_ms=clock())
        request_stop(store, paused.run_id, reason="not tonight", at_ms=clock())  # the decision's wake leaves it
    assert _work(db, clock.now_ms) == 1  # the decision's wake, claimed and the stopped run left
    before = record(db, paused.run_id)
    assert _work(db, clock.now_ms + 2 * 86_400_000) == 1  # the gate's timer, claimed and found decided
    assert record(db, paused.run_id) == before


def test_the_gates_rules_hold_for_a_python_caller(tmp_path: Path, db: str, clock: FakeClock) -> None:
    """decide_gate keeps the gate's rules whoever calls it: the roles are the store's (a
    Principal that claims the gate's role is refused when the store says otherwise), an agent
    identity never decides, a stale hash and a decision after the time limit are refused; each
    refusal writes nothing (no line, no wake)."""
    loop = write_loop(tmp_path / "l", [{"id": "x"}], gate={"role": "maintainer", "timeout": "1h"})
    paused = run_loop(loop, db, clock)
    with LoopStore.open(db) as store:
        (pending,) = store.pending_approvals(paused.run_id)
        h = pending.proposal_hash
        stale = h[:12] + "".join("1" if c == "0" else "0" for c in h[12:])
        eve = person(store.store, "eve", "intern")
        claims = dataclasses.replace(eve, roles=("maintainer",))  # what the caller says, not the store
        bot = person(store.store, "bot", "maintainer", "agent")
        ann = person(store.store, "ann", "maintainer")
        expires = pending.timeout_at_ms
        assert expires is not None
        refused = [
            (eve, h, clock(), "'eve' does not hold the role 'maintainer' the gate needs (has: intern)"),
            (claims, h, clock(), "'eve' does not hold the role 'maintainer' the gate needs (has: intern)"),
            (bot, h, clock(), "'bot' is an agent identity (role 'agent') and may never"),
            (ann, stale, clock(), f"the decision is for hash {stale} but the proposal shown has {h}"),
            (ann, h, expires, "the gate's time limit passed at"),
        ]
        before = (store.lines(paused.run_id), store.store.outbox())
        for who, hash_, at, says in refused:
            for approve in (True, False):
                with pytest.raises(InputError, match=re.escape(says)):
                    decide_gate(store, paused.run_id, by=who, proposal_hash=hash_, approve=approve,
                                reason_code="touches billing", at_ms=at)
                assert (store.lines(paused.run_id), store.store.outbox()) == before
        decide_gate(store, paused.run_id, by=ann, proposal_hash=h, approve=True, at_ms=expires - 1)
        assert store.run(paused.run_id).status is S.RECORDING


def test_gate_timeout_parks_the_item(tmp_path: Path, db: str, clock: FakeClock) -> None:
    """No decision within the gate's limit: the item parks; the clock is the injected one."""
    loop = write_loop(tmp_path / "l", [{"id": "x"}], gate={"role": "m", "timeout": "2d"})
    assert run_loop(loop, db, clock).status is S.AWAITING_HUMAN
    clock.advance(2 * 86_400_000)
    outcome = run_loop(loop, db, clock)
    assert outcome.status is S.ESCALATED
    with LoopStore.open(db) as store:
        assert store.ledger("nightly")[0].status is ItemStatus.PARKED
        assert store.pending_approvals() == []


def test_gate_denial_parks(tmp_path: Path, db: str, clock: FakeClock) -> None:
    """A denial parks the item with the reason in the record."""
    loop = write_loop(tmp_path / "l", [{"id": "x"}], gate={"role": "m"})
    paused = run_loop(loop, db, clock)
    with LoopStore.open(db) as store:
        (p,) = store.pending_approvals(paused.run_id)
        decide_gate(store, paused.run_id, by=person(store.store, "bob", "m"), proposal_hash=p.proposal_hash,
                    approve=False, reason_code="touches billing", at_ms=clock())
    outcome = run_loop(loop, db, clock)
    assert outcome.status is S.ESCALATED
    denial = next(x for x in record(db, outcome.run_id) if x.event_type == "ApprovalRejected")
    assert denial.written["denial"] == {"actor": "bob", "reason_code": "touches billing"}


def test_kill_switch_file_stops_cleanly_and_the_restart_never_relaunches(
    tmp_path: Path, db: str, clock: FakeClock
) -> None:
    """The worker creates the kill-switch file: clean stop in RUNNING; the next start is excused,
    records 'no result' for that attempt and launches attempt 2, never attempt 1 again."""
    root = tmp_path / "l"
    loop = write_loop(root, [{"id": "x", "touch": "STOP"}], kill_switch={"file": "STOP"})
    paused = run_loop(loop, db, clock)
    assert paused.status is S.RUNNING and paused.paused is not None
    assert "kill switch (file" in paused.paused
    # still on: the next start is excused, moves RUNNING -> RECORDING ('no result'),
    # then the switch stops it again at once
    again = run_loop(loop, db, clock)
    assert again.status is S.RECORDING
    (root / "STOP").unlink()
    write_loop(root, [{"id": "x"}], kill_switch={"file": "STOP"})
    done = run_loop(loop, db, clock)
    assert done.status is S.DONE
    lines = record(db, done.run_id)
    assert [k for k in table(lines) if k[1] != "move"] == [
        ("running", "clean stop", "running"),
        ("running", "start", "recording"),
        ("recording", "clean stop", "recording"),
        ("recording", "start", "recording"),
    ]
    no_result = next(x for x in lines if x.kind is LineKind.START and x.state is S.RUNNING)
    assert no_result.written["verdict"] == "no_result"
    assert next(x for x in lines if x.event_type == "RecordAppended").written["outcome"]["verdict"] == "no_result"
    assert launches(root) == [("x", 1), ("x", 2)]


def test_check_assets_the_worker_writes_make_the_check_error(tmp_path: Path, db: str) -> None:
    """A worker that edits a check's asset gets an error (a fail), never a pass."""
    root = tmp_path / "l"
    root.mkdir()
    guard = root / "guard.txt"
    guard.write_text("the tests\n", encoding="utf-8")
    loop = write_loop(
        root,
        [{"id": "x", "tamper": "guard.txt"}],
        attempts_per_item=1,
        check=[{"name": "suite", "command": command("check.py"), "assets": ["guard.txt"]}],
    )
    outcome = run_loop(loop, db)
    assert outcome.status is S.ESCALATED
    checking = next(x for x in record(db, outcome.run_id) if x.state is S.CHECKING)
    assert checking.written["verdict"] == "fail"
    assert "check asset changed" in checking.written["output"]["suite"]


def test_a_source_that_is_down_writes_nothing(tmp_path: Path, db: str) -> None:
    """SourceError is a crash: no line for FINDING's work; the next start counts a restart."""
    loop = write_loop(tmp_path / "l", [{"id": "x"}])
    (tmp_path / "l" / "backlog.jsonl").unlink()
    with pytest.raises(SourceError, match="cannot read"):
        run_loop(loop, db)
    write_loop(tmp_path / "l", [{"id": "x"}])
    outcome = run_loop(loop, db)
    assert outcome.status is S.DONE
    shape = table(record(db, outcome.run_id))
    assert shape[:2] == [("idle", "move", "finding"), ("finding", "restart", "finding")]


def test_brief_needing_a_person_parks_the_item(tmp_path: Path, db: str) -> None:
    """An item marked needs_person parks in ASSIGNING without launching a worker."""
    root = tmp_path / "l"
    loop = write_loop(root, [{"id": "x", "needs_person": "which customer is meant?"}])
    outcome = run_loop(loop, db)
    assert outcome.status is S.ESCALATED
    assert launches(root) == []
    line = next(x for x in record(db, outcome.run_id) if x.state is S.ASSIGNING)
    assert line.written == {"reason": "which customer is meant?", "park": "x"}


def test_several_items_close_in_source_order(tmp_path: Path, db: str) -> None:
    """Three items, one pass each, then the goal oracle runs once everything is closed."""
    root = tmp_path / "l"
    loop = write_loop(root, [{"id": "a"}, {"id": "b"}, {"id": "c"}])
    outcome = run_loop(loop, db)
    assert outcome.status is S.DONE
    assert launches(root) == [("a", 1), ("b", 1), ("c", 1)]
    goal_lines = [x for x in record(db, outcome.run_id) if x.event_type == "GoalEvaluated"]
    assert [x.next_state for x in goal_lines] == [S.FINDING, S.FINDING, S.DONE]


def test_kill_switch_on_before_the_trigger(tmp_path: Path, db: str, clock: FakeClock) -> None:
    """With the switch on, IDLE writes a clean-stop line instead of moving; off, the run starts."""
    root = tmp_path / "l"
    loop = write_loop(root, [{"id": "x"}], kill_switch={"file": "STOP"})
    (root / "STOP").write_text("", encoding="utf-8")
    paused = run_loop(loop, db, clock)
    assert paused.status is S.IDLE and paused.paused is not None
    (root / "STOP").unlink()
    done = run_loop(loop, db, clock)
    assert done.status is S.DONE and done.run_id == paused.run_id
    assert table(record(db, done.run_id))[:3] == [
        ("idle", "clean stop", "idle"),
        ("idle", "start", "idle"),
        ("idle", "move", "finding"),
    ]
