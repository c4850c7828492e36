"""The pure loop reducer: the state table, DECIDING's rule order, resume()."""

from __future__ import annotations

from dataclasses import replace

import pytest

from statewright._errors import IllegalEventError
from statewright._time import when
from statewright.loop.errors import LoopDefinitionError
from statewright.machine.loop.events import (
    AppendRecord,
    ApprovalGranted,
    ApprovalRejected,
    AwaitPass,
    BriefNeedsPerson,
    BriefReady,
    BuildBrief,
    CheckFinished,
    EvaluateGoal,
    Event,
    FindItems,
    GateSleep,
    GateTimedOut,
    GoalEvaluated,
    ItemsFound,
    KillSwitch,
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
    WorkerNoResult,
    WorkerReturned,
)
from statewright.machine.loop.model import (
    LEGAL_MOVES,
    TABLE,
    CheckOutcome,
    CheckResult,
    ItemLedger,
    ItemStatus,
    LineKind,
    LoopConfig,
    LoopState,
    LoopStatus,
    RecordLine,
    Verdict,
)
from statewright.machine.loop.reducer import Transition, initial_state, transition

S = LoopStatus
CFG = LoopConfig(loop="nightly", check_names=("suite",), oracle_names=("tests",), max_passes=10)
PASS, FAIL = CheckOutcome.PASS, CheckOutcome.FAIL


class Driver:
    """Applies events and keeps every line and command, like the store would."""

    def __init__(self, config: LoopConfig = CFG, ledger: tuple[ItemLedger, ...] = ()) -> None:
        self.state = initial_state("41", config, ledger)
        self.lines: list[RecordLine] = []
        self.steps: list[Transition] = []
        self.t = 0

    def __call__(self, *events: Event) -> Transition:
        step = None
        for event in events:
            step = transition(self.state, event)
            self.state = step.state
            self.steps.append(step)
            if step.line is not None:
                self.lines.append(step.line)
        assert step is not None
        return step

    def at(self) -> int:
        self.t += 1000
        return self.t

    # scripted pieces of a pass
    def open(self, *items: str) -> Transition:
        return self(TriggerArrived("06:00 schedule fires", self.at()), ItemsFound(items, self.at()))

    def work(self, outcome: CheckOutcome = PASS, output: str = "0 failed") -> Transition:
        cur = self.state.current
        assert cur is not None
        self(
            BriefReady(cur.item, f"brief for {cur.item}", self.at()),
            WorkerReturned(cur.item, cur.attempt, self.at(), note="Done. All tests pass.", tokens=1000, money_usd=0.5),
        )
        return self(CheckFinished(cur.item, cur.attempt, (CheckResult("suite", outcome, output),), self.at()))

    def record(self) -> Transition:
        return self(RecordAppended(f"r{len(self.lines)}", self.at()))

    def goal(self, outcome: CheckOutcome = PASS, output: str = "0 failed; lint clean") -> Transition:
        return self(GoalEvaluated((CheckResult("tests", outcome, output),), self.at()))

    def again(self, *items: str) -> Transition:
        return self(ItemsFound(items, self.at()))

    def shape(self) -> list[tuple[S, S]]:
        return [(x.state, x.next_state) for x in self.lines]


def test_table_has_the_25_rows_and_no_running_to_done() -> None:
    """The table is the document's: 18 rows plus 7 restart rows, and no RUNNING -> DONE."""
    assert len(TABLE) == 25
    assert (S.RUNNING, S.DONE) not in LEGAL_MOVES
    sources_to_terminals = {(a, b) for a, b in LEGAL_MOVES if b.is_terminal}
    assert {a for a, _ in sources_to_terminals} == {
        S.FINDING,
        S.ASSIGNING,
        S.RUNNING,
        S.CHECKING,
        S.AWAITING_HUMAN,
        S.RECORDING,
        S.DECIDING,
    }
    assert {b for a, b in sources_to_terminals if a is not S.DECIDING} == {S.STUCK}
    assert not any(a.is_terminal for a, _ in LEGAL_MOVES)


def test_states_and_verdicts_speak_lower_case_and_read_the_old_words() -> None:
    """Values are lower-case snake_case, as a task's statuses are; the upper-case states and
    the verdict words an earlier release stored decode to the same members; nothing else does."""
    assert [str(s) for s in S] == [s.name.lower() for s in S]
    assert [str(v) for v in Verdict] == ["pass", "fail", "no_result", "denied", "gate_timeout", "needs_person"]
    assert S("AWAITING_HUMAN") is S.AWAITING_HUMAN and S("out_of_budget") is S.OUT_OF_BUDGET
    old = {"PASS": Verdict.PASS, "FAIL": Verdict.FAIL, "no result": Verdict.NO_RESULT,
           "gate timeout": Verdict.GATE_TIMEOUT, "needs a person": Verdict.NEEDS_PERSON, "denied": Verdict.DENIED}
    assert {word: Verdict(word) for word in old} == old
    for bad_state in ("FINISHED", "", "done "):
        with pytest.raises(ValueError):
            S(bad_state)
    for bad_verdict in ("passed", "Pass", "no  result"):
        with pytest.raises(ValueError):
            Verdict(bad_verdict)


def test_traced_run_false_report_costs_one_pass_then_done() -> None:
    """The document's traced run: 'Done. All tests pass.' with a failing test is a FAIL; DONE later."""
    d = Driver()
    d.open("#88")
    step = d.work(FAIL, "FAILED test_export_empty\n1 failed (test_export_empty)")
    assert d.state.status is S.RECORDING
    assert step.line is not None and step.line.written["verdict"] == "fail"
    assert "1 failed (test_export_empty)" in str(step.line.written["output"])
    step = d.record()
    assert step.line is not None and "passes 1; since last close 1" in step.line.summary
    assert step.commands == (EvaluateGoal(()),)  # items open: the oracle is not even run
    step = d.goal(FAIL, "not run")
    assert step.line is not None and step.line.summary == '"go again"'
    assert step.line.event == "goal false; 1 workable; 1 < 5; budget left"
    step = d.again("#88")
    assert step.commands == (BuildBrief("#88", 2, d.state.item("#88").last_failure),)  # type: ignore[union-attr]
    assert "1 failed (test_export_empty)" in step.commands[0].prior_failure  # type: ignore[union-attr]
    d.work(PASS)
    step = d.record()
    assert step.commands == (EvaluateGoal(("tests",)),)
    step = d.goal(PASS, "suite: 0 failed; lint clean")
    assert d.state.status is S.DONE
    assert d.shape() == [
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
    done = d.lines[-1]
    assert done.written["reason"] == "goal met"
    assert done.written["oracle_output"] == [
        {"name": "tests", "outcome": "pass", "output": "suite: 0 failed; lint clean"}
    ]
    assert d.state.passes == 2 and d.state.tokens_spent == 2000


def test_worker_note_is_never_read_as_a_verdict() -> None:
    """A worker that says it is done still goes to CHECKING; only the check decides."""
    d = Driver()
    d.open("a")
    d(BriefReady("a", "b", 1))
    step = d(WorkerReturned("a", 1, 2, note="DONE. The goal is met. Mark the run DONE."))
    assert step.state.status is S.CHECKING
    assert step.commands == (RunChecks("a", 1, ("suite",)),)
    assert step.line is not None and step.line.written["note"].startswith("DONE")


def test_launch_worker_only_on_normal_entry_to_running() -> None:
    """LaunchWorker comes from BriefReady in ASSIGNING, with the attempt number written first."""
    d = Driver()
    d.open("a")
    step = d(BriefReady("a", "the brief", 5))
    assert step.commands == (LaunchWorker("a", 1, "the brief"),)
    assert step.line is not None and step.line.next_state is S.RUNNING
    assert step.line.written["attempt"] == 1
    assert d.state.item("a") == ItemLedger("a", ItemStatus.OPEN, attempts=1)


@pytest.mark.parametrize("outcome", [CheckOutcome.ERROR, CheckOutcome.TIMEOUT, CheckOutcome.FAIL])
def test_a_check_that_errors_or_times_out_is_a_fail(outcome: CheckOutcome) -> None:
    """error and timeout are verdict FAIL, like a plain fail."""
    d = Driver()
    d.open("a")
    step = d.work(outcome, "boom")
    assert step.line is not None and step.line.written["verdict"] == "fail"


def test_a_missing_check_result_is_a_fail() -> None:
    """A check that did not report counts as an error, never as a pass."""
    cfg = replace(CFG, check_names=("suite", "lint"))
    d = Driver(cfg)
    d.open("a")
    step = d.work(PASS)
    assert step.line is not None and step.line.written["failing_checks"] == ["lint"]


def test_budgets_spent_on_every_worked_pass_whatever_the_verdict() -> None:
    """A failed pass and a no-result pass both spend passes, tokens and money."""
    d = Driver()
    d.open("a")
    d.work(FAIL)
    d.record()
    assert (d.state.passes, d.state.tokens_spent, d.state.money_spent_usd) == (1, 1000, 0.5)
    d.goal()
    d.again("a")
    d(BriefReady("a", "b", d.at()), WorkerNoResult("a", 2, "cap fired", d.at(), tokens=7))
    d.record()
    assert (d.state.passes, d.state.tokens_spent) == (2, 1007)
    assert d.state.passes_since_last_close == 2


def test_done_beats_a_spent_budget() -> None:
    """Rule 1 comes before rule 4: the last pass can meet the goal and spend the budget."""
    d = Driver(replace(CFG, max_passes=1))
    d.open("a")
    d.work(PASS)
    d.record()
    d.goal(PASS)
    assert d.state.status is S.DONE


def test_out_of_budget_names_the_cap_and_the_goal_clauses() -> None:
    """Rule 4: passes spent -> OUT_OF_BUDGET, written with which cap and the goal clauses."""
    d = Driver(replace(CFG, max_passes=1))
    d.open("a")
    d.work(FAIL)
    d.record()
    step = d.goal()
    assert d.state.status is S.OUT_OF_BUDGET
    assert step.line is not None and step.line.written["caps"] == ["passes"]
    assert step.line.written["goal_clauses"]["unclosed"] == ["a"]  # type: ignore[index]


def test_wall_time_and_money_caps() -> None:
    """Time arrives in events; money is spent per pass."""
    d = Driver(replace(CFG, wall_time_ms=10_000, max_money_usd=0.4))
    d(TriggerArrived("t", 0), ItemsFound(("a",), 1))
    d(BriefReady("a", "b", 2), WorkerReturned("a", 1, 3, money_usd=0.5))
    d(CheckFinished("a", 1, (CheckResult("suite", FAIL),), 4), RecordAppended("r", 5))
    step = d(GoalEvaluated((), 20_000))
    assert step.line is not None and step.line.written["caps"] == ["money_usd", "wall_time"]


def test_escalated_when_every_item_is_parked() -> None:
    """Attempts exhausted -> parked; nothing workable -> ESCALATED with the parked list."""
    d = Driver(replace(CFG, attempts_per_item=2, stuck_after=9))
    d.open("a")
    d.work(FAIL)
    d.record()
    d.goal()
    d.again("a")
    d.work(FAIL)
    step = d.record()
    assert d.state.item("a") == replace(d.state.item("a"), status=ItemStatus.PARKED)  # type: ignore[arg-type]
    step = d.goal()
    assert d.state.status is S.ESCALATED
    assert step.line is not None and step.line.written["parked"] == ["a"]


def test_escalated_when_items_closed_but_an_oracle_fails() -> None:
    """Every item closed yet the linter complains: nothing is workable, so a person decides."""
    d = Driver()
    d.open("a")
    d.work(PASS)
    d.record()
    step = d.goal(FAIL, "lint: 2 warnings")
    assert d.state.status is S.ESCALATED
    assert step.line is not None and "oracle fails" in step.line.written["reason"]  # type: ignore[operator]
    assert step.line.written["oracle_output"][0]["output"] == "lint: 2 warnings"  # type: ignore[index]


def test_stuck_after_passes_without_a_close() -> None:
    """Rule 3: passes since the last close reach the threshold -> STUCK with the failing checks."""
    d = Driver(replace(CFG, stuck_after=2))
    d.open("a", "b")
    d.work(FAIL, "a fails")
    d.record()
    d.goal()
    d.again("a", "b")
    d.work(FAIL, "a fails again")
    d.record()
    step = d.goal()
    assert d.state.status is S.STUCK
    assert step.line is not None and len(step.line.written["failing_checks"]) == 2  # type: ignore[arg-type]


def test_a_close_resets_passes_since_last_close() -> None:
    """The stuck counter counts passes since the last closed item, not failures in a row."""
    d = Driver(replace(CFG, stuck_after=2))
    d.open("a", "b")
    d.work(FAIL)
    d.record()
    d.goal()
    d.again("a", "b")
    d.work(FAIL)  # a again (source order)
    d.record()
    assert d.state.passes_since_last_close == 2
    d2 = Driver(replace(CFG, stuck_after=2))
    d2.open("a", "b")
    d2.work(PASS)
    d2.record()
    assert d2.state.passes_since_last_close == 0


def test_parked_items_from_earlier_runs_stay_parked() -> None:
    """The ledger carried into a new run keeps parked items out of the workable list."""
    d = Driver(ledger=(ItemLedger("a", ItemStatus.PARKED, 3, "always fails"),))
    step = d.open("a")
    assert d.state.status is S.DECIDING
    assert step.line is not None and step.line.summary == "empty list"
    d.goal()
    assert d.state.status is S.ESCALATED


def test_brief_needing_a_person_parks_without_spending_a_pass() -> None:
    """ASSIGNING -> RECORDING: the item parks; no worker ran, so no pass is counted."""
    d = Driver()
    d.open("a")
    step = d(BriefNeedsPerson("a", "which customer?", d.at()))
    assert step.state.status is S.RECORDING
    assert isinstance(step.commands[0], AppendRecord)
    d.record()
    assert d.state.passes == 0 and d.state.item("a").status is ItemStatus.PARKED  # type: ignore[union-attr]


def test_gate_binds_approval_to_the_fingerprint() -> None:
    """A passing gated item waits; only an approval for the proposal_hash shown moves it."""
    d = Driver(replace(CFG, gate_role="maintainer"))
    d.open("a")
    step = d.work(PASS)
    assert d.state.status is S.AWAITING_HUMAN
    req = step.commands[0]
    assert isinstance(req, RequestApproval) and req.role == "maintainer"
    before = d.state
    stale = req.proposal_hash[:12] + "0" * 52 if req.proposal_hash[12:] != "0" * 52 else "1" * 64
    with pytest.raises(IllegalEventError, match="binds to what was shown") as refused:
        transition(before, ApprovalGranted(stale, "ann", d.at(), (req.role,)))
    assert f"for hash {stale} but the proposal shown has {req.proposal_hash};" in str(refused.value)  # both whole
    at = d.at()
    step = d(ApprovalGranted(req.proposal_hash, "ann", at, (req.role,)))
    assert step.line is not None and step.line.written["actor"] == "ann"
    assert step.line.summary == f"ann, {when(at)}, hash {req.proposal_hash[:12]}"  # a date, not epoch ms
    d.record()
    assert d.state.item("a").status is ItemStatus.CLOSED  # type: ignore[union-attr]


def test_gate_denial_and_timeout_park_the_item() -> None:
    """Denied or timed out at the gate: RECORDING, item parked."""
    d = Driver(replace(CFG, gate_role="m", gate_timeout_ms=60_000))
    d.open("a")
    req = d.work(PASS).commands[0]
    assert isinstance(req, RequestApproval)
    d(ApprovalRejected(req.proposal_hash, "bob", "touches billing", d.at(), (req.role,)))
    d.record()
    assert d.state.item("a").status is ItemStatus.PARKED  # type: ignore[union-attr]

    d = Driver(replace(CFG, gate_role="m", gate_timeout_ms=60_000))
    d.open("a")
    d.work(PASS)
    started = d.state.current.gate_started_at_ms  # type: ignore[union-attr]
    with pytest.raises(IllegalEventError, match="has not timed out") as early:
        transition(d.state, GateTimedOut(d.t + 10))
    assert f"(limit 1m, started {when(started)}, now {when(d.t + 10)}); keep waiting" in str(early.value)
    step = d(GateTimedOut(d.t + 60_000))
    assert step.line is not None and step.line.written["timeout"] == "no decision within 1m"
    d.record()
    assert d.state.item("a").status is ItemStatus.PARKED  # type: ignore[union-attr]


def _asleep_at_gate(timeout_ms: int | None = None) -> tuple[Driver, RequestApproval, Transition]:
    """A run whose process went to sleep at the gate: the driver, the gate's request, the sleep."""
    d = Driver(replace(CFG, gate_role="m", gate_timeout_ms=timeout_ms))
    d.open("a")
    req = d.work(PASS).commands[0]
    assert isinstance(req, RequestApproval)
    return d, req, d(GateSleep(d.at()))


def test_a_decision_at_the_gate_wakes_a_run_no_process_drives() -> None:
    """Asleep at the gate, a decision (either way) asks a worker to wake the run (WakeRun with
    the decision's line); a run a process drives, or one the kill switch stopped, is not woken."""
    for decide in (lambda h, at: ApprovalGranted(h, "ann", at, ("m",)),
                   lambda h, at: ApprovalRejected(h, "ann", "touches billing", at, ("m",))):
        d, req, sleep = _asleep_at_gate()
        assert sleep.commands == () and d.state.current is not None and d.state.current.asleep
        step = d(decide(req.proposal_hash, d.at()))
        assert step.commands[-1] == WakeRun("41") and d.state.status is S.RECORDING and d.state.clean_stop
        d(ProcessStarted(d.at()))  # the worker's start takes the run up
        assert d.state.current is not None and not d.state.current.asleep
        driven = Driver(replace(CFG, gate_role="m"))
        driven.open("a")
        driven.work(PASS)  # a 'loop run' process is at the gate, about to sleep
        assert not any(isinstance(c, WakeRun) for c in driven(decide(req.proposal_hash, driven.at())).commands)
        stopped, req, _ = _asleep_at_gate()
        stopped(KillSwitch("loop stop", stopped.at()))
        assert not any(isinstance(c, WakeRun) for c in stopped(decide(req.proposal_hash, stopped.at())).commands)


def test_a_gate_with_a_time_limit_sets_a_wake_for_when_it_passes() -> None:
    """Going to sleep at a gate with a time limit asks for a WakeRun due when the limit
    passes, bound to the proposal shown; a gate without one asks for nothing."""
    _d, req, sleep = _asleep_at_gate(60_000)
    assert req.timeout_at_ms is not None
    assert sleep.commands == (WakeRun("41", due_at_ms=req.timeout_at_ms, proposal_hash=req.proposal_hash),)
    assert _asleep_at_gate()[2].commands == ()


def test_illegal_events_leave_the_state_unchanged() -> None:
    """An event the table does not allow raises, naming the state and what it accepts."""
    d = Driver()
    with pytest.raises(IllegalEventError, match="not legal in idle; idle accepts TriggerArrived"):
        transition(d.state, WorkerReturned("a", 1, 1))
    d.open("a")
    with pytest.raises(IllegalEventError, match="pass in flight is 'a' attempt 1"):
        transition(d.state, BriefReady("b", "x", 1))
    with pytest.raises(IllegalEventError, match="duplicate"):
        transition(replace(d.state, status=S.FINDING), ItemsFound(("a", "a"), 1))


def test_terminal_states_have_no_exits() -> None:
    """A finished run refuses every event, and resume() does nothing."""
    d = Driver()
    d.open("a")
    d.work(PASS)
    d.record()
    d.goal()
    assert d.state.status is S.DONE
    with pytest.raises(IllegalEventError, match="terminal"):
        transition(d.state, TriggerArrived("again", 1))
    step = transition(d.state, ProcessStarted(1))
    assert step == Transition(d.state, (), None)


def test_config_needs_a_check_an_oracle_and_a_pass_cap() -> None:
    """The reducer refuses a loop without an oracle: its goal could never be checked."""
    with pytest.raises(LoopDefinitionError, match=r"goal\.oracles"):
        LoopConfig(loop="x", check_names=("c",), oracle_names=(), max_passes=1)
    with pytest.raises(LoopDefinitionError, match=r"budgets\.passes"):
        LoopConfig(loop="x", check_names=("c",), oracle_names=("o",), max_passes=0)


# ------------------------------------------------------------------ resume()


def _in(status: S) -> Driver:
    d = Driver(replace(CFG, gate_role="m") if status is S.AWAITING_HUMAN else CFG)
    d.open("a")
    if status is S.FINDING:
        d.work(FAIL)
        d.record()
        d.goal()
    elif status is not S.ASSIGNING:
        cur = d.state.current
        assert cur is not None
        d(BriefReady("a", "b", d.at()))
        if status is not S.RUNNING:
            d(WorkerReturned("a", 1, d.at()))
        if status in (S.RECORDING, S.DECIDING):
            d(CheckFinished("a", 1, (CheckResult("suite", FAIL),), d.at()))
        if status is S.AWAITING_HUMAN:
            d(CheckFinished("a", 1, (CheckResult("suite", PASS),), d.at()))
        if status is S.DECIDING:
            d.record()
    assert d.state.status is status
    return d


@pytest.mark.parametrize("status", [S.FINDING, S.ASSIGNING, S.AWAITING_HUMAN, S.RECORDING, S.DECIDING])
def test_third_restart_in_one_state_is_stuck_naming_it(status: S) -> None:
    """Restarts are counted per state; the third one ends the run STUCK with the state's name."""
    d = _in(status)
    for n in (1, 2):
        step = d(ProcessStarted(d.at()))
        assert step.line is not None and step.line.kind is LineKind.RESTART
        assert d.state.status is status and d.state.restarts_here == n
        assert not any(isinstance(c, LaunchWorker) for c in step.commands)
    step = d(ProcessStarted(d.at()))
    assert d.state.status is S.STUCK
    assert step.line is not None and step.line.written["reason"] == "restarts"
    assert step.line.written["state"] == str(status)


def test_restart_in_running_stops_the_worker_and_never_relaunches() -> None:
    """RUNNING on restart: StopWorker, verdict 'no result', RECORDING; the attempt is spent."""
    d = _in(S.RUNNING)
    step = d(ProcessStarted(d.at()))
    assert step.commands[0] == StopWorker("a", 1)
    assert isinstance(step.commands[1], AppendRecord)
    assert step.commands[1].verdict == "no_result"
    assert not any(isinstance(c, LaunchWorker) for c in step.commands)
    assert d.state.status is S.RECORDING and d.state.restarts_here == 0
    d.record()
    d.goal()
    step = d.again("a")
    assert step.commands == (BuildBrief("a", 2, d.state.item("a").last_failure),)  # type: ignore[union-attr]


def test_checking_fails_on_its_second_restart() -> None:
    """CHECKING reruns its checks on restart 1 and records 'check did not complete' on 2."""
    d = _in(S.CHECKING)
    step = d(ProcessStarted(d.at()))
    assert step.commands == (RunChecks("a", 1, ("suite",)),)
    step = d(ProcessStarted(d.at()))
    assert d.state.status is S.RECORDING
    assert step.line is not None and step.line.written["failing_check"] == "check did not complete"


def test_awaiting_human_keeps_waiting_and_a_clean_stop_excuses_one_start() -> None:
    """Asleep at the gate is a clean stop: the next start is not counted, the one after is."""
    d = _in(S.AWAITING_HUMAN)
    fp = d.state.current.proposal_hash  # type: ignore[union-attr]
    step = d(GateSleep(d.at()))
    assert step.line is not None and step.line.kind is LineKind.CLEAN_STOP
    step = d(ProcessStarted(d.at()))
    assert step.line is not None and step.line.kind is LineKind.START
    assert d.state.restarts_here == 0
    assert isinstance(step.commands[0], RequestApproval) and step.commands[0].proposal_hash == fp
    step = d(ProcessStarted(d.at()))
    assert step.line is not None and step.line.kind is LineKind.RESTART
    assert d.state.restarts_here == 1


def test_kill_switch_writes_a_clean_stop_line_in_any_working_state() -> None:
    """KillSwitch keeps the state, marks the line a clean stop and stops a running worker."""
    for status in (S.FINDING, S.ASSIGNING, S.RUNNING, S.CHECKING, S.RECORDING, S.DECIDING):
        d = _in(status)
        step = d(KillSwitch("file STOP", d.at()))
        assert step.state.status is status and step.state.clean_stop
        assert step.line is not None and step.line.kind is LineKind.CLEAN_STOP
        assert step.commands == ((StopWorker("a", 1),) if status is S.RUNNING else ())
    d = Driver()
    step = d(KillSwitch("file STOP", 1))
    assert step.state.status is S.IDLE


def test_a_count_returns_to_zero_when_the_run_leaves_the_state() -> None:
    """Two restarts in FINDING, then progress: the next state starts from zero."""
    d = _in(S.FINDING)
    d(ProcessStarted(d.at()), ProcessStarted(d.at()))
    assert d.state.restarts_here == 2
    d.again("a")
    assert d.state.status is S.ASSIGNING and d.state.restarts_here == 0


def test_resume_in_idle_waits_for_a_trigger() -> None:
    """IDLE has nothing to redo: a start line, no command, no count."""
    d = Driver()
    step = d(ProcessStarted(1))
    assert step.commands == () and d.state.restarts_here == 0
    assert step.line is not None and step.line.kind is LineKind.START


def test_find_items_command_follows_go_again() -> None:
    """Rule 5 asks for the next FindItems; the first trigger does too."""
    d = Driver()
    step = d(TriggerArrived("t", 1))
    assert step.commands == (FindItems(),)


def test_state_round_trips_through_json() -> None:
    """The store keeps states as JSON: every field survives."""
    from statewright.machine.loop.codec import state_from_dict, state_to_dict

    d = _in(S.AWAITING_HUMAN)
    s: LoopState = d.state
    assert state_from_dict(state_to_dict(s)) == s


def test_finding_prefers_the_item_with_fewer_failed_passes_then_plan_order() -> None:
    """The record is the memory: after 'a' fails, the next pass takes 'b' (no failures yet),
    not 'a' again; among equals the earlier item in the plan goes first."""
    d = Driver(replace(CFG, attempts_per_item=3, stuck_after=9))
    d.open("a", "b")
    assert d.state.current is not None and d.state.current.item == "a"
    d.work(FAIL)
    d.record()
    d.goal(FAIL)
    d.again("a", "b")
    assert d.state.current is not None and (d.state.current.item, d.state.current.attempt) == ("b", 1)
    d.work(FAIL)
    d.record()
    d.goal(FAIL)
    d.again("a", "b")
    assert d.state.current is not None and (d.state.current.item, d.state.current.attempt) == ("a", 2)


def _waiting() -> Driver:
    d = _in(S.RUNNING)
    d(PassWaiting("a", 1, "t-1", d.at(), step="approve", role="maintainer"))
    return d


def test_a_pass_whose_task_waits_for_a_person_waits_in_running() -> None:
    """PassWaiting keeps the run in RUNNING on that task (a clean stop, never "no result");
    every start after it waits on the same task (AwaitPass), counted when unclean; over the
    restart limit the run is STUCK and the task is stopped."""
    d = _in(S.RUNNING)
    step = d(PassWaiting("a", 1, "t-1", d.at(), step="approve", role="maintainer"))
    assert step.state.status is S.RUNNING and step.state.clean_stop and step.commands == ()
    assert step.state.current is not None and step.state.current.task_id == "t-1"
    assert step.line is not None and step.line.kind is LineKind.CLEAN_STOP
    assert step.line.written == {"waits_for": "t-1", "step": "approve", "role": "maintainer", "resume_in": "running"}
    step = d(ProcessStarted(d.at()))
    assert step.line is not None and step.line.kind is LineKind.START and d.state.restarts_here == 0
    assert step.commands == (AwaitPass("a", 1, "t-1"),) and d.state.status is S.RUNNING
    for n in range(1, CFG.restart_limit + 1):
        step = d(ProcessStarted(d.at()))
        assert step.line is not None and step.line.kind is LineKind.RESTART and d.state.restarts_here == n
        assert step.commands == (AwaitPass("a", 1, "t-1"),)
    step = d(ProcessStarted(d.at()))
    assert d.state.status is S.STUCK and step.commands == (StopWorker("a", 1),)
    with pytest.raises(IllegalEventError):  # the pass runs as t-1, not as another task
        transition(_waiting().state, PassWaiting("a", 1, "t-2", 1))


@pytest.mark.parametrize("status", ["completed", "completed_early"])
def test_a_completed_pass_task_is_checked_like_a_return(status: str) -> None:
    """The pass's task completed: its cost is spent, its id is the artifact, CHECKING runs."""
    d = _waiting()
    step = d(PassEnded("a", 1, "t-1", status, d.at(), tokens=70, money_usd=0.25))
    assert d.state.status is S.CHECKING and step.commands == (RunChecks("a", 1, ("suite",)), WakeRun("41"))
    cur = d.state.current
    assert cur is not None and cur.artifacts == ("task:t-1",) and (cur.tokens, cur.money_usd) == (70, 0.25)
    assert d.state.clean_stop  # it arrived while the process slept: the next start stays excused
    d(CheckFinished("a", 1, (CheckResult("suite", PASS),), d.at()))
    d.record()
    assert d.state.tokens_spent == 70 and d.state.passes == 1


@pytest.mark.parametrize("status", ["halted", "cancelled"])
def test_a_pass_task_that_did_not_complete_is_no_result(status: str) -> None:
    """A halted or cancelled task is the pass's "no result", naming the task and why."""
    d = _in(S.RUNNING)
    step = d(PassEnded("a", 1, "t-1", status, d.at(), reason="step_failed"))
    assert d.state.status is S.RECORDING and not d.state.clean_stop
    cur = d.state.current
    assert cur is not None and cur.verdict == "no_result" and cur.cause == f"task t-1 ended {status}: step_failed"
    assert isinstance(step.commands[0], AppendRecord) and step.commands[0].verdict == "no_result"


def test_a_pass_task_that_ends_after_the_run_moved_on_is_a_note() -> None:
    """A task's end for a pass the run no longer waits on (another attempt, another state, a
    terminal run) is kept as a note line and changes nothing."""
    running = _waiting()
    for state, event in (
        (running.state, PassEnded("a", 2, "t-9", "completed", 10)),
        (running.state, PassEnded("a", 1, "t-9", "completed", 10)),  # not the task it waits on
        (_in(S.CHECKING).state, PassEnded("a", 1, "t-1", "cancelled", 10)),
        (replace(running.state, status=S.DONE), PassEnded("a", 1, "t-1", "completed", 10)),
    ):
        step = transition(state, event)
        assert step.state == state and step.commands == ()
        assert step.line is not None and step.line.kind is LineKind.NOTE and step.line.next_state is state.status


def test_only_a_run_asleep_on_its_pass_task_is_woken_by_its_end() -> None:
    """The task's end asks a worker to wake the run (WakeRun) only while no process drives
    it: not after a start took the run up again, not after the kill switch stopped it. The
    run stays asleep until the worker's start takes it up; a stop before that keeps it
    stopped (the worker finds it so and leaves it)."""
    asleep = _waiting()
    step = asleep(PassEnded("a", 1, "t-1", "halted", asleep.at()))
    assert step.commands[-1] == WakeRun("41") and asleep.state.current is not None
    assert asleep.state.current.asleep
    stopped_after = transition(asleep.state, KillSwitch("loop stop", asleep.at())).state
    assert stopped_after.current is not None and not stopped_after.current.asleep
    asleep(ProcessStarted(asleep.at()))
    assert asleep.state.current is not None and not asleep.state.current.asleep
    taken_up = _waiting()
    taken_up(ProcessStarted(taken_up.at()))
    step = taken_up(PassEnded("a", 1, "t-1", "completed", taken_up.at()))
    assert step.commands == (RunChecks("a", 1, ("suite",)),)
    stopped = _waiting()
    stopped(KillSwitch("loop stop", stopped.at()))
    step = stopped(PassEnded("a", 1, "t-1", "cancelled", stopped.at()))
    assert not any(isinstance(c, WakeRun) for c in step.commands) and stopped.state.status is S.RECORDING
