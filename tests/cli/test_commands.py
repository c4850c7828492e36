"""The ``statewright`` commands doing their jobs: validate, submit, run, tasks, show,
approve, reject, retry, cancel, users, worker."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.support import snapshot  # on every backend
from store.backends import SQL_BACKENDS

from .support import admin, ended, home, ok, person, refusal, sw, sw_process, sw_worker

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TASK_ID = re.compile(r"^t-[0-9a-f]{19}$")


def tasks_json(db: Path) -> list[dict[str, object]]:
    return json.loads(ok(sw("tasks", "--json", "--db", db)))


def approve_hint(output: str) -> tuple[str, str]:
    """(task id, proposal hash) from the line ``run`` prints for a parked task."""
    m = re.search(r"approve with: statewright approve (t-[0-9a-f]+) --hash ([0-9a-f]{64})", output)
    assert m is not None, output
    return m.group(1), m.group(2)


def test_validate_prints_ok_per_file(files: dict[str, Path]) -> None:
    """One OK line per good file, with the steps and their routes; exit 0."""
    out = ok(sw("validate", EXAMPLES / "fix-bug.yaml", files["gate"]))
    assert out.splitlines() == [
        f"{EXAMPLES / 'fix-bug.yaml'}: OK  fix-bug v1: implement(ai) -> test(code) [fail: loop_back->implement "
        "(max 3)] -> review(ai) [fail: loop_back->implement (max 3)] -> approve(human) -> wait-ci(wait) -> "
        "merge(code) [ok: complete]",
        f"{files['gate']}: OK  gate v1: build(code) -> approve(human) -> ship(code) [ok: complete]",
    ]


def test_validate_lists_every_problem_of_a_bad_file_and_exits_1(files: dict[str, Path], tmp_path: Path) -> None:
    """Each problem on its own line naming the file and the step; good files still get OK."""
    not_yaml = tmp_path / "not-yaml.yaml"
    not_yaml.write_text("steps: [\n", encoding="utf-8")
    result = sw("validate", files["build"], files["broken"], not_yaml, tmp_path / "missing.yaml")
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    out = result.stdout
    assert "Traceback" not in result.output
    assert f"{files['build']}: OK  build v1" in out
    broken = [ln for ln in out.splitlines() if ln.startswith(str(files["broken"]))]
    assert broken == [
        f"{files['broken']}: step 'deploy': unknown field 'colour' for a code step",
        f"{files['broken']}: step 'test': loop_back target 'deploy' comes after it; loops may only go back",
    ]
    assert any(ln.startswith(f"{not_yaml}: not valid YAML") for ln in out.splitlines())
    assert f"{tmp_path / 'missing.yaml'}: file not found" in out


def test_submit_prints_the_id_and_the_same_key_gives_the_same_task(files: dict[str, Path], db: Path) -> None:
    """submit prints the new task id; the same submission again with the same --key returns
    the first task, and the key with other input is refused in one line, changing nothing."""
    first = ok(sw("submit", files["build"], "--input", '{"n": 1}', "--db", db)).strip()
    keyed = ok(sw("submit", files["build"], "--input", '{"n": 2}', "--key", "order-42", "--db", db)).strip()
    again = ok(sw("submit", files["build"], "--input", '{"n": 2}', "--key", "order-42", "--db", db)).strip()
    before = snapshot(db)
    other = refusal(sw("submit", files["build"], "--input", '{"n": 3}', "--key", "order-42", "--db", db))

    assert TASK_ID.match(first) and TASK_ID.match(keyed)
    assert again == keyed != first
    assert other == (f"error: key 'order-42' already names task {keyed}, submitted with other input; "
                     "a repeat must be the same submission (use a new key for new work)")
    assert snapshot(db) == before
    listed = tasks_json(db)
    assert sorted(t["task_id"] for t in listed) == sorted([first, keyed])
    assert {t["status"] for t in listed} == {"running"} and {t["step"] for t in listed} == {"build"}
    shown = json.loads(ok(sw("show", keyed, "--json", "--db", db)))
    assert shown["state"]["input"] == {"n": 2}


def test_submit_reads_the_input_from_a_file(files: dict[str, Path], db: Path, tmp_path: Path) -> None:
    """--input @file.json reads the task input from the file."""
    data = {"n": 7, "workspace": str(tmp_path / "ws")}
    (tmp_path / "input.json").write_text(json.dumps(data), encoding="utf-8")
    tid = ok(sw("submit", files["build"], "--input", f"@{tmp_path / 'input.json'}", "--db", db)).strip()
    assert json.loads(ok(sw("show", tid, "--json", "--db", db)))["state"]["input"] == data


def test_run_works_the_task_to_the_end_and_prints_its_history(files: dict[str, Path], db: Path) -> None:
    """run submits, works the task to its end in this process, and prints one line per attempt."""
    out = ok(sw("run", files["build"], "--input", '{"n": 1}', "--db", db))
    lines = out.splitlines()
    assert re.match(r"task t-[0-9a-f]{19}  workflow build v1 \([0-9a-f]{12}\)  status completed$", lines[0])
    assert [ln.split()[:2] for ln in lines[1:]] == [["ok", "build"], ["ok", "ship"]]
    [task] = tasks_json(db)
    assert (task["status"], task["step"]) == ("completed", None)


def test_an_approval_from_the_command_line(files: dict[str, Path], db: Path) -> None:
    """users add, run (parks at the human step), show, approve --as --hash with alice's
    token, then a worker process finishes the task."""
    root = admin(db)
    assert ok(sw("users", "add", "alice", "--role", "maintainer", "--token-file", root, "--db", db)).strip() == (
        "alice: maintainer"
    )
    alice = home(db) / "alice.token"
    ok(sw("users", "token", "alice", "--out", alice, "--token-file", root, "--db", db))
    out = ended(sw("run", files["gate"], "--db", db), "awaiting_approval")
    tid, proposal = approve_hint(out)
    assert f"...  approve        waits for approval of proposal {proposal}" in out
    [task] = tasks_json(db)
    assert (task["status"], task["step"]) == ("awaiting_approval", "approve")
    shown = json.loads(ok(sw("show", tid, "--json", "--db", db)))
    assert shown["state"]["current"]["proposal_hash"] == proposal
    assert [e["type"] for e in shown["events"]] == ["TaskSubmitted", "AttemptReported"]

    approved = ok(sw("approve", tid, "--as", "alice", "--hash", proposal, "--comment", "looks right",
                     "--token-file", alice, "--db", db))
    assert approved.strip() == f"approved by alice; task {tid} is running"
    worker = sw_worker("--until-idle", db=db)

    assert worker.returncode == 0, worker.stderr
    # ship (the wait for the approval was announced when it was committed: no command)
    assert worker.stdout.strip() == "worker stopped: 1 commands, 0 timers, 0 retries"
    history = ok(sw("show", tid, "--db", db))
    assert "status completed" in history.splitlines()[0]
    assert f"approved by alice, proposal {proposal[:12]}" in history


def test_a_stale_hash_is_shown_whole_beside_the_current_one(files: dict[str, Path], db: Path) -> None:
    """Two hashes that share their first 12 digits stay told apart: each is shown whole."""
    carol = person(db, "carol", "maintainer")
    tid, proposal = approve_hint(ended(sw("run", files["gate"], "--db", db), "awaiting_approval"))
    stale = proposal[:12] + "".join("0" if c != "0" else "1" for c in proposal[12:])
    line = refusal(sw("approve", tid, "--hash", stale, "--token-file", carol, "--db", db))
    assert line == (f"error: task {tid}, step 'approve': hash {stale} is not the current proposal's, "
                    f"{proposal}; review the current proposal")
    assert tasks_json(db)[0]["status"] == "awaiting_approval"


def test_reject_records_the_reason_code_and_halts(files: dict[str, Path], db: Path) -> None:
    """reject --reason records the reason code with the actor; the default route halts the task."""
    alice = person(db, "alice", "maintainer")
    tid, _ = approve_hint(ended(sw("run", files["gate"], "--db", db), "awaiting_approval"))

    out = ok(sw("reject", tid, "--reason", "insufficient_evidence", "--comment", "no logs",
                "--token-file", alice, "--db", db))

    assert out.strip() == f"rejected by alice; task {tid} is halted"
    history = ok(sw("show", tid, "--db", db))
    assert "halted at approve: insufficient_evidence no logs" in history
    state = json.loads(ok(sw("show", tid, "--json", "--db", db)))["state"]
    assert state["attempts"][-1]["actor"] == "alice"
    assert state["attempts"][-1]["verdict"]["reason_code"] == "insufficient_evidence"


def test_retry_and_cancel_are_audited(files: dict[str, Path], db: Path, tmp_path: Path) -> None:
    """A halted task is retried (its step runs again and passes), another is cancelled;
    both acts are in the history with the operator's name and reason."""
    ws = tmp_path / "ws"
    halted = ended(sw("run", files["flag"], "--input", json.dumps({"workspace": str(ws)}), "--db", db), "halted")
    tid = re.search(r"task (t-[0-9a-f]+)", halted).group(1)  # type: ignore[union-attr]
    assert "status halted" in halted and "exit_status" in halted

    (ws / "fixed").touch()
    ops = person(db, "ops", "operator")
    assert ok(sw("retry", tid, "--as", "ops", "--reason", "created the flag", "--token-file", ops,
                 "--db", db)).strip() == (
        f"retried; task {tid} is running"
    )
    assert sw_worker("--until-idle", db=db).returncode == 0
    history = ok(sw("show", tid, "--db", db))
    assert "status completed" in history
    assert "OPER retry          by ops: created the flag" in history

    other = ok(sw("submit", files["flag"], "--db", db)).strip()
    assert ok(sw("cancel", other, "--as", "ops", "--reason", "not needed", "--token-file", ops,
                 "--db", db)).strip() == (
        f"cancelled; task {other} is cancelled"
    )
    assert "OPER cancel         by ops: not needed" in ok(sw("show", other, "--db", db))
    assert {t["task_id"]: t["status"] for t in tasks_json(db)} == {tid: "completed", other: "cancelled"}
    assert [t["task_id"] for t in json.loads(ok(sw("tasks", "--json", "--status", "cancelled", "--db", db)))] == [
        other
    ]


def test_run_exits_with_a_status_for_each_way_a_task_ends(files: dict[str, Path], db: Path, tmp_path: Path) -> None:
    """CI can tell the outcomes apart: completed 0, completed early 3, waiting for a person 4,
    halted 5 (cancelled 6: the test of a cancel while run waits)."""
    from statewright.cli import RUN_EXIT

    early = tmp_path / "early.yaml"
    early.write_text("workflow: early\nsteps:\n"
                     "  - {id: look, kind: code, owner: t, run: {command: [\"true\"]}, on_success: complete}\n"
                     "  - {id: never, kind: code, owner: t, run: {command: [\"false\"]}}\n", encoding="utf-8")
    assert RUN_EXIT == {"completed": 0, "completed_early": 3, "awaiting_approval": 4, "halted": 5, "cancelled": 6}
    assert sw("run", files["build"], "--input", '{"n": 1}', "--db", db).exit_code == 0
    assert sw("run", early, "--db", db).exit_code == 3
    assert sw("run", files["gate"], "--db", db).exit_code == 4
    ws = tmp_path / "ws"
    assert sw("run", files["flag"], "--input", json.dumps({"workspace": str(ws)}), "--db", db).exit_code == 5


def test_show_gives_an_agent_exceptions_message_not_only_its_traceback(db: Path, tmp_path: Path) -> None:
    """The exception's last line is in the halt line and the history, not in --json only."""
    wf = tmp_path / "boom.yaml"
    wf.write_text("workflow: boom\nsteps:\n  - {id: analyse, kind: ai, owner: risk, "
                  "agent: {type: python, callable: 'results.res_steps:broken_agent'}}\n", encoding="utf-8")
    out = ended(sw("run", wf, "--input", json.dumps({"workspace": str(tmp_path / "ws")}), "--db", db), "halted")
    tid = re.search(r"task (t-[0-9a-f]+)", out).group(1)  # type: ignore[union-attr]
    shown = ok(sw("show", tid, "--db", db)).splitlines()
    assert shown[1].startswith("halted at analyse: exception ValueError: the bank letter has no account number")
    assert re.match(r"  FAIL analyse +ai +#1 +agent:python +exception: ValueError: the bank letter has no account",
                    shown[2]), shown


def test_show_marks_a_redelivered_step_and_a_retried_one(db: Path, tmp_path: Path) -> None:
    """A step started twice (its first worker died) and one that met a transient error do not
    look like one clean attempt in `show`."""
    from statewright.store import open_store

    wf = tmp_path / "tries.yaml"
    wf.write_text("workflow: tries\nsteps:\n"
                  "  - {id: apply, kind: code, owner: ops, run: {command: ['true']}}\n"
                  "  - {id: call, kind: code, owner: ops, run: {callable: 'results.res_steps:flaky_once'},\n"
                  "     retry: {max_attempts: 3, initial_backoff: 200ms, jitter: false}}\n", encoding="utf-8")
    tid = ok(sw("submit", wf, "--input", json.dumps({"workspace": str(tmp_path / "ws")}), "--db", db)).strip()
    store = open_store(str(db))
    try:
        # started, never reported; its lease ends a millisecond later
        [dead] = store.claim("worker-that-died", int(time.time() * 1000), 1, 1)
    finally:
        store.close()
    assert dead.task_id == tid
    worked = sw("worker", "--until-done", "--quiet", "--db", db)
    assert worked.exit_code == 0, worked.output
    shown = ok(sw("show", tid, "--db", db)).splitlines()
    assert "status completed" in shown[0]
    assert re.match(r"  ok +apply .*\(redelivered: started 2 times\)$", shown[1]), shown
    assert re.match(r"  ok +call .*\(1 transient error retried\)$", shown[2]), shown


def test_a_cancelled_task_speaks_the_users_language(files: dict[str, Path], db: Path, tmp_path: Path) -> None:
    """show says who cancelled it and when; a retry is refused with why, in one line."""
    ws = tmp_path / "ws"
    halted = ended(sw("run", files["flag"], "--input", json.dumps({"workspace": str(ws)}), "--db", db), "halted")
    tid = re.search(r"task (t-[0-9a-f]+)", halted).group(1)  # type: ignore[union-attr]
    ops = person(db, "ops", "operator")
    ok(sw("cancel", tid, "--reason", "duplicate of another", "--token-file", ops, "--db", db))
    shown = ok(sw("show", tid, "--db", db)).splitlines()
    assert re.fullmatch(r"cancelled by ops at \d{4}-\d\d-\d\d \d\d:\d\d \S+: duplicate of another", shown[1])
    assert not any(line.startswith("halted at") for line in shown)
    line = refusal(sw("retry", tid, "--reason", "again", "--token-file", ops, "--db", db))
    assert re.search(rf"task {tid} was cancelled by ops at .* \(duplicate of another\); a cancelled task "
                     r"cannot be retried \(submit it again\)", line), line
    again = refusal(sw("cancel", tid, "--reason", "again", "--token-file", ops, "--db", db))
    assert "a cancelled task cannot be cancelled" in again


WAITS = """\
workflow: waits
steps:
  - id: make
    kind: code
    owner: t
    run: {command: [sh, -c, "echo made"]}
  - id: ready
    kind: wait
    owner: t
    check: {command: [sh, -c, "test -f ready || { touch ready; exit 1; }"]}
    every: 1s
    max_checks: 3
"""


def test_run_says_what_a_waiting_task_waits_on(db: Path, tmp_path: Path) -> None:
    """A wait is never silent: the real command prints, on stderr, the step, the check count
    and when the next check is due, and ends 0 once the check passes."""
    wf = tmp_path / "waits.yaml"
    wf.write_text(WAITS, encoding="utf-8")
    ws = tmp_path / "ws"
    ws.mkdir()
    result = sw("run", wf, "--input", json.dumps({"workspace": str(ws)}), "--db", db)
    assert ended(result, "completed").splitlines()[0].endswith("status completed")
    assert re.fullmatch(r"waiting at ready: check 1 of 3 failed, next in [01]s", result.stderr.strip()), result.stderr


@pytest.mark.parametrize("backend", SQL_BACKENDS)  # run is a process of its own; the cancel comes from here
def test_run_exits_6_when_the_task_is_cancelled_while_it_waits(db: Path, tmp_path: Path) -> None:
    """An operator cancels the task a `run` is waiting on: run ends with exit status 6 and
    says who cancelled it."""
    import subprocess
    import sys

    wf = tmp_path / "forever.yaml"
    wf.write_text("workflow: forever\nsteps:\n  - {id: wait-ci, kind: wait, owner: ops, "
                  "check: {command: ['false']}, every: 1s, max_checks: 100}\n", encoding="utf-8")
    ops = person(db, "ops", "operator")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    proc = subprocess.Popen([sys.executable, "-m", "statewright", "run", str(wf), "--input",
                             json.dumps({"workspace": str(tmp_path / "ws")}), "--db", str(db)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # blocks until run says it waits
        assert first.startswith("waiting at wait-ci: check 1 of 100 failed, next in "), first
        [task] = tasks_json(db)
        ok(sw("cancel", task["task_id"], "--reason", "not needed", "--token-file", ops, "--db", db))
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 6, out
    assert out.splitlines()[1].startswith("cancelled by ops at ") and out.splitlines()[1].endswith(": not needed")


def test_the_wait_line_counts_checks_and_the_time_to_the_next(
    open_engine: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a clock that moves only when told: check 2 of 6, next in 4m 58s, printed once per
    check, as `run` prints it."""
    from statewright.cli import _Progress
    from statewright.definition.loader import workflow_from_dict
    from statewright.runtime.clock import FakeClock
    from statewright.runtime.worker import Worker

    clock = FakeClock()
    engine = open_engine(clock=clock)
    wf = workflow_from_dict({"workflow": "ci", "steps": [
        {"id": "wait-ci", "kind": "wait", "owner": "ops", "check": {"command": ["false"]},
         "every": "5m", "max_checks": 6}]}, "<ci>")
    tid = engine.submit(wf, {"workspace": str(tmp_path)})
    progress = _Progress(engine, tid)
    Worker(engine).run(until_idle=True)
    progress.seen()
    clock.advance(300)
    Worker(engine).run(until_idle=True)
    clock.advance(2)
    progress.seen()
    progress.seen()  # nothing changed: nothing printed
    assert capsys.readouterr().err.splitlines() == [
        "waiting at wait-ci: check 1 of 6 failed, next in 5m",
        "waiting at wait-ci: check 2 of 6 failed, next in 4m 58s",
    ]


def test_the_wait_line_names_a_retrys_backoff(open_engine: Callable[..., Any], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A step given back after a transient error waits for its backoff: run says so, with
    the time to the next try, once; nothing more once it runs again."""
    from statewright.cli import _Progress
    from statewright.definition.loader import workflow_from_dict
    from statewright.runtime.clock import FakeClock
    from statewright.runtime.worker import Worker

    clock = FakeClock()
    engine = open_engine(clock=clock)
    wf = workflow_from_dict({"workflow": "call", "steps": [
        {"id": "call-api", "kind": "code", "owner": "ops", "run": {"callable": "results.res_steps:flaky_once"},
         "retry": {"max_attempts": 3, "initial_backoff": "5m", "max_backoff": "5m", "jitter": False}}]},
        "<call>")
    tid = engine.submit(wf, {"workspace": str(tmp_path)})
    progress = _Progress(engine, tid)
    Worker(engine).run(until_idle=True)
    clock.advance(2)
    progress.seen()
    progress.seen()
    clock.advance(300)
    Worker(engine).run(until_idle=True)
    assert progress.seen().status.value == "completed"
    assert capsys.readouterr().err.splitlines() == [
        "waiting at call-api #1: a retry's backoff after 1 transient error, next try in 4m 58s"]


@pytest.mark.parametrize("backend", SQL_BACKENDS)  # real worker processes share the database
def test_a_worker_logs_each_claim_and_outcome_and_until_done_waits_for_timers(db: Path, tmp_path: Path) -> None:
    """--until-idle would leave the task waiting on its 1 s timer; --until-done works it to
    the end. Each claim and each outcome is one log line (task, step, attempt, result,
    duration); --log-format json makes them JSON lines; --quiet leaves only warnings."""
    wf = tmp_path / "waits.yaml"
    wf.write_text(WAITS, encoding="utf-8")
    ws = tmp_path / "ws"
    ws.mkdir()
    tid = ok(sw("submit", wf, "--input", json.dumps({"workspace": str(ws)}), "--db", db)).strip()
    idle = sw_process("worker", "--until-idle", "--db", db)
    assert idle.returncode == 0, idle.stderr
    assert f"task {tid}: make #1 started" in idle.stderr
    assert re.search(rf"task {tid}: make #1 passed in \d+\.\d\d s", idle.stderr)
    assert re.search(rf"task {tid}: ready #1 check failed \(.*\) in", idle.stderr)
    assert tasks_json(db)[0]["status"] == "waiting"
    done = sw_process("worker", "--until-done", "--log-format", "json", "--db", db)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines()]
    ended_lines = [r for r in records if r.get("event") == "ended"]
    assert [(r["task"], r["step"], r["result"]) for r in ended_lines] == [(tid, "ready", "check passed")]
    assert all(isinstance(r["seconds"], float) for r in ended_lines)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d", r["at"]) for r in records)
    assert tasks_json(db)[0]["status"] == "completed"
    quiet = sw_process("worker", "--until-idle", "--quiet", "--db", db)
    assert quiet.returncode == 0 and quiet.stderr == ""
    both = sw_process("worker", "--until-idle", "--until-done", "--db", db)
    assert both.returncode == 1 and both.stderr.strip() == "error: give --until-idle or --until-done, not both"


EDITS_ITSELF = """\
import os


def first(ctx):
    later = os.stat(__file__).st_mtime + 120  # as a deploy that lands while the worker runs
    os.utime(__file__, (later, later))
    return True


def second(ctx):
    return True
"""


@pytest.mark.parametrize("backend", ["sqlite"])  # a real worker process
def test_a_worker_says_where_step_code_came_from_and_warns_when_it_changed(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step module's file and modification time when first loaded; a step that runs after
    the file changed on disk gets a warning (even under --quiet) that the old code runs."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "deploy_steps.py").write_text(EDITS_ITSELF, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(mods), *filter(None, [os.environ.get("PYTHONPATH")])]))
    wf = tmp_path / "deploy.yaml"
    wf.write_text("workflow: deploy\nsteps:\n"
                  "  - {id: first, kind: code, owner: ops, run: {callable: 'deploy_steps:first'}}\n"
                  "  - {id: second, kind: code, owner: ops, run: {callable: 'deploy_steps:second'}}\n",
                  encoding="utf-8")
    ws = tmp_path / "ws"
    ok(sw("submit", wf, "--input", json.dumps({"workspace": str(ws)}), "--db", db))
    done = sw_process("worker", "--until-idle", "--quiet", "--db", db)
    assert done.returncode == 0, done.stderr
    path = mods / "deploy_steps.py"
    date = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+"
    [warning] = done.stderr.splitlines()
    assert re.fullmatch(rf"\S+ \S+ WARNING step code deploy_steps changed on disk \({re.escape(str(path))} modified "
                        rf"{date}\) after this worker loaded it \(modified {date}\); this worker runs the code it "
                        "loaded: restart it to run the new code", warning), warning
    assert tasks_json(db)[0]["status"] == "completed"
    path.write_text(EDITS_ITSELF, encoding="utf-8")
    tid = ok(sw("submit", wf, "--input", json.dumps({"workspace": str(ws)}), "--db", db)).strip()
    again = sw_process("worker", "--until-idle", "--db", db)
    assert re.search(rf"INFO worker \S+ started on {re.escape(str(db))} \(concurrency 1\)", again.stderr), again.stderr
    assert re.search(rf"INFO step code deploy_steps loaded from {re.escape(str(path))} \(modified {date}\)",
                     again.stderr), again.stderr
    assert f"task {tid}: second #1 passed" in again.stderr


def test_the_worker_help_says_until_idle_leaves_a_timer_waiting_and_offers_until_done() -> None:
    """--until-idle's help names the trap (a timer due soon stays waiting); --until-done is the way out."""
    text = " ".join(ok(sw("worker", "--help")).split())
    assert ("--until-idle Exit when nothing is due NOW: a task whose timer is due in two seconds "
            "stays 'waiting'.") in text
    assert "--until-done Work until no task is running or waiting on a timer (waits for due timers)." in text


@pytest.mark.parametrize("command", [["submit", "{build}", "--input", "{{\"n\": 1}}"], ["worker", "--until-idle"],
                                     ["run", "{build}", "--input", "{{\"n\": 1}}"],
                                     ["users", "bootstrap", "ada"]])
def test_an_explicit_db_in_a_missing_directory_is_refused_and_nothing_is_made(
    files: dict[str, Path], tmp_path: Path, command: list[str]
) -> None:
    """A typo in --db never starts a second, empty system: only the default is made."""
    db = tmp_path / "typo" / "state.db"
    args = [a.format(build=files["build"]) for a in command]
    line = refusal(sw(*args, "--db", db))
    assert line == (f"error: --db {db}: the directory {db.parent} does not exist; create it first "
                    "(only the default, .statewright/state.db, is made on first use)")
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("command", [["tasks"], ["show", "t-0"], ["users", "add", "ada", "--role", "ops"],
                                     ["users", "list"], ["verify"]])
def test_a_command_that_reads_refuses_a_missing_database_and_makes_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    """The commands that only read (or need a first admin) never start an empty system."""
    db = tmp_path / "typo" / "state.db"
    line = refusal(sw(*command, "--db", db))
    assert line == f"error: {db}: no statewright database here; submit a task first or pass --db"
    assert not (tmp_path / "typo").exists()


def test_an_unreachable_postgresql_url_is_one_line() -> None:
    """No pool warnings before it: one line naming the server and what to check."""
    result = sw_process("tasks", "--db", "postgresql://nobody@127.0.0.1:1/x")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        result.stderr.strip()
    ] and result.stderr.startswith("error: cannot connect to PostgreSQL at postgresql://nobody@127.0.0.1:1/x: ")


def test_an_unreachable_postgresql_server_is_refused_before_a_pool_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """One probe connection, then the error: the pool, whose retries printed warnings for
    seconds, is never started."""
    import psycopg
    import psycopg_pool

    from statewright._errors import StoreUnavailableError
    from statewright.store import open_store

    tries: list[object] = []
    real_connect = psycopg.connect

    def counted(*args: object, **kwargs: object) -> object:
        tries.append(kwargs.get("connect_timeout"))
        return real_connect(*args, **kwargs)  # type: ignore[arg-type]

    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pool was built for an unreachable server")

    monkeypatch.setattr(psycopg, "connect", counted)
    monkeypatch.setattr(psycopg_pool, "ConnectionPool", no_pool)
    with pytest.raises(StoreUnavailableError) as refused:
        open_store("postgresql://nobody@127.0.0.1:1/x")
    assert tries == [5]  # one connection, bounded by the connect timeout
    assert "\n" not in str(refused.value) and str(refused.value).endswith(
        "check that the server runs and the URL (user, host, port, database) is right")


@pytest.mark.parametrize("command", [["submit", "{build}", "--input", "{{\"n\": 1}}"], ["worker", "--until-idle"],
                                     ["tasks"], ["verify"], ["users", "bootstrap", "ada"]])
def test_memory_is_for_run_only_and_other_commands_refuse_it_in_one_line(
    files: dict[str, Path], command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run --db memory:` works a task to its end in one process, leaving no database; a
    command whose work must outlive its process refuses an in-memory database in one line."""
    monkeypatch.chdir(tmp_path)
    out = ended(sw("run", files["build"], "--input", '{"n": 1}', "--db", "memory:"), "completed")
    assert "status completed" in out.splitlines()[0]
    args = [a.format(build=files["build"]) for a in command]
    for db in ("memory:", "memory:fresh-name"):
        line = refusal(sw(*args, "--db", db))
        assert line == (f"error: --db {db} names an in-memory database, which ends with the process; "
                        f"'statewright {' '.join(command[:2] if command[0] == 'users' else command[:1])}' needs one "
                        "that other processes can open (a SQLite path or a postgresql:// URL); only "
                        "'statewright run' works in memory")
    result = sw_process("run", files["build"], "--input", '{"n": 1}', "--db", "memory:")
    assert result.returncode == 0 and "status completed" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db" or p.name.startswith("memory")) == []
