"""A loop whose passes run as child tasks of the run in the task engine (EnginePassRunner), on
every store backend: the task records the run as its parent, its end is a line of the run's
record written with the task's last event, a pass whose task waits for a person waits (never
"no result"), and a pass the loop stops or gives up cancels its task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from people.support import People
from statewright._errors import ApprovalError, InputError
from statewright.cli import cli as main_cli
from statewright.loop.cli import loop
from statewright.loop.passes import EnginePassRunner, PassResult, PassStatus, pass_key
from statewright.loop.runner import decide_gate
from statewright.loop.sources import WorkItem
from statewright.loop.store import LoopStore
from statewright.loop.wake import handlers, wake_run
from statewright.machine.fanout import LOOP_ACTOR
from statewright.machine.loop.model import LineKind, LoopStatus
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.run import approve_and_run
from statewright.runtime.verify import verify_all
from statewright.runtime.worker import Worker
from store.backends import SQL_BACKENDS

from .helpers import APPROVE, FIX, FakeClock, record, run_loop, write_loop


def workflow(root: Path, name: str, *steps: dict[str, object]) -> Path:
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"workflow": name, "steps": list(steps)}))
    return path


def children(engine: Engine, run_id: str) -> list[str]:
    return [t.task_id for t in engine.store.children(f"loop-run-{run_id}")]


def waiting_loop(root: Path, store_url: str, clock: FakeClock, **fields: object) -> tuple[Path, str, str]:
    """A one-item loop whose pass's task waits for a maintainer's approval before it fixes:
    the loop file, the run and the task."""
    wf = workflow(root, "gated-fix", APPROVE, FIX)
    path = write_loop(root, [{"id": "1"}], workflow=str(wf), **fields)
    out = run_loop(path, store_url, clock)
    assert out.status is LoopStatus.RUNNING and out.waiting_on, out
    return path, out.run_id, out.waiting_on


def test_each_pass_is_a_child_task_and_a_false_done_costs_one_pass(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    """Every pass runs one task that names the run as its parent; the task's end is the run's
    PassEnded line; the worker's false "done" is a FAIL; the loop ends DONE and verifies."""
    wf = workflow(root, "fix-item", FIX)
    path = write_loop(root, [{"id": "1"}, {"id": "2", "hard": True}], workflow=str(wf))
    outcome = run_loop(path, store_url, clock)
    assert outcome.status is LoopStatus.DONE, outcome
    lines = record(store_url, outcome.run_id)
    ended = [ln for ln in lines if ln.event_type == "PassEnded"]
    assert [ln.written["status"] for ln in ended] == ["completed"] * 3
    assert not [ln for ln in lines if ln.event_type in ("WorkerReturned", "WorkerNoResult")]
    tasks = engine.store.list_tasks(workflow="fix-item")
    assert len(tasks) == 3 and {t.status for t in tasks} == {"completed"}
    assert sorted(children(engine, outcome.run_id)) == sorted(t.task_id for t in tasks)
    assert [ln.written["task"] for ln in ended] == children(engine, outcome.run_id)
    for t in tasks:  # each keyed by its pass, the pass's item and attempt in its parent reference
        parent = engine.state(t.task_id).parent
        assert parent is not None and parent.task_id == f"loop-run-{outcome.run_id}"
        assert engine.store.task_by_key(pass_key(WorkItem(parent.step, run_id=outcome.run_id), parent.attempt)) \
            == t.task_id
    notes = [a["note"] for t in tasks for a in t.state["attempts"]]
    assert notes.count("Done. All tests pass.") == 1
    count, findings = verify_all(engine)
    assert findings == [] and count >= 4  # three tasks and the run, hash chains and replays intact


def test_a_pass_that_waits_for_a_person_waits_and_takes_the_tasks_outcome(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    """A pass whose task waits for an approval leaves the run in RUNNING waiting on it (a
    clean stop, never "no result"); a second 'loop run' keeps waiting on the same task; once
    approved, 'loop run' works the task to its end and takes that as the pass's result."""
    path, run_id, task = waiting_loop(root, store_url, clock)
    lines = record(store_url, run_id)
    assert lines[-1].event_type == "PassWaiting" and lines[-1].kind is LineKind.CLEAN_STOP
    assert lines[-1].written["waits_for"] == task and lines[-1].written["role"] == "maintainer"
    assert not [ln for ln in lines if "no_result" in ln.summary]
    assert engine.state(task).status is TaskStatus.AWAITING_APPROVAL
    assert children(engine, run_id) == [task]

    again = run_loop(path, store_url, clock)
    assert (again.status, again.waiting_on) == (LoopStatus.RUNNING, task)
    more = record(store_url, run_id)[len(lines):]
    assert [(ln.event_type, ln.kind) for ln in more] == [("ProcessStarted", LineKind.START),
                                                         ("PassWaiting", LineKind.CLEAN_STOP)]
    assert children(engine, run_id) == [task]  # no new pass, no new task

    eva = People(engine).add("eva", "maintainer")
    cur = engine.state(task).current
    assert cur is not None
    engine.approve(task, eva, proposal_hash=cur.proposal_hash)
    done = run_loop(path, store_url, clock)
    assert done.status is LoopStatus.DONE, done
    lines = record(store_url, run_id)
    ended = [ln for ln in lines if ln.event_type == "PassEnded"]
    assert [(ln.written["task"], ln.written["status"], ln.next_state) for ln in ended] == [
        (task, "completed", LoopStatus.CHECKING)]
    assert children(engine, run_id) == [task] and (root / "fixed-1").exists()
    with LoopStore.open(store_url) as store:
        assert [(p["item"], p["attempt"], p["verdict"]) for p in store.passes(run_id)] == [("1", 1, "pass")]
    assert verify_all(engine)[1] == []


def test_the_tasks_end_moves_the_waiting_run_in_the_same_commit(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    """A task approved and worked elsewhere (not by 'loop run') moves the run on as it ends:
    the run's PassEnded is written with the task's last event; the next 'loop run' carries on
    from CHECKING, its start excused."""
    path, run_id, task = waiting_loop(root, store_url, clock)
    eva = People(engine).add("eva", "maintainer")
    cur = engine.state(task).current
    assert cur is not None
    assert approve_and_run(engine, task, eva, proposal_hash=cur.proposal_hash).status is TaskStatus.COMPLETED
    with LoopStore.open(store_url) as store:
        run = store.run(run_id)
    assert run.status is LoopStatus.CHECKING
    assert store_url and engine.store.events(f"loop-run-{run_id}")[-1].body["task_id"] == task
    done = run_loop(path, store_url, clock)
    assert done.status is LoopStatus.DONE, done
    later = [ln for ln in record(store_url, run_id) if ln.seq > run.lines]
    assert (later[0].event_type, later[0].kind, later[0].state) == ("ProcessStarted", LineKind.START,
                                                                    LoopStatus.CHECKING)


def test_stopping_a_waiting_pass_cancels_its_task(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    """The kill switch stops the pass: its waiting task is cancelled by the loop (in the same
    commit the run records "no result"), and an approval of the orphan is refused, so its
    effect never happens."""
    path, run_id, task = waiting_loop(root, store_url, clock, kill_switch={"file": "STOP"})
    (root / "STOP").write_text("stop")
    stopped = run_loop(path, store_url, clock)
    assert stopped.status is LoopStatus.RUNNING and not stopped.waiting_on
    st = engine.state(task)
    assert st.status is TaskStatus.CANCELLED and st.operator_actions[-1].actor == LOOP_ACTOR
    tail = record(store_url, run_id)[-2:]
    assert [(ln.event_type, ln.next_state) for ln in tail] == [("KillSwitch", LoopStatus.RUNNING),
                                                             ("PassEnded", LoopStatus.RECORDING)]
    assert tail[1].written["verdict"] == "no_result" and task in tail[1].written["cause"]
    eva = People(engine).add("eva", "maintainer")
    with pytest.raises(ApprovalError):
        engine.approve(task, eva, proposal_hash=st.current.proposal_hash if st.current else "0" * 64)
    assert not (root / "fixed-1").exists()
    (root / "STOP").unlink()
    resumed = run_loop(path, store_url, clock)  # carries on from RECORDING: a new pass, a new task
    assert resumed.waiting_on and resumed.waiting_on != task
    assert verify_all(engine)[1] == []


def test_stop_pass_cancels_the_live_task_once(root: Path, store_url: str, engine: Engine, clock: FakeClock) -> None:
    """stop_pass cancels the pass's live task (found by its pass key) and says so; a second
    call finds nothing left to stop; the run keeps the task's end as the pass's "no result"."""
    _path, run_id, task = waiting_loop(root, store_url, clock)
    runner = EnginePassRunner(store_url, root / "gated-fix.yaml")
    item = WorkItem("1", run_id=run_id)
    assert runner.stop_pass(item, 1) is True
    assert runner.stop_pass(item, 1) is False
    assert runner.stop_pass(WorkItem("1", run_id=run_id), 2) is False  # no task for that attempt
    assert engine.state(task).status is TaskStatus.CANCELLED
    with LoopStore.open(store_url) as store:
        run = store.run(run_id)
    assert run.status is LoopStatus.RECORDING and run.state.current is not None
    assert run.state.current.cause.startswith(f"task {task} ended cancelled")
    assert runner.await_pass(item, 1, task).status is PassStatus.RECORDED


def test_a_halted_pass_is_no_result_and_its_task_cannot_be_retried_into_effect(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    """A pass whose task halts is "no result" naming the task and why; the loop cancels the
    halted task at once, so an operator's retry cannot bring it back after the item parks."""
    wf = workflow(root, "always-fails", {"id": "fix", "kind": "code", "owner": "t",
                                         "run": {"command": ["sh", "-c", "exit 3"]}})
    path = write_loop(root, [{"id": "1"}], workflow=str(wf), attempts_per_item=2)
    outcome = run_loop(path, store_url, clock)
    assert outcome.status is LoopStatus.ESCALATED, outcome
    lines = record(store_url, outcome.run_id)
    moved = [ln for ln in lines if ln.event_type == "PassEnded" and ln.kind is LineKind.MOVE]
    assert [(ln.written["verdict"], ln.next_state) for ln in moved] == [("no_result", LoopStatus.RECORDING)] * 2
    notes = [ln for ln in lines if ln.event_type == "PassEnded" and ln.kind is LineKind.NOTE]
    assert [ln.written["status"] for ln in notes] == ["cancelled"] * 2
    tasks = children(engine, outcome.run_id)
    assert [engine.state(t).status for t in tasks] == [TaskStatus.CANCELLED] * 2
    assert all(f"task {t} ended halted" in ln.written["cause"] for t, ln in zip(tasks, moved, strict=True))
    assert verify_all(engine)[1] == []


@pytest.mark.parametrize("backend", SQL_BACKENDS)  # the loop CLI refuses an in-memory database
def test_loop_run_says_which_task_it_waits_for(root: Path, store_url: str, engine: Engine) -> None:
    """'loop run' on a pass whose task waits for a person: one line naming the task, exit 4;
    after the approval, 'loop run' takes the task's outcome and exits 0 on DONE."""
    wf = workflow(root, "gated-fix", APPROVE, FIX)
    path = write_loop(root, [{"id": "1"}], workflow=str(wf))
    cli = CliRunner()
    waiting = cli.invoke(loop, ["run", str(path), "--db", store_url], catch_exceptions=False)
    assert waiting.exit_code == 4, waiting.output
    task = children(engine, "1")[0]
    said = [ln for ln in waiting.stdout.splitlines() if ln.startswith("run 1:")]
    assert said == [f"run 1: waits for task {task}'s approval; once it is decided ('statewright approve {task}"
                    f" --hash HASH'), 'statewright loop run {path}' takes the task's outcome as the pass's result"]
    as_json = cli.invoke(loop, ["run", str(path), "--db", store_url, "--json"], catch_exceptions=False)
    assert as_json.exit_code == 4 and json.loads(as_json.stdout)["waiting_on_task"] == task
    eva = People(engine).add("eva", "maintainer")
    cur = engine.state(task).current
    assert cur is not None
    engine.approve(task, eva, proposal_hash=cur.proposal_hash)
    done = cli.invoke(loop, ["run", str(path), "--db", store_url], catch_exceptions=False)
    assert done.exit_code == 0 and "run 1: done (goal met)" in done.stdout, done.output
    assert children(engine, "1") == [task]


class Crash(BaseException):
    """The process dies mid-pass (nothing below the runner catches it)."""


class DiesMidPass(EnginePassRunner):
    """Submits the pass's task, then the process dies before working it."""

    @staticmethod
    def _work(engine: Engine, item: WorkItem, attempt: int, task_id: str) -> PassResult:
        raise Crash(task_id)


def test_a_restart_that_gives_up_the_pass_cancels_its_task(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    """A process that died mid-pass left the run in RUNNING and the task alive; the restart
    records "no result" and cancels the task (kept as a note line: the run moved on), and the
    next pass is a new task."""
    wf = workflow(root, "gated-fix", APPROVE, FIX)
    path = write_loop(root, [{"id": "1"}], workflow=str(wf))
    with pytest.raises(Crash):
        run_loop(path, store_url, clock, pass_runner=DiesMidPass(store_url, wf))
    [task] = children(engine, "1")
    assert engine.state(task).status is TaskStatus.AWAITING_APPROVAL
    before = len(record(store_url, "1"))
    out = run_loop(path, store_url, clock)
    assert engine.state(task).status is TaskStatus.CANCELLED
    assert out.waiting_on and children(engine, "1") == [task, out.waiting_on]
    lines = record(store_url, "1")[before:]
    assert [(ln.event_type, ln.kind) for ln in lines[:3]] == [
        ("ProcessStarted", LineKind.RESTART), ("PassEnded", LineKind.NOTE), ("RecordAppended", LineKind.MOVE)]
    assert lines[0].written["verdict"] == "no_result" and lines[1].written["status"] == "cancelled"
    assert verify_all(engine)[1] == []


def test_an_approval_wakes_the_sleeping_run_without_loop_run(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    """The run sleeps on its pass's task; once the task is approved, a worker that ends it
    also finds the run's WakeRun (written in the same commit as the task's end) and drives the
    run on to DONE, with no second 'loop run'."""
    _path, run_id, task = waiting_loop(root, store_url, clock)
    eva = People(engine).add("eva", "maintainer")
    cur = engine.state(task).current
    assert cur is not None
    engine.approve(task, eva, proposal_hash=cur.proposal_hash)
    stats = Worker(engine, handlers=handlers(engine.store)).run(until_idle=True)
    assert stats.commands >= 2  # the task's step and the run's wake
    with LoopStore.open(store_url) as store:
        run = store.run(run_id)
    assert run.status is LoopStatus.DONE, run.state.reason
    lines = record(store_url, run_id)
    ended = next(i for i, ln in enumerate(lines) if ln.event_type == "PassEnded")
    assert (lines[ended].next_state, lines[ended + 1].event_type, lines[ended + 1].kind) == (
        LoopStatus.CHECKING, "ProcessStarted", LineKind.START)
    assert [c["type"] for c in lines[ended].commands] == ["RunChecks", "WakeRun"]
    assert children(engine, run_id) == [task] and (root / "fixed-1").exists()
    assert verify_all(engine)[1] == []


def test_a_worker_without_the_loops_handler_leaves_the_wake_to_one_that_has_it(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    """A worker built without the loop's handlers gives a WakeRun back untouched (the task's
    own steps it works as ever); a worker with them wakes the run later."""
    _path, run_id, task = waiting_loop(root, store_url, clock)
    eva = People(engine).add("eva", "maintainer")
    cur = engine.state(task).current
    assert cur is not None
    engine.approve(task, eva, proposal_hash=cur.proposal_hash)
    plain = Worker(engine, lease_seconds=0.05)
    plain.run(until=lambda: engine.state(task).terminal)
    assert engine.state(task).status is TaskStatus.COMPLETED
    with LoopStore.open(store_url) as store:
        assert store.run(run_id).status is LoopStatus.CHECKING
    [row] = [c for c in engine.store.outbox(f"loop-run-{run_id}")]
    assert row["type"] == "WakeRun"
    woken = wake_run(engine.store, run_id, clock=clock)
    assert woken is not None and woken.status is LoopStatus.DONE
    assert wake_run(engine.store, run_id) is None  # an ended run has nothing to wake


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_loop_show_and_status_name_the_task_a_run_sleeps_on(root: Path, store_url: str, clock: FakeClock) -> None:
    """'loop show' says which task the run waits for; 'loop status --json' gives its id."""
    _path, run_id, task = waiting_loop(root, store_url, clock)
    cli = CliRunner()
    shown = cli.invoke(loop, ["show", run_id, "--db", store_url], catch_exceptions=False)
    assert f"waits for task {task}'s approval; its end carries the run on" in shown.stdout.splitlines()
    status = json.loads(cli.invoke(loop, ["status", "--json", "--db", store_url], catch_exceptions=False).stdout)
    assert [(r["run"], r["waiting_on_task"]) for r in status] == [(run_id, task)]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_loop_stop_of_a_sleeping_run_cancels_its_pass_task(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    """'loop stop RUN' of a run that sleeps on its pass's task writes the clean-stop line and
    cancels the task (no approval can bring it into effect); the next 'loop run' records the
    pass as "no result", its start excused, and goes on with a new pass."""
    path, run_id, task = waiting_loop(root, store_url, clock)
    cli = CliRunner()
    stopped = cli.invoke(loop, ["stop", run_id, "--db", store_url], catch_exceptions=False)
    assert stopped.exit_code == 0, stopped.output
    assert stopped.stdout.splitlines() == [f"run {run_id}: stopped; task {task} of its pass is cancelled (the next"
                                           " 'loop run' records the pass as no result)"]
    assert engine.state(task).status is TaskStatus.CANCELLED
    tail = record(store_url, run_id)[-2:]
    assert [(ln.event_type, ln.kind, ln.next_state) for ln in tail] == [
        ("KillSwitch", LineKind.CLEAN_STOP, LoopStatus.RUNNING), ("PassEnded", LineKind.MOVE, LoopStatus.RECORDING)]
    assert not engine.store.outbox(f"loop-run-{run_id}")  # a stopped run is not woken
    again = cli.invoke(loop, ["stop", run_id, "--db", store_url], catch_exceptions=False)
    assert again.exit_code == 1 and f"run {run_id} is not running; nothing to stop" in again.stderr
    before = len(record(store_url, run_id))
    resumed = run_loop(path, store_url, clock)
    assert resumed.waiting_on and resumed.waiting_on != task
    first = record(store_url, run_id)[before]
    assert (first.event_type, first.kind, first.state) == ("ProcessStarted", LineKind.START, LoopStatus.RECORDING)


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_statewright_worker_until_done_wakes_the_run_after_the_approval(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    """'loop run' leaves the run asleep on its pass's task; after the approval, 'statewright
    worker --until-done' works the task and drives the woken run to DONE before it exits."""
    _path, run_id, task = waiting_loop(root, store_url, clock)
    eva = People(engine).add("eva", "maintainer")
    cur = engine.state(task).current
    assert cur is not None
    engine.approve(task, eva, proposal_hash=cur.proposal_hash)
    worked = CliRunner().invoke(main_cli, ["worker", "--until-done", "--quiet", "--db", store_url],
                                catch_exceptions=False)
    assert worked.exit_code == 0, worked.output
    with LoopStore.open(store_url) as store:
        assert store.run(run_id).status is LoopStatus.DONE
    assert not engine.store.outbox(f"loop-run-{run_id}")


def test_who_approved_in_the_pass_may_not_decide_at_the_runs_gate(
    root: Path, store_url: str, engine: Engine, clock: FakeClock
) -> None:
    """Separation of duty across the layers: the person who approved a step of the pass's task
    is an author of the pass's work and is refused at the run's gate (nothing written); another
    maintainer's approval wakes the run asleep at the gate, and a worker drives it to DONE."""
    _path, run_id, task = waiting_loop(root, store_url, clock, gate={"role": "maintainer"})
    people = People(engine)
    eva = people.add("eva", "maintainer")
    cur = engine.state(task).current
    assert cur is not None
    engine.approve(task, eva, proposal_hash=cur.proposal_hash)
    Worker(engine, handlers=handlers(engine.store, clock=clock)).run(until_idle=True)
    with LoopStore.open(store_url) as store:
        run = store.run(run_id)
        assert run.status is LoopStatus.AWAITING_HUMAN and run.state.current is not None
        assert run.state.current.authors == ("eva",)
        (pending,) = store.pending_approvals(run_id)
        before = store.lines(run_id)
        with pytest.raises(InputError, match=f"'eva' acted in task {task}, the pass's work, and may not approve it"
                                             r" at the gate \(separation of duty\)"):
            decide_gate(store, run_id, by=eva, proposal_hash=pending.proposal_hash, approve=True, at_ms=clock())
        assert store.lines(run_id) == before and not engine.store.outbox(f"loop-run-{run_id}")
        ann = people.add("ann", "maintainer")
        decide_gate(store, run_id, by=ann, proposal_hash=pending.proposal_hash, approve=True, at_ms=clock())
    assert Worker(engine, handlers=handlers(engine.store, clock=clock)).run(until_idle=True).commands == 1
    with LoopStore.open(store_url) as store:
        assert store.run(run_id).status is LoopStatus.DONE
