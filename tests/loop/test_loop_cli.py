"""The 'loop' click group: run, status, show, clear, approve, simulate, and bad input."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from statewright.loop.cli import loop
from store.backends import SQL_BACKENDS

from .helpers import PY, clean_env, launches, token_file, write_loop


@pytest.fixture
def db(sql_db: Path | str) -> Path | str:
    """The loop CLI refuses an in-memory database (it would end with the command): a SQLite
    file, or a PostgreSQL schema."""
    return sql_db


def _no_run_written(db: Path | str) -> bool:
    """Nothing was written: no SQLite file made, or no loop run in the PostgreSQL schema."""
    if isinstance(db, Path):
        return not db.exists()
    from statewright.loop.store import LoopStore

    with LoopStore.open(db) as store:
        return not store.runs()


def _cli(*args: str, db: Path | None = None, env: dict[str, str] | None = None) -> Result:
    full = list(args) + (["--db", str(db)] if db is not None else [])
    return CliRunner().invoke(loop, full, env=env, catch_exceptions=False)


def _one_line_error(result: Result, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_run_show_status(tmp_path: Path, db: Path) -> None:
    """The traced run through the CLI, then its record pass by pass, then the runs list."""
    path = write_loop(tmp_path / "l", [{"id": "88", "fix_on_attempt": 2}])
    result = _cli("run", str(path), db=db)
    assert result.exit_code == 0, result.output
    assert "run 1: done (goal met)" in result.stdout
    shown = _cli("show", "1", db=db)
    assert shown.exit_code == 0
    text = shown.stdout.splitlines()
    assert text[0] == "run 1 of loop nightly: done goal met"
    assert text[1].split() == ["state", "event", "or", "check", "written"]
    assert any("suite: fail (1 failed (test_export_empty))" in x and "verdict fail" in x for x in text)
    assert text[-1].startswith("deciding") and 'done, reason "goal met"' in text[-1]
    data = json.loads(_cli("show", "1", "--json", db=db).stdout)
    assert data["status"] == "done" and len(data["lines"]) == 13
    assert data["lines"][-1]["written"]["oracle_output"][0]["outcome"] == "pass"
    status = json.loads(_cli("status", "--json", db=db).stdout)
    assert [(r["run"], r["status"], r["passes"]) for r in status] == [("1", "done", 2)]


def test_run_exit_status_for_other_terminals(tmp_path: Path, db: Path) -> None:
    """ESCALATED, STUCK and OUT_OF_BUDGET exit 5 (the task table's "halted"); bad input is 1."""
    path = write_loop(tmp_path / "l", [{"id": "7", "fix_on_attempt": None}])
    result = _cli("run", str(path), "--json", db=db)
    assert result.exit_code == 5
    assert json.loads(result.stdout)["status"] == "escalated"


def test_db_from_the_environment(tmp_path: Path) -> None:
    """STATEWRIGHT_DB picks the database when --db is absent."""
    db = tmp_path / "env.db"
    path = write_loop(tmp_path / "l", [{"id": "1"}])
    assert _cli("run", str(path), env={"STATEWRIGHT_DB": str(db)}).exit_code == 0
    assert db.exists()


def test_bad_loop_file_changes_nothing(tmp_path: Path, db: Path) -> None:
    """A bad file: one line on stderr naming file and field, exit 1, no database made."""
    path = write_loop(tmp_path / "l", [{"id": "1"}], budgets={"passes": "many"})
    line = _one_line_error(_cli("run", str(path), db=db))
    assert line.startswith("error: ") and "loop.yaml: budgets.passes: expected a whole number" in line
    assert _no_run_written(db)
    line = _one_line_error(_cli("run", str(tmp_path / "missing.yaml"), db=db))
    assert "cannot read the loop file" in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("show", "99"), "no loop run with id '99'"),
        (("show", "x"), "a run id is a number"),
        (("clear", "1", "--as", "ann", "--reason", "r", "--token-file", "{ann}"), "not stuck"),
        (("clear", "1", "--reason", "r"), "needs your token"),
        (("approve", "1", "--as", "ann", "--role", "m"), "0 pending approvals"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, db: Path, args: tuple[str, ...], says: str) -> None:
    """Unknown runs and impossible actions: one clear line, exit 1."""
    path = write_loop(tmp_path / "l", [{"id": "1"}])
    assert _cli("run", str(path), db=db).exit_code == 0
    ann = token_file(db, "ann", "operator")
    assert says in _one_line_error(_cli(*[a.replace("{ann}", str(ann)) for a in args], db=db))


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("memory:", "an in-memory database ends with the command"),
        ("memory:name", "an in-memory database ends with the command"),
        ("mysql://h/db", "not a database the loop can use; give a file path, sqlite:///PATH or a postgresql:// URL"),
    ],
)
def test_a_db_url_the_loop_cannot_use_is_one_line_and_makes_nothing(
    tmp_path: Path, url: str, says: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A memory database (it would end with the command) or a URL of no backend is refused in
    one line, and no file named after the URL appears."""
    monkeypatch.chdir(tmp_path)
    path = write_loop(tmp_path / "l", [{"id": "1"}])
    line = _one_line_error(_cli("run", str(path), "--db", url))
    assert line.startswith(f"error: --db {url}: {says}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l"]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_loop_run_on_postgresql_and_sqlite_urls(tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch,
                                                 backend: str) -> None:
    """'loop run --db postgresql://...' (or a SQLite URL) keeps the run in that database: show,
    status and verify read it there, and no local folder is named after the URL."""
    from statewright.cli import cli

    monkeypatch.chdir(tmp_path)
    url = f"sqlite://{store_url}" if backend == "sqlite" else store_url
    path = write_loop(tmp_path / "l", [{"id": "88", "fix_on_attempt": 2}])
    result = _cli("run", str(path), "--db", url)
    assert result.exit_code == 0, result.output
    assert "run 1: done (goal met)" in result.stdout
    shown = json.loads(_cli("show", "1", "--json", "--db", url).stdout)
    assert shown["status"] == "done" and len(shown["lines"]) == 13
    status = json.loads(_cli("status", "--json", "--db", url).stdout)
    assert [(r["run"], r["status"]) for r in status] == [("1", "done")]
    verified = CliRunner().invoke(cli, ["verify", "--db", url])
    assert verified.exit_code == 0 and "verified 1 tasks: 0 differ" in verified.stdout, verified.output
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("db")) == ["l"]


def test_read_commands_do_not_create_a_database(tmp_path: Path) -> None:
    """status and show on a missing database say so and create nothing."""
    db = tmp_path / "none.db"
    assert "no loop runs" in _cli("status", db=db).stdout
    assert "no statewright database" in _one_line_error(_cli("show", "1", db=db))
    assert not db.exists()


def test_gate_through_the_cli(tmp_path: Path, db: Path) -> None:
    """run pauses at the gate and prints the proposal_hash; approve with the role; run finishes."""
    path = write_loop(tmp_path / "l", [{"id": "1"}], gate={"role": "maintainer"})
    paused = _cli("run", str(path), db=db)
    assert paused.exit_code == 4  # waits for a person
    assert "paused in awaiting_human (asleep at the gate)" in paused.stdout
    assert "waiting for role maintainer to approve item 1" in paused.stdout
    shown = re.search(r"hash ([0-9a-f]{64})", paused.stdout)
    assert shown is not None, paused.stdout
    fp = ("--hash", shown.group(1))
    eve, ann = token_file(db, "eve", "intern"), token_file(db, "ann", "author")
    wrong = _one_line_error(_cli("approve", "1", "--role", "intern", *fp, "--token-file", str(eve), db=db))
    assert "needs role 'maintainer'" in wrong
    unlisted = _one_line_error(_cli("approve", "1", "--as", "ann", *fp, "--token-file", str(ann), db=db))
    assert "does not hold the role 'maintainer'" in unlisted
    agent = _one_line_error(_cli("approve", "1", "--as", "agent:worker", *fp, "--token-file", str(ann), db=db))
    assert "is not the token's person ('ann')" in agent
    anonymous = _one_line_error(_cli("approve", "1", *fp, db=db))
    assert "needs your token" in anonymous
    ann = token_file(db, "ann", "maintainer")
    blind = _one_line_error(_cli("approve", "1", "--as", "ann", "--token-file", str(ann), db=db))
    assert "approve needs --hash H" in blind
    h = shown.group(1)
    stale = h[:12] + "".join("1" if c == "0" else "0" for c in h[12:])  # the same first 12 digits
    misquoted = _one_line_error(_cli("approve", "1", "--as", "ann", "--hash", stale, "--token-file", str(ann), db=db))
    assert misquoted == (f"error: run 1 has no gate waiting on hash {stale} (it may have been decided); its gate "
                         f"waits on {h}; 'statewright loop status' shows the hash a gate shows")
    ok = _cli("approve", "1", "--as", "ann", *fp, "--token-file", str(ann), db=db)
    assert ok.exit_code == 0 and "approved by ann" in ok.stdout
    assert "run 1: done" in _cli("run", str(path), db=db).stdout


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_an_approval_through_the_cli_wakes_the_run_for_a_worker_process(
    tmp_path: Path, store_url: str, backend: str
) -> None:
    """'loop run' leaves the run asleep at the gate; 'loop approve' says a worker drives it on,
    and a 'statewright worker --until-done' process does, to DONE, with no second 'loop run'."""
    path = write_loop(tmp_path / "l", [{"id": "1"}], gate={"role": "maintainer"})
    paused = _cli("run", str(path), "--db", store_url)
    assert paused.exit_code == 4 and "paused in awaiting_human (asleep at the gate)" in paused.stdout
    shown = re.search(r"hash ([0-9a-f]{64})", paused.stdout)
    assert shown is not None, paused.stdout
    ann = token_file(store_url, "ann", "maintainer")
    ok = _cli("approve", "1", "--as", "ann", "--hash", shown.group(1), "--token-file", str(ann), "--db", store_url)
    assert ok.exit_code == 0, ok.output
    assert ok.stdout == (f"run 1: item 1 approved by ann (hash {shown.group(1)[:12]}); a 'statewright worker'"
                         " drives the run on\n")
    worker = subprocess.run([PY, "-m", "statewright", "worker", "--until-done", "--db", store_url], env=clean_env(),
                            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert worker.returncode == 0, worker.stderr
    assert "loop run 1 woken: done (goal met)" in worker.stderr
    data = json.loads(_cli("show", "1", "--json", "--db", store_url).stdout)
    assert data["status"] == "done"
    events = [(ln["event_type"], ln["kind"]) for ln in data["lines"]]
    decided = events.index(("ApprovalGranted", "move"))
    assert events[decided + 1] == ("ProcessStarted", "start")  # the worker's start, excused as the sleep was
    assert [e for e, _ in events].count("ProcessStarted") == 1 and launches(path.parent) == [("1", 1)]


def test_simulate_prints_the_documents_figures() -> None:
    """Default columns f=0.02 and f=0.5, exact and Monte Carlo."""
    result = _cli("simulate", "--runs", "2000", "--seed", "3")
    assert result.exit_code == 0, result.output
    rows = {line[:34].strip(): line[34:].split() for line in result.stdout.splitlines()[3:]}
    assert rows["wrong share of accepted work"][2] == "18.4%"
    assert rows["passes"][0] == "57.5" and rows["passes"][2] == "48.8"
    assert rows["chance 20 accepted all right"][0] == "83.6%"
    assert rows["chance 20 accepted all right"][2] == "1.7%"
    assert rows["longest even-odds chain"][0] == "77" and rows["longest even-odds chain"][2] == "3"
    assert rows["right share needed over 20"][0] == "96.59%"


def test_simulate_json_and_bad_input() -> None:
    """--json for machines; an impossible probability is one line on stderr."""
    result = _cli(
        "simulate",
        "--items",
        "40",
        "--success",
        "0.7",
        "--false-reject",
        "0.05",
        "--false-pass",
        "0.5",
        "--attempts",
        "3",
        "--runs",
        "500",
        "--seed",
        "1",
        "--json",
    )
    data = json.loads(result.stdout)
    (col,) = data["columns"]
    assert round(col["exact"]["wrong_share"], 3) == 0.184
    assert col["exact"]["even_odds_chain"] == 3
    assert col["monte_carlo"]["expected_passes"] > 0
    line = _one_line_error(_cli("simulate", "--success", "2"))
    assert "--success must be between 0 and 1" in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("clear", "1", "--as", "ann"), "Missing option '--reason'"),
        (("simulate", "--items", "many"), "'many' is not a valid integer"),
        (("frobnicate",), "No such command 'frobnicate'"),
    ],
)
def test_usage_errors_are_one_line(args: tuple[str, ...], says: str) -> None:
    """Missing options, bad values and unknown commands: one line on stderr, exit 2 (usage)."""
    line = _one_line_error(_cli(*args), code=2)
    assert says in line and line.startswith("error: ")


def test_a_parked_item_is_shown_with_its_reason_and_an_operator_unparks_it(tmp_path: Path, db: Path) -> None:
    """'loop show' lists a parked item with why; 'loop unpark' (role operator) reopens it with a
    fresh count of attempts, in an audited line; the next run works it again and closes it."""
    root = tmp_path / "l"
    path = write_loop(root, [{"id": "7", "fix_on_attempt": 3}], attempts_per_item=2)
    assert _cli("run", str(path), db=db).exit_code == 5  # parked after 2 attempts: ESCALATED
    shown = _cli("show", "1", db=db)
    assert any(x.startswith("parked: 7 after 2 attempts: suite fail") for x in shown.stdout.splitlines())
    parked = json.loads(_cli("show", "1", "--json", db=db).stdout)["parked"]
    assert [(p["item"], p["attempts"]) for p in parked] == [("7", 2)]
    eve, ann = token_file(db, "eve", "maintainer"), token_file(db, "ann", "operator")
    refused = _one_line_error(_cli("unpark", "1", "7", "--reason", "r", "--token-file", str(eve), db=db))
    assert "lacks the role 'operator'" in refused
    closed = _one_line_error(_cli("unpark", "1", "8", "--reason", "r", "--token-file", str(ann), db=db))
    assert "item '8' is not parked (not in the ledger)" in closed
    before = _cli("show", "1", "--json", db=db).stdout
    ok = _cli("unpark", "1", "7", "--as", "ann", "--reason", "flaky fixture fixed", "--token-file", str(ann), db=db)
    assert ok.exit_code == 0, ok.output
    again = _one_line_error(_cli("unpark", "1", "7", "--reason", "r", "--token-file", str(ann), db=db))
    assert "is not parked (open)" in again
    after = json.loads(_cli("show", "1", "--json", db=db).stdout)
    assert after["parked"] == [] and after["status"] == json.loads(before)["status"] == "escalated"
    last = after["lines"][-1]
    assert last["kind"] == "operator" and last["written"]["actor"] == "ann"
    assert last["written"]["reason"] == "flaky fixture fixed"
    rerun = _cli("run", str(path), db=db)
    assert rerun.exit_code == 0 and "run 2: done" in rerun.stdout
    assert "brief, 7 in flight, attempt 3" in rerun.stdout  # attempt numbers go on: no pass key repeats


def test_a_run_is_pinned_to_its_loop_file(tmp_path: Path, db: Path) -> None:
    """Resuming a run whose loop file changed is refused in one line saying how to start a new
    run; '--new-run' opens one, carrying the items, and the old run is shown as left unfinished."""
    root = tmp_path / "l"
    path = write_loop(root, [{"id": "1"}], kill_switch={"file": "STOP"})
    (root / "STOP").write_text("", encoding="utf-8")
    assert _cli("run", str(path), db=db).exit_code == 0  # stopped cleanly in IDLE... or later
    (root / "STOP").unlink()
    write_loop(root, [{"id": "1"}], kill_switch={"file": "STOP"}, budgets={"passes": 7})
    line = _one_line_error(_cli("run", str(path), db=db))
    assert "changed since run 1 opened" in line and f"'statewright loop run {path} --new-run'" in line
    assert json.loads(_cli("show", "1", "--json", db=db).stdout)["status"] != "done"
    fresh = _cli("run", str(path), "--new-run", db=db)
    assert fresh.exit_code == 0 and "run 2: done" in fresh.stdout
    status = _cli("status", db=db).stdout
    assert any("left unfinished; run 2 opened after it" in x for x in status.splitlines() if x.strip().startswith("1"))


def test_validate_accepts_loop_files(tmp_path: Path) -> None:
    """'statewright validate' knows a loop file from a workflow: OK with a summary, or the loop
    file's own errors (not the workflow loader's)."""
    from statewright.cli import cli

    examples = Path(__file__).resolve().parents[2] / "examples"
    good = CliRunner().invoke(cli, ["validate", str(examples / "loops" / "fix-backlog" / "loop.yaml"),
                                    str(examples / "fix-bug.yaml")])
    assert good.exit_code == 0, good.output
    assert "loop.yaml: OK  loop fix-backlog: jsonl source -> command worker; checks [item-tests]" in good.stdout
    bad = write_loop(tmp_path / "l", [{"id": "1"}], budgets={"passes": "many"})
    result = CliRunner().invoke(cli, ["validate", str(bad)])
    assert result.exit_code == 1
    assert result.stdout.strip().splitlines() == [f"{bad}: budgets.passes: expected a whole number, got 'many' (str)"]


def test_loop_run_takes_the_item_with_fewer_failed_passes(tmp_path: Path, db: Path) -> None:
    """Through 'loop run': after 'a' fails, the next pass takes 'b', which has not failed,
    rather than 'a' again; then 'a' gets its next attempt."""
    root = tmp_path / "l"
    path = write_loop(root, [{"id": "a", "fix_on_attempt": None}, {"id": "b"}])
    result = _cli("run", str(path), db=db)
    assert "run 1: done" not in result.stdout, result.output  # 'a' is never fixed
    passes = launches(root)
    assert passes[:3] == [("a", 1), ("b", 1), ("a", 2)], passes
    assert ("b", 2) not in passes  # closed after its one pass
