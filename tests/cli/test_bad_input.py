"""Bad input gets exactly one ``error:`` line on stderr, a non-zero exit, no traceback,
and changes nothing in the database (tasks, people, tokens)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tally import tally

from .support import admin, ok, person, refusal, snapshot, sw, sw_process


@dataclass(frozen=True)
class Parked:
    """A database with a duty task awaiting sign-off (bob approved its proposal) and a
    completed build task."""

    db: Path
    files: dict[str, Path]
    waiting: str
    proposal: str
    done: str


@pytest.fixture
def backend() -> str:
    """A SQLite file: these tests read its rows to see that nothing changed, and refusals
    come from real processes too."""
    return "sqlite"


@pytest.fixture
def parked(files: dict[str, Path], db: Path) -> Parked:
    for name, roles in {"bob": ["author", "maintainer"], "carol": ["maintainer"], "erin": ["author"],
                        "ops": ["operator"]}.items():
        person(db, name, *roles)
    waiting = ok(sw("submit", files["duty"], "--db", db)).strip()
    first = json.loads(ok(sw("show", waiting, "--json", "--db", db)))["state"]["current"]["proposal_hash"]
    ok(sw("approve", waiting, "--hash", first, "--token-file", db.parent / "bob.token", "--db", db))
    state = json.loads(ok(sw("show", waiting, "--json", "--db", db)))["state"]
    assert (state["status"], state["current"]["step"]) == ("awaiting_approval", "sign-off")
    out = ok(sw("run", files["build"], "--input", '{"n": 1}', "--db", db))
    done = out.split()[1]
    return Parked(db, files, waiting, state["current"]["proposal_hash"], done)


# (arguments, what the one line must say); {waiting}/{done}/{build}/{dir} are filled in.
CASES: dict[str, tuple[list[str], str]] = {
    "show-unknown-task": (["show", "t-nope"], "no task with id 't-nope'"),
    "approve-unknown-task": (["approve", "t-nope", "--hash", "ab" * 32, "--token-file", "{carol}"],
                             "no task with id 't-nope'"),
    "cancel-unknown-task": (["cancel", "t-nope", "--reason", "x", "--token-file", "{ops}"],
                            "no task with id 't-nope'"),
    "retry-unknown-task": (["retry", "t-nope", "--reason", "x", "--token-file", "{ops}"],
                           "no task with id 't-nope'"),
    "malformed-input-json": (["submit", "{build}", "--input", '{"n": 1'], "--input is not valid JSON"),
    "input-not-an-object": (["submit", "{build}", "--input", "[1, 2]"], "--input must be a JSON object, got list"),
    "input-file-missing": (["submit", "{build}", "--input", "@{dir}/nope.json"], "cannot read the file"),
    "input-fails-schema": (["submit", "{build}", "--input", '{"n": "one"}'],
                           "input does not match build's input_schema: n: 'one' is not of type 'integer'"),
    "input-unknown-field": (["submit", "{build}", "--input", '{"n": 1, "colour": "blue"}'],
                            "input does not match build's input_schema"),
    "workflow-file-missing": (["submit", "{dir}/nope.yaml"], "nope.yaml: file not found"),
    "approver-lacks-role": (["approve", "{waiting}", "--hash", "{proposal}", "--token-file", "{erin}"],
                            "'erin' lacks the role 'maintainer' needed to approve (has: author)"),
    "approver-without-a-token": (["approve", "{waiting}", "--as", "carol", "--hash", "{proposal}"],
                                 "this act needs your token"),
    "approver-is-an-agent": (["approve", "{waiting}", "--as", "agent:reviewer", "--hash", "{proposal}",
                              "--token-file", "{carol}"], "is not the token's person"),
    "approver-acted-in-separate-step": (["approve", "{waiting}", "--hash", "{proposal}", "--token-file", "{bob}"],
                                        "'bob' acted in step 'propose' and may not approve it (separation of duty)"),
    "approval-with-wrong-hash": (["approve", "{waiting}", "--as", "carol", "--hash", "ab" * 32,
                                  "--token-file", "{carol}"], "is not the current proposal"),
    "approval-without-a-hash": (["approve", "{waiting}", "--token-file", "{carol}"], "approve needs --hash HASH"),
    "rejecter-lacks-role": (["reject", "{waiting}", "--reason", "nope", "--token-file", "{erin}"],
                            "lacks the role"),
    "approve-a-finished-task": (["approve", "{done}", "--hash", "ab" * 32, "--token-file", "{carol}"],
                                "completed at"),
    "retry-a-finished-task": (["retry", "{done}", "--reason", "again", "--token-file", "{ops}"],
                              "; a completed task cannot be retried"),
    "unknown-status-filter": (["tasks", "--status", "bogus"], "unknown status 'bogus'"),
    "agent-user-name": (["users", "add", "svc:bot", "--role", "maintainer", "--token-file", "{root}"],
                        "'svc:bot' names an agent or the system"),
    "bad-user-name": (["users", "add", "al ice", "--role", "maintainer", "--token-file", "{root}"],
                      "user name 'al ice' must be"),
}


def fill(args: list[str], parked: Parked) -> list[str]:
    values = {"waiting": parked.waiting, "done": parked.done, "build": str(parked.files["build"]),
              "dir": str(parked.db.parent), "proposal": parked.proposal, "root": str(admin(parked.db)),
              **{name: str(parked.db.parent / f"{name}.token") for name in ("bob", "carol", "erin", "ops")}}
    out = []
    for arg in args:
        for name, value in values.items():
            arg = arg.replace(f"{{{name}}}", value)
        out.append(arg)
    return out


def unchanged(parked: Parked) -> Callable[[], None]:
    """Call the returned function afterwards: it checks that nothing was written."""
    rows = snapshot(parked.db)
    tasks = ok(sw("tasks", "--json", "--db", parked.db))

    def check() -> None:
        assert snapshot(parked.db) == rows
        assert ok(sw("tasks", "--json", "--db", parked.db)) == tasks

    return check


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_error_line_and_changes_nothing(case: str, parked: Parked) -> None:
    """Each bad input: one error line naming the problem; rows (people too) and task list unchanged."""
    args, expected = CASES[case]
    check = unchanged(parked)

    line = refusal(sw(*fill(args, parked), "--db", parked.db))

    assert expected in line
    check()


@pytest.mark.parametrize("case", ["approval-with-wrong-hash", "malformed-input-json"])
def test_a_real_process_refuses_the_same_way(case: str, parked: Parked) -> None:
    """No traceback from the process itself: one stderr line and exit 1."""
    args, expected = CASES[case]
    check = unchanged(parked)

    result = sw_process(*fill(args, parked), "--db", parked.db)

    assert result.returncode == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and expected in line
    check()


@pytest.mark.parametrize("args", [
    ["worker", "--batch", "0", "--until-idle"],
    ["worker", "--lease", "0", "--until-idle"],
    ["show"],
    ["approve", "t-1", "--as"],
    ["no-such-command"],
])
def test_a_usage_mistake_is_one_error_line_too(args: list[str], parked: Parked) -> None:
    """An option out of range, a missing argument, an unknown command: one line, exit 2."""
    check = unchanged(parked)

    result = sw_process(*args, "--db", parked.db)

    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and "--help" in line
    check()


def test_the_right_approver_with_the_right_hash_is_accepted(parked: Parked) -> None:
    """The refusals above are about who and what, not about the task: carol may approve."""
    out = ok(sw("approve", parked.waiting, "--as", "carol", "--hash", parked.proposal,
                "--token-file", parked.db.parent / "carol.token", "--db", parked.db))
    assert out.strip() == f"approved by carol; task {parked.waiting} is completed"


@pytest.fixture
def foreign_db(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.db"
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE parts (sku TEXT PRIMARY KEY, qty INTEGER)")
        conn.execute("INSERT INTO parts VALUES ('bolt', 12)")
        conn.commit()
    finally:
        conn.close()
    return path


@pytest.mark.parametrize(
    "command", [["tasks"], ["show", "t-1"], ["verify"], ["submit", "{build}", "--input", '{"n": 1}']],
)
def test_a_database_of_another_application_is_refused_and_left_as_it_was(
    command: list[str], foreign_db: Path, files: dict[str, Path],
) -> None:
    """Another program's SQLite file is refused byte for byte untouched, with no -wal or -shm left."""
    before = foreign_db.read_bytes()
    siblings = sorted(p.name for p in foreign_db.parent.iterdir())
    args = [str(files["build"]) if a == "{build}" else a for a in command]

    line = refusal(sw(*args, "--db", foreign_db))

    assert f"{foreign_db}: this database has tables but is not a statewright database (found: parts)" in line
    assert foreign_db.read_bytes() == before  # not even switched to WAL
    assert sorted(p.name for p in foreign_db.parent.iterdir()) == siblings


def test_a_file_that_is_not_a_database_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """A text file given as --db is refused and left as it was."""
    junk = tmp_path / "notes.db"
    junk.write_text("shopping list\n", encoding="utf-8")

    line = refusal(sw("tasks", "--db", junk))

    assert f"{junk}: not a statewright database" in line
    assert junk.read_text(encoding="utf-8") == "shopping list\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_a_missing_database_is_refused_and_not_created(tmp_path: Path) -> None:
    """Reading commands do not create a database where there is none."""
    line = refusal(sw("tasks", "--db", tmp_path / "nowhere.db"))
    assert "no statewright database here" in line
    assert list(tmp_path.iterdir()) == []


def _not_a_file(kind: str, where: Path) -> Path:
    """A path that names no regular file: a FIFO, a directory, /dev/zero, or a link to one."""
    if kind.endswith("fifo"):
        target = where / "pipe"
        os.mkfifo(target)
    elif kind.endswith("directory"):
        target = where / "dir"
        target.mkdir()
    else:
        target = Path("/dev/zero")
    if not kind.startswith("link"):
        return target
    link = where / "input.json"
    link.symlink_to(target)
    return link


NOT_A_FILE = {"fifo": "a FIFO", "directory": "a directory", "dev-zero": "a character device",
              "link-to-fifo": "a FIFO", "link-to-directory": "a directory", "link-to-dev-zero": "a character device"}
FIFOS = ("fifo", "link-to-fifo")  # tried in a real process: a regression would block, not fail


@pytest.mark.parametrize("command", ["submit", "run"])
@pytest.mark.parametrize("kind", sorted(set(NOT_A_FILE) - set(FIFOS)))
def test_input_from_a_path_that_is_no_regular_file_is_refused_unread(
    kind: str, command: str, parked: Parked, tmp_path: Path,
) -> None:
    """``--input @PATH`` where PATH is a FIFO nobody writes to, a directory, /dev/zero, or a
    link to one: one error line naming what it is, at once (no blocking open, no endless
    read), and nothing written."""
    path = _not_a_file(kind, tmp_path)
    check = unchanged(parked)

    line = refusal(sw(command, parked.files["build"], "--input", f"@{path}", "--db", parked.db))

    assert line == f"error: --input @{path}: the path names {NOT_A_FILE[kind]}; give a regular file"
    check()
    tally("malformed", f"{command}: --input @{kind}", result="clean_error")


@pytest.mark.parametrize(("kind", "command"), [("fifo", "submit"), ("link-to-fifo", "run")])
def test_a_real_process_given_a_fifo_as_input_does_not_block(
    kind: str, command: str, parked: Parked, tmp_path: Path,
) -> None:
    """A FIFO nobody writes to, or a link to one, in a real process (a blocking open would
    hang it until the timeout): one line, exit 1, nothing written."""
    path = _not_a_file(kind, tmp_path)
    check = unchanged(parked)

    result = sw_process(command, parked.files["build"], "--input", f"@{path}", "--db", parked.db)

    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [f"error: --input @{path}: the path names a FIFO; give a regular file"]
    check()
    tally("malformed", f"process {command}: --input @{kind}", result="clean_error")
