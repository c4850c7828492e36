"""Loop runs as streams of the store on every backend: one append per line, the hash chain and
``verify``, the ledger, clears and gate decisions; and the carry-over of an earlier release's
loop tables (SQLite)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from statewright._errors import InputError, NotAStatewrightDatabaseError, VersionConflictError
from statewright.loop.errors import RunHeldError
from statewright.loop.runner import clear_hold, decide_gate, unpark_item
from statewright.loop.store import LoopStore, line_dict, run_dict
from statewright.machine.loop.codec import event_to_dict, state_to_dict
from statewright.machine.loop.events import (
    ApprovalGranted,
    BriefReady,
    CheckFinished,
    Event,
    GateSleep,
    ItemsFound,
    KillSwitch,
    TriggerArrived,
    WorkerReturned,
)
from statewright.machine.loop.model import (
    CheckOutcome,
    CheckResult,
    ItemLedger,
    ItemStatus,
    LineKind,
    LoopConfig,
    LoopState,
    LoopStatus,
    RecordLine,
)
from statewright.machine.loop.reducer import initial_state, transition
from statewright.machine.seam import StreamKind
from statewright.runtime.engine import Engine
from statewright.runtime.users import Principal
from statewright.runtime.verify import verify_all
from statewright.store import open_store
from store.backends import SQL_BACKENDS

from .helpers import person

CFG = LoopConfig(loop="l", check_names=("c",), oracle_names=("o",), max_passes=3)
S = LoopStatus


def _new(store: LoopStore, config: LoopConfig = CFG) -> str:
    run = store.create_run(
        loop=config.loop,
        definition_path="l.yaml",
        definition_sha256="0" * 64,
        make_state=lambda run_id, ledger: initial_state(run_id, config, ledger),
        assets={},
        at_ms=1,
    )
    return run.run_id


def _step(store: LoopStore, run_id: str, event: Event) -> LoopState:
    run = store.run(run_id)
    step = transition(run.state, event)
    assert step.line is not None
    store.append(run_id, expected_lines=run.lines, line=step.line, state=step.state, event=event,
                 commands=step.commands)
    return step.state


def _force(store: LoopStore, run_id: str, state: LoopState) -> None:
    """Store ``state`` as the run's newest (a line a test makes up; verify would name it)."""
    run = store.run(run_id)
    line = RecordLine(run.state.status, "test", {}, "test", state.status, LineKind.MOVE, "KillSwitch", 9)
    store.append(run_id, expected_lines=run.lines, line=line, state=state, event=KillSwitch("test", 9),
                 commands=())


def test_lines_append_with_state_in_one_step_on_every_backend(store_url: str) -> None:
    """Each append stores the event, its line and the run's state, checking the version; the
    stream is hash-chained and verify replays it; loop runs are not tasks."""
    with LoopStore.open(store_url) as store:
        run_id = _new(store)
        state = store.run(run_id).state
        ev = TriggerArrived("t", 2)
        step = transition(state, ev)
        assert step.line is not None
        store.append(run_id, expected_lines=0, line=step.line, state=step.state, event=ev, commands=step.commands)
        with pytest.raises(VersionConflictError):
            store.append(run_id, expected_lines=0, line=step.line, state=step.state, event=ev, commands=step.commands)
        ev2 = ItemsFound(("a",), 3)
        step2 = transition(step.state, ev2)
        assert step2.line is not None
        store.append(run_id, expected_lines=1, line=step2.line, state=step2.state, event=ev2, commands=step2.commands,
                     extra={"payloads": {"a": {"id": "a", "title": "x"}}})
        run = store.run(run_id)
        assert run.status is S.ASSIGNING and run.lines == 2 and run.version == 3
        assert run.state == step2.state
        assert [x.event_type for x in store.lines(run_id)] == ["TriggerArrived", "ItemsFound"]
        assert store.lines(run_id)[1].commands == [
            {"type": "BuildBrief", "command_id": "", "item": "a", "attempt": 1, "prior_failure": ""}
        ]
        assert store.item_payload(run_id, "a") == {"id": "a", "title": "x"}
        assert store.ledger("l") == (ItemLedger("a"),)
        events = store.events(run_id)
        assert [e.type for e in events] == ["RunOpened", "TriggerArrived", "ItemsFound"]
        assert events[1].prev_hash == events[0].hash and events[2].prev_hash == events[1].hash
        tasks = open_store(store_url)
        try:
            assert tasks.list_tasks() == [] and tasks.counts_by_status() == {}
            engine = Engine(tasks)
            assert verify_all(engine) == (1, [])
        finally:
            tasks.close()


def test_verify_names_a_loop_line_edited_behind_the_stores_back(store_url: str) -> None:
    """A projection written that the log does not replay to is a finding, never a traceback."""
    with LoopStore.open(store_url) as store:
        run_id = _new(store)
        _step(store, run_id, TriggerArrived("t", 2))
        _force(store, run_id, replace(store.run(run_id).state, passes=7))
        tasks = open_store(store_url)
        try:
            n, findings = verify_all(Engine(tasks))
        finally:
            tasks.close()
    assert n == 1
    problems = [f.problem for f in findings]
    assert "event version 3: its record line is not the line the replay writes" in problems
    assert "replayed loop state differs from the stored projection" in problems


def test_clear_only_a_stuck_run_once_with_who_and_why(store_url: str) -> None:
    """A held loop refuses new runs; a clear needs a person and a reason, once, and is a line."""
    with LoopStore.open(store_url) as store:
        run_id = _new(store)
        with pytest.raises(InputError, match="not stuck"):
            clear_hold(store, run_id, actor="ann", reason="r", at_ms=1)
        _force(store, run_id, replace(store.run(run_id).state, status=S.STUCK, reason="restarts"))
        with pytest.raises(RunHeldError, match=f"clear {run_id}"):
            _new(store)
        with pytest.raises(InputError, match="why"):
            clear_hold(store, run_id, actor="ann", reason=" ", at_ms=1)
        clear_hold(store, run_id, actor="ann", reason="fixed the disk", at_ms=2)
        with pytest.raises(InputError, match="already cleared by ann"):
            clear_hold(store, run_id, actor="bob", reason="again", at_ms=3)
        assert store.run(run_id).cleared_by == "ann"
        assert store.lines(run_id)[-1].written == {"cleared_by": "ann", "reason": "fixed the disk"}
        assert _new(store) != run_id


def test_gate_decisions_bind_to_the_hash_and_the_role(store_url: str) -> None:
    """A decision names the hash shown and needs the gate's role; it moves the run once."""
    gated = replace(CFG, gate_role="maintainer")
    with LoopStore.open(store_url) as store:
        run_id = _new(store, gated)
        _step(store, run_id, TriggerArrived("t", 2))
        _step(store, run_id, ItemsFound(("a",), 3))
        _step(store, run_id, BriefReady("a", "brief", 4))
        _step(store, run_id, WorkerReturned("a", 1, 5))
        _step(store, run_id, CheckFinished("a", 1, (CheckResult("c", CheckOutcome.PASS),), 6))
        _step(store, run_id, GateSleep(7))
        (pending,) = store.pending_approvals(run_id)
        assert pending.role == "maintainer" and pending.item_id == "a"

        ann, ian = person(store.store, "ann", "maintainer"), person(store.store, "ian", "intern")

        def decide(h: str, by: Principal) -> None:
            decide_gate(store, run_id, by=by, proposal_hash=h, approve=True, at_ms=8)

        with pytest.raises(InputError, match="binds to what was shown"):
            decide("e" * 64, ann)
        with pytest.raises(InputError, match="does not hold the role 'maintainer'"):
            decide(pending.proposal_hash, ian)
        decide(pending.proposal_hash, ann)
        run = store.run(run_id)
        assert run.status is S.RECORDING and run.state.clean_stop  # asleep at the gate: the next start is excused
        assert store.pending_approvals() == []
        with pytest.raises(InputError, match="ApprovalGranted is not legal in recording"):
            decide(pending.proposal_hash, ann)


def test_the_ledger_carries_into_the_next_run_and_unpark_reopens(store_url: str) -> None:
    """A new run starts from the items' standing of the loop's newest run; unpark reopens one."""
    with LoopStore.open(store_url) as store:
        first = _new(store)
        parked = ItemLedger("a", ItemStatus.PARKED, 3, "suite fail")
        _force(store, first, replace(store.run(first).state, status=S.ESCALATED, items=(parked,)))
        second = _new(store)
        assert store.run(second).state.items == (parked,)
        with pytest.raises(InputError, match="not the newest run"):
            unpark_item(store, first, "a", actor="ann", reason="fixed", at_ms=5)
        unpark_item(store, second, "a", actor="ann", reason="fixed", at_ms=5)
        assert store.ledger("l") == (replace(parked, status=ItemStatus.OPEN, reopened_after=3),)


def test_not_a_database(tmp_path: Path) -> None:
    """A file that is not SQLite is refused with a message naming it."""
    bad = tmp_path / "x.db"
    bad.write_bytes(b"this is not sqlite at all, not even close" * 100)
    with pytest.raises(NotAStatewrightDatabaseError, match="not a statewright database"):
        LoopStore.open(bad)


def test_a_foreign_database_is_left_alone(tmp_path: Path) -> None:
    """A SQLite file with someone else's tables is refused and not written to."""
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(NotAStatewrightDatabaseError, match="found: customers"):
        LoopStore.open(path)
    conn = sqlite3.connect(path)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert names == {"customers"}


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_loop_runs_and_tasks_share_the_tables(store_url: str) -> None:
    """Loop runs are rows of sw_tasks of kind loop_run, beside the tasks."""
    with LoopStore.open(store_url) as store:
        run_id = _new(store)
        kind = store.store.load(f"loop-run-{run_id}")
        assert kind is not None and kind.kind == "loop_run" and kind.workflow == "l"


# The loop tables of the release before loop runs became streams (loop/_schema.py then).
OLD_SCHEMA = """
CREATE TABLE loop_runs (run_id INTEGER PRIMARY KEY AUTOINCREMENT, loop TEXT NOT NULL, status TEXT NOT NULL,
    definition_path TEXT NOT NULL, definition_sha256 TEXT NOT NULL, opened_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL, lines INTEGER NOT NULL DEFAULT 0, state_json TEXT NOT NULL,
    assets_json TEXT NOT NULL DEFAULT '{}', stop_requested TEXT, owner_pid INTEGER, cleared_by TEXT,
    cleared_reason TEXT, cleared_at_ms INTEGER);
CREATE TABLE loop_lines (run_id INTEGER NOT NULL, seq INTEGER NOT NULL, state TEXT NOT NULL,
    next_state TEXT NOT NULL, kind TEXT NOT NULL, event_type TEXT NOT NULL, event TEXT NOT NULL,
    summary TEXT NOT NULL, written_json TEXT NOT NULL, event_json TEXT NOT NULL, commands_json TEXT NOT NULL,
    at_ms INTEGER NOT NULL, PRIMARY KEY (run_id, seq));
CREATE TABLE loop_items (loop TEXT NOT NULL, item_id TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'open',
    attempts INTEGER NOT NULL DEFAULT 0, last_failure TEXT NOT NULL DEFAULT '', payload_json TEXT NOT NULL
    DEFAULT '{}', updated_at_ms INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (loop, item_id));
CREATE TABLE loop_passes (run_id INTEGER NOT NULL, record_no INTEGER NOT NULL, item_id TEXT NOT NULL,
    attempt INTEGER NOT NULL, verdict TEXT NOT NULL, record_json TEXT NOT NULL, at_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, record_no));
CREATE TABLE loop_approvals (run_id INTEGER NOT NULL, fingerprint TEXT NOT NULL, item_id TEXT NOT NULL,
    attempt INTEGER NOT NULL, role TEXT NOT NULL, shown_json TEXT NOT NULL, requested_at_ms INTEGER NOT NULL,
    timeout_at_ms INTEGER, decision TEXT, who TEXT, reason TEXT, decided_at_ms INTEGER,
    PRIMARY KEY (run_id, fingerprint));
"""


def _old(value: object) -> object:
    """Today's JSON in the earlier release's words (fingerprint, who)."""
    if isinstance(value, dict):
        names = {"proposal_hash": "fingerprint", "actor": "who"}
        return {names.get(k, k): _old(v) for k, v in value.items() if k not in ("event_id", "command_id", "roles",
                                                                                "cleared_by", "cleared_reason",
                                                                                "reopened_after")}
    if isinstance(value, list):
        return [_old(v) for v in value]
    return value


def _old_casing(state: object) -> object:
    """A run's state as the earlier release stored it: its status in upper case (IDLE)."""
    assert isinstance(state, dict)
    return {**state, "status": LoopStatus(state["status"]).name}


OLD_EVENTS: list[Event] = [
    TriggerArrived("t", 2), ItemsFound(("a",), 3), BriefReady("a", "brief", 4), WorkerReturned("a", 1, 5),
    CheckFinished("a", 1, (CheckResult("c", CheckOutcome.PASS),), 6), GateSleep(7),
]


def _old_database(path: Path, config: LoopConfig, *, approved_by: str = "") -> LoopState:
    """An earlier release's SQLite file holding one run asleep at its gate after OLD_EVENTS, in
    that release's words and casing (a decision it had not taken up yet, by ``approved_by``);
    the run's state, as today's reducer has it."""
    state = initial_state("1", config)
    conn = sqlite3.connect(path)
    conn.executescript(OLD_SCHEMA)
    for seq, event in enumerate(OLD_EVENTS, start=1):
        step = transition(state, event)
        assert step.line is not None
        conn.execute("INSERT INTO loop_lines VALUES (1, ?, ?, ?, ?, ?, ?, ?, '{}', ?, '[]', ?)",
                     (seq, step.line.state.name, step.line.next_state.name, str(step.line.kind), event.type,
                      step.line.event, step.line.summary, json.dumps(_old(event_to_dict(event))), event.at_ms))
        state = step.state
    assert state.current is not None
    old_state = json.dumps(_old_casing(_old(state_to_dict(state))))
    assert '"status": "AWAITING_HUMAN"' in old_state
    conn.execute("INSERT INTO loop_runs (run_id, loop, status, definition_path, definition_sha256, opened_at_ms,"
                 " updated_at_ms, lines, state_json) VALUES (1, 'l', ?, 'l.yaml', ?, 1, 7, 6, ?)",
                 (state.status.name, "0" * 64, old_state))
    conn.execute("INSERT INTO loop_items (loop, item_id, payload_json) VALUES ('l', 'a', '{\"id\": \"a\"}')")
    if approved_by:
        conn.execute("INSERT INTO loop_approvals VALUES (1, ?, 'a', 1, 'maintainer', '{}', 6, NULL, 'approved', ?,"
                     " '', 8)", (state.current.proposal_hash, approved_by))
    conn.commit()
    conn.close()
    return state


def _upgrade_twice_and_verify(path: Path) -> None:
    """'db upgrade' carries the run over once (a second time adds nothing); 'verify' passes."""
    from click.testing import CliRunner

    from statewright.cli import cli

    upgraded = CliRunner().invoke(cli, ["db", "upgrade", "--db", str(path)])
    assert upgraded.exit_code == 0, upgraded.output
    assert "1 loop runs carried over" in upgraded.stdout
    again = CliRunner().invoke(cli, ["db", "upgrade", "--db", str(path)])
    assert again.exit_code == 0 and "carried over" not in again.stdout
    verified = CliRunner().invoke(cli, ["verify", "--db", str(path)])
    assert verified.exit_code == 0, verified.output


def test_db_upgrade_carries_an_earlier_releases_loop_tables_over(tmp_path: Path) -> None:
    """An old SQLite file's loop runs become streams that replay to their stored state (a
    decision the run had not taken up included); 'verify' passes; carrying again adds nothing."""
    path = tmp_path / "old.db"
    _old_database(path, replace(CFG, gate_role="maintainer"), approved_by="ann")
    _upgrade_twice_and_verify(path)
    with LoopStore.open(path) as store:
        (run,) = store.runs()
        assert run.run_id == "1" and run.status is S.RECORDING and run.state.clean_stop
        lines = store.lines("1")
        assert [x.event_type for x in lines] == [e.type for e in OLD_EVENTS] + [ApprovalGranted.type]
        assert store.item_payload("1", "a") == {"id": "a"}


OLD_CASING_RUNS = Path(__file__).with_name("old_casing_runs.json")


def _store_old_casing_runs(store_url: str) -> dict[str, list[dict[str, object]]]:
    """Store, as they were stored, the streams of two runs an earlier statewright recorded in
    upper case (DONE, STUCK, verdict PASS, "no result"): restarts, a clean stop, a failed and a
    gated pass, then DONE; and a run STUCK on restarts. Each append writes the run's final
    projection (only the last one stays). Returns each run's event bodies by run id."""
    runs = json.loads(OLD_CASING_RUNS.read_text(encoding="utf-8"))
    tasks = open_store(store_url)
    stored = {}
    try:
        for run in runs.values():
            run_id = run["events"][0]["state"]["run_id"]
            for version, body in enumerate(run["events"]):
                tasks.append(f"loop-run-{run_id}", version, body, run["projection"], (), workflow="l",
                             workflow_hash="0" * 64, kind=str(StreamKind.LOOP_RUN))
            stored[run_id] = run["events"]
    finally:
        tasks.close()
    return stored


def test_runs_stored_in_the_old_casing_load_show_and_verify(store_url: str) -> None:
    """Runs recorded with upper-case statuses and the old verdict words read back in today's
    lower-case ones (status, lines, pass records), still hold their loop when STUCK, take a new
    line, and verify clean with their stored events untouched."""
    stored = _store_old_casing_runs(store_url)
    assert '"DONE"' in json.dumps(stored["1"]) and '"no result"' in json.dumps(stored["1"])
    with LoopStore.open(store_url) as store:
        done, stuck = store.run("1"), store.run("2")
        assert (done.status, stuck.status) == (S.DONE, S.STUCK)
        assert run_dict(done, running=False)["status"] == "done"
        lines = [line_dict(x) for x in store.lines("1")]
        assert (lines[0]["state"], lines[0]["next_state"]) == ("idle", "finding")
        assert lines[-1]["summary"] == 'done, reason "goal met"' and lines[-1]["next_state"] == "done"
        assert [lines[i]["summary"] for i in (1, 2, 19, 20)] == [
            "run finding again", "clean stop; resume in finding",
            "clean stop; resume in awaiting_human", "run awaiting_human again"]
        assert lines[2]["written"]["resume_in"] == "finding"
        assert any(x["summary"].startswith("verdict no_result: the process restarted while running") for x in lines)
        assert any(x["summary"] == "verdict fail, the check output whole" for x in lines)
        assert [p["verdict"] for p in store.passes("1")] == ["no_result", "fail", "pass", "pass"]
        assert store.lines("2")[-1].summary == 'stuck, reason "restarts", finding'
        assert store.lines("2")[-1].written["state"] == "finding"
        with pytest.raises(RunHeldError, match="ended stuck"):
            _new(store)
        clear_hold(store, "2", actor="ann", reason="fixed the disk", at_ms=99)
        assert store.run("2").cleared_by == "ann"
    tasks = open_store(store_url)
    try:
        assert verify_all(Engine(tasks)) == (2, [])
        assert [row.body for row in tasks.events("loop-run-1")] == stored["1"]
        assert [row.body for row in tasks.events("loop-run-2")][:-1] == stored["2"]
    finally:
        tasks.close()


def test_wal_mode(tmp_path: Path) -> None:
    """A SQLite file is in WAL mode."""
    db = tmp_path / "state.db"
    LoopStore.open(db).close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_a_carried_run_asleep_at_a_timed_gate_is_woken_when_the_gate_times_out(tmp_path: Path) -> None:
    """A carried run that sleeps at a gate with a time limit gets the wake its sleep asked for: a
    WakeRun in the outbox, due when the limit passes (else nothing would ever time the gate out)."""
    path = tmp_path / "old.db"
    _old_database(path, replace(CFG, gate_role="maintainer", gate_timeout_ms=3_600_000))
    _upgrade_twice_and_verify(path)
    with LoopStore.open(path) as store:
        (run,) = store.runs()
        assert run.status is S.AWAITING_HUMAN and [x.event_type for x in store.lines("1")] == [
            e.type for e in OLD_EVENTS]
        [wake] = store.store.outbox("loop-run-1")
        assert wake["type"] == "WakeRun" and wake["available_at_ms"] == 6 + 3_600_000
