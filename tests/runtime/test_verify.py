"""``statewright verify`` replays every log and checks every hash chain: a clean database
passes; any row edited behind statewright's back fails it, naming the task, and never
with a traceback."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from statewright.runtime.engine import Engine

from .support import code, drain, invoke, sql, statewright, workflow

WF = workflow("pair", code("a", "record"), code("b", "record"))
# Rows edited behind statewright's back in a SQLite file, and `statewright verify` as a real
# process; tests/store/test_tamper.py edits them on every SQL backend.
pytestmark = pytest.mark.parametrize("backend", ["sqlite"])


@pytest.fixture
def tasks(open_engine: Callable[..., Engine], workspace: Path) -> tuple[str, str]:
    """Two completed tasks; the database is closed again before the test edits it."""
    engine = open_engine()
    ids = (engine.submit(WF, {"workspace": str(workspace)}), engine.submit(WF, {"workspace": str(workspace)}))
    drain(engine)
    engine.close()
    return ids


def assert_flags_only(db: Path, bad: str, good: str, problem: str) -> None:
    result = invoke("verify", "--db", str(db))
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert f"{bad}: {problem}" in result.stdout
    assert good not in result.stdout
    assert "verified 2 tasks: 1 differ" in result.stdout


def test_a_clean_database_verifies(db: Path, tasks: tuple[str, str]) -> None:
    """Exit 0 from a real process; --json says the same."""
    result = statewright("verify", "--db", str(db))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "verified 2 tasks: 0 differ"
    as_json = invoke("verify", "--db", str(db), "--json")
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout) == {"tasks": 2, "problems": [], "people": {"changes": 0, "problems": []}}


def test_an_edited_event_body_fails_verify_naming_the_task(db: Path, tasks: tuple[str, str]) -> None:
    """A real process exits 1; the hash chain names the edited event."""
    bad, good = tasks
    sql(db, "UPDATE sw_events SET body = replace(body, 'code:a', 'code:forged') WHERE task_id = ? AND version = 2",
        (bad,))
    result = statewright("verify", "--db", str(db))
    assert result.returncode == 1
    assert f"{bad}: hash chain broken at event version 2" in result.stdout
    assert good not in result.stdout and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("body", "problem"),
    [("not json", "event version 2: the body is not JSON"),
     ('{"type": "AttemptReported"}', "event version 2: column event_id is ")],
    ids=["not-json", "wrong-shape"],
)
def test_an_unreadable_event_body_is_a_finding_not_a_crash(
    db: Path, tasks: tuple[str, str], body: str, problem: str,
) -> None:
    """An event body that no longer parses as an event is reported, not raised."""
    bad, good = tasks
    sql(db, "UPDATE sw_events SET body = ? WHERE task_id = ? AND version = 2", (body, bad))
    assert_flags_only(db, bad, good, problem)


def test_an_edited_projection_fails_verify(db: Path, tasks: tuple[str, str]) -> None:
    """A projection edited to say halted no longer matches the replayed log."""
    bad, good = tasks
    sql(db, "UPDATE sw_tasks SET state = replace(state, '\"completed\"', '\"halted\"') WHERE task_id = ?", (bad,))
    assert_flags_only(db, bad, good, "replayed state differs from the stored projection")


def test_an_edited_status_column_fails_verify(db: Path, tasks: tuple[str, str]) -> None:
    """The status column is what ``tasks --status`` lists by; it is part of the projection."""
    bad, good = tasks
    sql(db, "UPDATE sw_tasks SET status = 'halted' WHERE task_id = ?", (bad,))
    assert_flags_only(db, bad, good, "stored status 'halted', replayed 'completed'")


def test_an_unreadable_projection_is_a_finding_not_a_crash(db: Path, tasks: tuple[str, str]) -> None:
    """A projection that is not JSON any more is reported, not raised."""
    bad, good = tasks
    sql(db, "UPDATE sw_tasks SET state = 'garbage' WHERE task_id = ?", (bad,))
    assert_flags_only(db, bad, good, "the stored projection is not readable")


def test_a_deleted_last_event_fails_verify(db: Path, tasks: tuple[str, str]) -> None:
    """Dropping the newest event leaves a task row whose last hash names no event, and a
    projection the log no longer explains."""
    bad, good = tasks
    sql(db, "DELETE FROM sw_events WHERE task_id = ? AND version = 3", (bad,))
    assert_flags_only(db, bad, good, "the task row's last hash is not the link of its last event (version 2)")
    assert_flags_only(db, bad, good, "replayed state differs from the stored projection")


def test_an_edited_definition_fails_verify(db: Path, tasks: tuple[str, str]) -> None:
    """Both tasks run the edited definition, so both are named."""
    sql(db, "UPDATE sw_definitions SET body = replace(body, '\"tests\"', '\"someone-else\"')")
    result = invoke("verify", "--db", str(db))
    assert result.exit_code == 1
    for tid in tasks:
        assert f"{tid}: stored definition " in result.stdout
    assert "verified 2 tasks: 2 differ" in result.stdout
