"""Workflows, people and snapshots for the people tests, on either backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from statewright.cli import cli
from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.runtime.engine import Engine
from statewright.runtime.users import Principal
from store.backends import raw_sql

TABLES = ("sw_tasks", "sw_events", "sw_outbox", "sw_timers", "sw_definitions", "sw_users", "sw_tokens",
          "sw_user_log")


def duty() -> Workflow:
    """bob-style authors propose; a maintainer who did not propose signs off."""
    return workflow_from_dict({"workflow": "duty", "steps": [
        {"id": "propose", "kind": "human", "owner": "authors", "approvers": {"role": "author"}},
        {"id": "sign-off", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"},
         "separate_from": ["propose"], "expires_after": "1h"},
    ]}, "<duty>")


def gate(effect: Path) -> Workflow:
    """build, a maintainer's approval, then ship: an effect (a file) only the approval allows."""
    return workflow_from_dict({"workflow": "gate", "steps": [
        {"id": "build", "kind": "code", "owner": "ci", "run": {"command": ["sh", "-c", "echo built"]}},
        {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"}},
        {"id": "ship", "kind": "code", "owner": "ci", "run": {"command": ["sh", "-c", f"echo shipped >> {effect}"]},
         "on_success": "complete"},
    ]}, "<gate>")


def flag(path: Path) -> Workflow:
    return workflow_from_dict({"workflow": "flag", "steps": [
        {"id": "check-flag", "kind": "code", "owner": "ops", "run": {"command": ["test", "-f", str(path)]}},
    ]}, "<flag>")


def hash_of(engine: Engine, task_id: str) -> str:
    cur = engine.state(task_id).current
    assert cur is not None and cur.proposal_hash
    return cur.proposal_hash


def snapshot(url: str) -> dict[str, list[Any]]:
    """Every row statewright keeps, tasks and people alike, read over one connection."""
    if not url.startswith("postgresql://"):
        return {t: sorted(raw_sql(url, f"SELECT * FROM {t}"), key=repr) for t in TABLES}
    import psycopg

    from statewright.store.postgres import split_url

    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES}


def run_cli(*args: str | Path, env: dict[str, str] | None = None, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, input=stdin, catch_exceptions=True)


def one_error_line(result: Result) -> str:
    """The one ``error:`` line of a refused command, after checking it is all there is."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in result.output
    return line


class People:
    """The database's first admin (``root``) and the persons a test adds, each with a token,
    kept as text and, given ``where``, in ``where/NAME.token``."""

    def __init__(self, engine: Engine, where: Path | None = None) -> None:
        self.engine = engine
        self.where = where
        issued = engine.users.bootstrap("root")
        self.admin = engine.users.authenticate(issued.token)
        self.tokens: dict[str, str] = {}
        self._keep("root", issued.token)

    def add(self, name: str, *roles: str) -> Principal:
        """``name`` with ``roles``, authenticated with a token of their own."""
        users = self.engine.users
        users.add(self.admin, name, roles)
        token = users.issue_token(self.admin, name).token
        self._keep(name, token)
        return users.authenticate(token)

    def _keep(self, name: str, token: str) -> None:
        self.tokens[name] = token
        if self.where is not None:
            (self.where / f"{name}.token").write_text(token + "\n", encoding="utf-8")

    def file(self, name: str) -> Path:
        if self.where is None:
            raise ValueError("this People keeps no token files")
        return self.where / f"{name}.token"
