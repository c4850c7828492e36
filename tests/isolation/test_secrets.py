"""The secrets campaign: values planted in the worker's environment and as declared secrets,
leaked by steps every way a step can (its environment, stdout, stderr, a verdict, a note, an
artifact, a traceback, an error, a retried error, a check's output, a model's reply), are
found nowhere afterwards: not in the database (every byte of the SQLite files, every row of
the PostgreSQL schema), not in the logs, not in what the CLI prints."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from click.testing import CliRunner

from fakes.openai_server import FakeOpenAIServer, tool_call_reply
from statewright.cli import cli
from statewright.definition import workflow_from_dict
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker
from statewright.store import open_store
from store.backends import fresh_pg_schema, raw_sql
from tally import tally

from .conftest import secret

LEAKY = '''
import os
from statewright._errors import PermanentError, TransientError

def agent(brief, ctx):
    pw = os.environ["PGPASSWORD"]
    return {"verdict": {"approved": True, "summary": pw}, "note": f"used {pw}",
            "artifacts": {"dump": f"PGPASSWORD={pw}"}}

def explode(ctx):
    raise RuntimeError("cannot reach " + os.environ["STATEWRIGHT_DB"])

def refuse(ctx):
    raise PermanentError("refused with token " + os.environ["STATEWRIGHT_TOKEN"])

def throttled(ctx):
    raise TransientError("throttled; key " + os.environ["BILLING_API_KEY"])
'''

# case -> (the planted variable, declared by the step?, the step that leaks it)
CASES = {
    "code step prints its environment": ("DEPLOY_TOKEN", True, "print-env"),
    "failing code step prints a secret last": ("STDERR_TOKEN", True, "fail-loud"),
    "command agent: verdict, note, stderr": ("VERDICT_TOKEN", True, "agent-verdict"),
    "python agent returns PGPASSWORD": ("PGPASSWORD", False, "inproc-agent"),
    "callable traceback shows the DB URL": ("DB_PASSWORD", False, "traceback"),
    "permanent error quotes the worker token": ("STATEWRIGHT_TOKEN", False, "permanent"),
    "retried transient error quotes an API key": ("BILLING_API_KEY", False, "transient"),
    "wait check prints a secret": ("CHECK_SECRET", True, "check"),
    "model echoes its API key": ("LLM_KEY", False, "model"),
}


def _steps(base_url: str) -> list[dict[str, object]]:
    cont = {"on_failure": "continue"}
    verdict = ('printf \'{"approved": true, "summary": "%s"}\' "$VERDICT_TOKEN" > "$STATEWRIGHT_VERDICT"; '
               'echo "note $VERDICT_TOKEN"; echo "err $VERDICT_TOKEN" >&2')
    return [
        {"id": "print-env", "kind": "code", "owner": "t", "run": {"command": ["env"]},
         "secrets": ["DEPLOY_TOKEN"]},
        {"id": "fail-loud", "kind": "code", "owner": "t", "secrets": ["STDERR_TOKEN"], **cont,
         "run": {"command": ["sh", "-c", 'echo "token: $STDERR_TOKEN" >&2; exit 1']}},
        {"id": "agent-verdict", "kind": "ai", "owner": "t", "output_schema": "review",
         "agent": {"type": "command", "command": ["sh", "-c", verdict]}, "secrets": ["VERDICT_TOKEN"]},
        {"id": "inproc-agent", "kind": "ai", "owner": "t", "output_schema": "review",
         "agent": {"type": "python", "callable": "sw_iso_leaky:agent"}},
        {"id": "traceback", "kind": "code", "owner": "t", "run": {"callable": "sw_iso_leaky:explode"}, **cont},
        {"id": "permanent", "kind": "code", "owner": "t", "run": {"callable": "sw_iso_leaky:refuse"}, **cont},
        {"id": "transient", "kind": "code", "owner": "t", "run": {"callable": "sw_iso_leaky:throttled"},
         "retry": {"max_attempts": 2, "initial_backoff": "1s", "jitter": False}, **cont},
        {"id": "check", "kind": "wait", "owner": "t", "every": "1s", "max_checks": 1, **cont,
         "check": {"command": ["sh", "-c", 'echo "$CHECK_SECRET"; exit 1']}, "secrets": ["CHECK_SECRET"]},
        {"id": "model", "kind": "ai", "owner": "t", "output_schema": "review",
         "agent": {"type": "openai", "base_url": base_url, "model": "m", "api_key_env": "LLM_KEY"}},
    ]


def _database_text(store_url: str) -> str:
    """Everything the database holds: the SQLite files byte for byte (deleted rows that
    linger in free pages included), or every row of every table of the PostgreSQL schema."""
    if not store_url.startswith("postgresql"):
        files = [Path(store_url + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
        return "".join(f.read_bytes().decode("latin-1") for f in files if f.exists())
    tables = raw_sql(store_url, "SELECT table_name FROM information_schema.tables "
                                "WHERE table_schema = current_schema()")
    assert tables, "the schema has no tables: the search would prove nothing"
    rows = []
    for (table,) in tables:
        rows += [r[0] for r in raw_sql(store_url, f'SELECT t::text FROM "{table}" t')]
    return "\n".join(rows)


def test_planted_secrets_are_found_nowhere(
    open_engine: Callable[..., Engine], store_url: str, backend: str, worker_lib: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Every case leaks its own planted value; each value is then searched for in the
    database, the logs and the CLI's output: found must be 0 everywhere, and each leak is
    seen redacted where it was stored (so the step really did try)."""
    caplog.set_level(logging.DEBUG, logger="statewright")
    planted = {name: secret(name.lower().replace("_", "-")) for name, _, _ in CASES.values()}
    for name, value in planted.items():
        if name != "DB_PASSWORD":
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("STATEWRIGHT_DB", f"postgresql://sw:{planted['DB_PASSWORD']}@db.invalid/sw")
    (worker_lib / "sw_iso_leaky.py").write_text(LEAKY)
    model_says = tool_call_reply({"approved": True, "summary": planted["LLM_KEY"]},
                                 content=f"my key is {planted['LLM_KEY']}")
    clock = FakeClock()
    engine = open_engine(clock=clock)
    try:
        with FakeOpenAIServer([model_says]) as server:
            tid = engine.submit(workflow_from_dict({"workflow": "leaky", "steps": _steps(server.base_url)}), {})
            for _ in range(10):  # backoffs and wait checks are due on the fake clock
                Worker(engine).run(until_idle=True)
                if engine.state(tid).terminal:
                    break
                clock.advance(5)
            assert server.requests[0].headers["authorization"] == f"Bearer {planted['LLM_KEY']}"
    finally:
        import sys
        sys.modules.pop("sw_iso_leaky", None)
    st = engine.state(tid)
    assert st.terminal, st.status
    logging.getLogger("statewright.worker").warning(
        "a step said %s", " ".join(planted.values()))  # a log line that would carry them all

    shown = CliRunner().invoke(cli, ["show", tid, "--json", "--db", store_url])
    shown_text = CliRunner().invoke(cli, ["show", tid, "--db", store_url])
    assert shown.exit_code == 0 and shown_text.exit_code == 0, shown.output
    places = {
        "db": _database_text(store_url),
        "logs": "\n".join(r.getMessage() for r in caplog.records),
        "output": shown.output + shown_text.output,
    }
    stored = {a.step: repr(a) for a in st.attempts}
    stored["check"] = repr([e.to_dict() for e in engine.events(tid) if e.type == "CheckReported"])
    for case, (name, _declared, step) in CASES.items():
        assert "[redacted]" in stored[step], f"{case}: the leak never happened: {stored[step]}"
        for where, text in places.items():
            found = text.count(planted[name])
            tally("secrets", f"{case} ({backend})", where=where, found=found)
            assert found == 0, f"{case}: {name} found {found}x in {where}"
    assert "[redacted]" in places["logs"]


def test_sqlite_search_sees_what_is_written(tmp_path: Path) -> None:
    """The database search is not blind: a value written into a SQLite file is found."""
    db = tmp_path / "probe.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (v TEXT)")
        conn.execute("INSERT INTO t VALUES ('needle-4f1c')")
    conn.close()
    assert _database_text(str(db)).count("needle-4f1c") == 1


@pytest.mark.postgres
def test_the_password_of_the_store_url_is_known_to_the_worker(tmp_path: Path) -> None:
    """A worker given its database as a URL with a password (``--db``, not the environment)
    redacts that password too."""
    password = secret("dbpw")
    with fresh_pg_schema() as (url, _name):
        parts = urlsplit(url)
        netloc = f"{parts.username}:{password}@{parts.hostname}:{parts.port}"
        with_password = urlunsplit(parts._replace(netloc=netloc))  # trust auth ignores it
        engine = Engine(open_store(with_password), workspace_root=tmp_path)
        try:
            redacted = Worker(engine)._redactor.text(f"connect with {password}")
        finally:
            engine.close()
    tally("secrets", "password of a --db URL (postgres)", where="logs", found=redacted.count(password))
    assert redacted == "connect with [redacted]"
