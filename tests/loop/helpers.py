"""Shared helpers for the loop tests: a fake clock, loop-file builders, runners."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from statewright.loop.definition import load_loop
from statewright.loop.runner import CRASH_ENV, LoopRunner, RunOutcome
from statewright.loop.store import LoopStore, StoredLine

if TYPE_CHECKING:
    from statewright.runtime.users import Principal
    from statewright.store.base import Store

SCRIPTS = Path(__file__).parent / "scripts"
PY = sys.executable
SRC = Path(__file__).resolve().parents[2] / "src"


class FakeClock:
    """Epoch milliseconds that move only when a test says so (plus 1 ms per read)."""

    def __init__(self, start_ms: int = 1_790_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        self.now_ms += 1
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def command(script: str) -> list[str]:
    return [PY, str(SCRIPTS / script)]


def write_loop(root: Path, items: Sequence[Mapping[str, Any]], **fields: Any) -> Path:
    """A loop over ``items`` in ``root`` with the scripted worker, check and goal oracle.

    Keyword fields replace top-level fields of the loop file (None removes one).
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / "backlog.jsonl").write_text("".join(json.dumps(dict(i)) + "\n" for i in items), encoding="utf-8")
    data: dict[str, Any] = {
        "loop": "nightly",
        "source": {"jsonl": "backlog.jsonl"},
        "workflow": {"command": command("worker.py"), "timeout": "60s"},
        "check": [{"name": "suite", "command": command("check.py"), "timeout": "60s"}],
        "goal": {
            "all_items_closed": True,
            "oracles": [{"name": "tests", "command": command("goal.py"), "timeout": "60s"}],
        },
        "budgets": {"passes": 20},
    }
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = root / "loop.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_loop(path: Path, db: Path | str, clock: FakeClock | None = None, **kwargs: Any) -> RunOutcome:
    """One in-process 'loop run' with an injected clock."""
    definition = load_loop(path)
    with LoopStore.open(db) as store:
        kwargs.setdefault("env", clean_env())
        runner = LoopRunner(definition, store, clock=clock or FakeClock(), **kwargs)
        return runner.run()


def record(db: Path | str, run_id: str) -> list[StoredLine]:
    with LoopStore.open(db) as store:
        return store.lines(run_id)


def cli(
    root: Path, db: Path | str, *args: str, crash_at: str | None = None, extra_env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run 'python -m statewright.loop ...' as a real process (for SIGKILL tests)."""
    env = clean_env()
    env["STATEWRIGHT_DB"] = str(db)
    env.update(extra_env or {})
    if crash_at is not None:
        env[CRASH_ENV] = crash_at
    return subprocess.run(
        [PY, "-m", "statewright.loop", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def gone(pid: int, timeout_seconds: float = 30) -> bool:
    """Whether process ``pid`` has ended (waits on its pidfd for the exit, never polls)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout_seconds)
        return ready == [fd]
    finally:
        os.close(fd)


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running now (its pidfd is not readable yet)."""
    return not gone(pid, 0)


def launches(root: Path) -> list[tuple[str, int]]:
    log = root / "launches.log"
    if not log.exists():
        return []
    out = []
    for line in log.read_text(encoding="utf-8").splitlines():
        item, attempt, _pid = line.split()
        out.append((item, int(attempt)))
    return out


def table(lines: Sequence[StoredLine]) -> list[tuple[str, str, str]]:
    """(state, kind, next_state) per line: the shape of a run."""
    return [(str(x.state), str(x.kind), str(x.next_state)) for x in lines]


def token_dir(db: Path | str) -> Path:
    """Where a test keeps the token files of a database: beside a SQLite file, else a
    directory of the temporary dir named after the database URL."""
    text = str(db)
    if not text.startswith(("postgresql://", "postgres://", "memory:")):
        return Path(text).parent
    import hashlib
    import tempfile

    where = Path(tempfile.gettempdir()) / f"statewright-test-tokens-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    where.mkdir(exist_ok=True)
    return where


def token_file(db: Path | str, name: str, *roles: str) -> Path:
    """A file holding a token of ``name``, whom the database's first admin adds with ``roles``."""
    from statewright.runtime.clock import SystemClock
    from statewright.runtime.users import Users
    from statewright.store import open_store

    store = open_store(db)
    try:
        users = Users(store, SystemClock())
        root = token_dir(db) / "root.token"
        if not root.exists():
            root.write_text(users.bootstrap("root").token + "\n", encoding="utf-8")
        admin = users.authenticate(root.read_text(encoding="utf-8").strip())
        users.add(admin, name, roles)
        path = token_dir(db) / f"{name}.token"
        path.write_text(users.issue_token(admin, name).token + "\n", encoding="utf-8")
        return path
    finally:
        store.close()


_ROOT_TOKENS: dict[str, str] = {}  # the first admin's token, by database URL


def person(store: Store, name: str, *roles: str) -> Principal:
    """``name``, given ``roles`` by the database's first admin, as ``Users.authenticate``
    returns them (the Principal an approval or a rejection takes)."""
    from statewright._errors import StatewrightError
    from statewright.runtime.clock import SystemClock
    from statewright.runtime.users import Users

    users = Users(store, SystemClock())
    with contextlib.suppress(StatewrightError):  # unless this database has its first admin already
        _ROOT_TOKENS[store.url] = users.bootstrap("root").token
    admin = users.authenticate(_ROOT_TOKENS[store.url])
    users.add(admin, name, roles)
    return users.authenticate(users.issue_token(admin, name).token)


# The agent of a loop whose passes are child tasks (the ``root`` fixture puts it on the path):
# it fixes an item (writes fixed-<id> in $LOOP_ROOT), except a ``hard`` one on its first attempt.
ENGINE_AGENT = '''
import os
import pathlib

def fix(brief, ctx):
    item = brief["input"]["item"]
    if item.get("hard") and brief["input"]["attempt"] == 1:
        return {"verdict": None, "note": "Done. All tests pass."}  # a false report
    pathlib.Path(os.environ["LOOP_ROOT"], f"fixed-{item['id']}").write_text("ok")
    return {"verdict": None, "note": "fixed"}
'''
FIX = {"id": "fix", "kind": "ai", "owner": "t", "agent": {"type": "python", "callable": "loop_engine_agent:fix"}}
APPROVE = {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"}}
