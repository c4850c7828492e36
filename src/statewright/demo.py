"""The fix-a-bug demo: a real git repository with a real failing pytest test, a scripted
agent whose first fix is wrong, a real test step that loops back with the failing output,
a review agent, a named human approval quoting the proposal hash, and a real merge."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
import yaml

from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.runtime.engine import Engine
from statewright.runtime.history import history_lines, proposal_lines
from statewright.runtime.run import run_task
from statewright.store import open_store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CALC_BUGGY = "def add(a, b):\n    return a - b\n"
TESTS = (
    "from calc import add\n\n\n"
    "def test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_add_negative():\n    assert add(-1, 1) == 0\n"
)


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def make_repo(repo: Path) -> None:
    """A repository on main whose test suite fails."""
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC_BUGGY)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    (repo / "conftest.py").write_text("")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "demo@statewright.invalid")
    _git(repo, "config", "user.name", "statewright demo")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "calc with a failing test")


def _localise(value: Any) -> Any:
    """Run the example's commands with this interpreter and absolute example paths."""
    if isinstance(value, dict):
        return {k: _localise(v) for k, v in value.items()}
    if isinstance(value, list):
        out = [_localise(v) for v in value]
        if out and out[0] == "python":
            out[0] = sys.executable
        return [str(EXAMPLES.parent / v) if isinstance(v, str) and v.startswith("examples/") else v
                for v in out]
    return value


def demo_workflow() -> Workflow:
    path = EXAMPLES / "fix-bug.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return workflow_from_dict(_localise(data), str(path))


def run_demo(workdir: str | None = None) -> int:
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="statewright-demo-"))
    base.mkdir(parents=True, exist_ok=True)
    repo = base / "repo"
    db = base / "state.db"
    say = click.echo
    say(f"demo directory: {base}")
    make_repo(repo)
    failing = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=repo,
        capture_output=True, text=True,
    )
    say(f"main has a failing test: {failing.stdout.strip().splitlines()[-1]}")

    wf = demo_workflow()
    say(f"workflow: {wf.describe()}")
    engine = Engine(open_store(db))
    admin = engine.users.authenticate(engine.users.bootstrap("admin").token)
    engine.users.add(admin, "alice", ["maintainer"])
    alice = engine.users.issue_token(admin, "alice")
    say("an admin added alice (role maintainer) and issued her a token")
    tid = engine.submit(wf, {"workspace": str(repo), "bug": "add() gives the wrong sum", "base_ref": "main"})
    say(f"submitted task {tid}; working until it ends or parks at a human step...")
    st = run_task(engine, tid)
    if st.status != "awaiting_approval" or st.current is None:
        say(f"unexpected: the task is {st.status}")
        _print(engine, tid)
        return 1
    h = st.current.proposal_hash
    say(f"\nthe task waits at '{st.current.step}' for a maintainer, who reviews this proposal:")
    for line in proposal_lines(engine.state(tid)):
        say("  " + line)
    say(f"its hash is what an approval quotes:\n  {h}")
    (repo / "ci-green").write_text("ok\n")  # the CI the wait step watches reports green
    cmd = [sys.executable, "-m", "statewright", "approve", tid, "--as", "alice", "--hash", h,
           "--db", str(db)]
    say("the demo now approves as alice (her token in STATEWRIGHT_TOKEN), running the command she would type:")
    say(f"  statewright approve {tid} --as alice --hash {h} --db {shlex.quote(str(db))}")
    env = {**os.environ, "STATEWRIGHT_TOKEN": alice.token}
    subprocess.run(cmd, check=True, env=env)
    st = run_task(engine, tid)
    say("")
    _print(engine, tid)
    merged = _git(repo, "log", "--oneline", "-1", "main")
    passing = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=repo,
        capture_output=True, text=True,
    )
    say(f"\nmain is now at: {merged}")
    say(f"tests on main: {passing.stdout.strip().splitlines()[-1]}")
    say(f"\nthe demo's repository and database are left in {base} (remove it when done); look again with:")
    say(f"  statewright show {tid} --db {shlex.quote(str(db))}")
    engine.close()
    return 0 if st.status == "completed" and passing.returncode == 0 else 1


def _print(engine: Engine, tid: str) -> None:
    st = engine.state(tid)
    click.echo(f"history of {tid} ({st.workflow.name}), status {st.status.value}:")
    for line in history_lines(st):
        click.echo("  " + line)
