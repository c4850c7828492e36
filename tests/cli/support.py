"""Running ``statewright`` in this process (click's CliRunner) or as a real process, and
checking what a refusal must look like."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from statewright.cli import cli


def sw(*args: str | Path) -> Result:
    """``statewright ARGS`` in this process; stdout and stderr kept apart."""
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)


def sw_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``statewright ARGS`` as a real process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    return subprocess.run(
        [sys.executable, "-m", "statewright", *(str(a) for a in args)], env=env,
        capture_output=True, text=True, timeout=60,
    )


def ok(result: Result) -> str:
    assert result.exit_code == 0, f"exit {result.exit_code}: {result.output}\n{result.exception!r}"
    return result.stdout


def ended(result: Result, status: str) -> str:
    """The output of a ``run`` whose task ended as ``status`` (its exit status says so)."""
    from statewright.cli import RUN_EXIT

    assert result.exit_code == RUN_EXIT[status], f"exit {result.exit_code}: {result.output}\n{result.exception!r}"
    return result.stdout


def refusal(result: Result) -> str:
    """The one ``error:`` line of a refused command, after checking it is all there is."""
    assert result.exit_code != 0, result.output
    # An exception that escaped the command is what a real process prints as a traceback.
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ")
    return line


def snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row statewright keeps."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("sw_tasks", "sw_events", "sw_outbox", "sw_timers", "sw_definitions",
                          "sw_users", "sw_tokens", "sw_user_log")
        }
    finally:
        conn.close()


def event_count(db: Path) -> int:
    return len(snapshot(db)["sw_events"])


# The directory a test keeps its files in beside a database named by a URL (the ``db``
# fixture registers it); a SQLite file's is its own directory.
HOMES: dict[str, Path] = {}


def home(db: Path | str) -> Path:
    """Where the test keeps files beside ``db`` (token files)."""
    return HOMES[db] if isinstance(db, str) else db.parent


def sw_worker(*args: str | Path, db: Path | str) -> subprocess.CompletedProcess[str]:
    """``statewright worker ARGS --db DB`` in a process of its own; an in-memory database
    lives only in this process, so there the worker runs here, its result in the same shape."""
    if isinstance(db, str) and db.startswith("memory:"):
        result = sw("worker", *args, "--db", db)
        return subprocess.CompletedProcess(["worker", *args], result.exit_code, result.stdout, result.stderr)
    return sw_process("worker", *args, "--db", db)


def admin(db: Path | str) -> Path:
    """The token file of the database's first admin, ``root`` (bootstrapped on first use)."""
    path = home(db) / "root.token"
    if not path.exists():
        ok(sw("users", "bootstrap", "root", "--out", path, "--db", db))
    return path


def person(db: Path | str, name: str, *roles: str) -> Path:
    """The token file of ``name``, whom the admin adds with ``roles``."""
    root = admin(db)
    ok(sw("users", "add", name, *[a for r in roles for a in ("--role", r)], "--token-file", root, "--db", db))
    path = home(db) / f"{name}.token"
    ok(sw("users", "token", name, "--out", path, "--token-file", root, "--db", db))
    return path
