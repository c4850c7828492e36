"""Per-attempt git worktrees and protected paths, through the real engine and worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from statewright.definition import workflow_from_dict
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker
from statewright.store import open_store

AGENTS = '''
from pathlib import Path

def cheat(brief, ctx):
    Path(ctx.workspace, "tests", "test_calc.py").unlink()
    return {"verdict": None, "note": "Done. All tests pass."}

def fix(brief, ctx):
    Path(ctx.workspace, "calc.py").write_text("def add(a, b):\\n    return a + b\\n")
    return {"verdict": None, "note": "fixed"}

def weaken(brief, ctx):
    if brief["prior_attempts"]:
        return fix(brief, ctx)
    Path(ctx.workspace, "tests", "test_calc.py").write_text("def test_add():\\n    pass\\n")
    return {"verdict": None, "note": "Done. All tests pass."}
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    test = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    (repo / "tests" / "test_calc.py").write_text(test)
    (repo / "conftest.py").write_text("")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "bug")
    return repo


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    pkg = tmp_path / "agentmods"
    pkg.mkdir()
    (pkg / "ws_agents.py").write_text(AGENTS)
    monkeypatch.syspath_prepend(str(pkg))
    return "ws_agents"


def _workflow(agent: str, on_failure: object = "halt") -> object:
    return workflow_from_dict(
        {
            "workflow": "ws",
            "steps": [
                {"id": "prepare", "kind": "code", "owner": "t", "run": {"command": ["true"]}},
                {"id": "implement", "kind": "ai", "owner": "t", "protected": ["tests/"],
                 "agent": {"type": "python", "callable": agent}, "on_failure": on_failure},
                {"id": "test", "kind": "code", "owner": "t",
                 "run": {"command": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]},
                 "on_failure": {"loop_back": "implement", "max_attempts": 3}},
            ],
        }
    )


def _run(tmp_path: Path, repo: Path, agent: str, on_failure: object = "halt") -> tuple[Engine, str]:
    engine = Engine(open_store(tmp_path / "s.db"), clock=FakeClock(), workspace_root=tmp_path / "ws")
    tid = engine.submit(_workflow(agent, on_failure), {"repo": str(repo)})  # type: ignore[arg-type]
    Worker(engine).run(until_idle=True)
    return engine, tid


def test_agent_that_deletes_the_failing_test_never_passes(tmp_path: Path, repo: Path, agents: str) -> None:
    """Deleting a protected test fails the attempt with protected_path_modified; the repo is untouched."""
    engine, tid = _run(tmp_path, repo, f"{agents}:cheat")
    st = engine.state(tid)
    assert st.status.value == "halted"
    first = st.attempts_of("implement")[0]
    assert (first.step, first.reason) == ("implement", "protected_path_modified")
    assert "tests/test_calc.py" in first.detail
    assert (repo / "tests" / "test_calc.py").exists()
    assert "a - b" in (repo / "calc.py").read_text()
    engine.close()


def test_each_attempt_gets_its_own_worktree_and_checks_see_restored_tests(
    tmp_path: Path, repo: Path, agents: str
) -> None:
    """A weakened test fails the attempt; the loop-back attempt works in a fresh worktree and
    the test step runs the original tests there."""
    engine, tid = _run(tmp_path, repo, f"{agents}:weaken", {"loop_back": "prepare", "max_attempts": 3})
    st = engine.state(tid)
    assert st.status.value == "completed", [(a.step, a.reason, a.detail) for a in st.attempts]
    implement = st.attempts_of("implement")
    assert [a.reason for a in implement] == ["protected_path_modified", ""]
    first, second = (Path(a.artifacts["workspace"]) for a in implement)
    assert first != second
    assert "assert add(2, 3) == 5" in (second / "tests" / "test_calc.py").read_text()
    assert "assert add(2, 3) == 5" in (first / "tests" / "test_calc.py").read_text()  # restored
    engine.close()


def test_good_fix_passes_in_its_worktree(tmp_path: Path, repo: Path, agents: str) -> None:
    """The fixing attempt's worktree is where the test step runs, and it passes."""
    engine, tid = _run(tmp_path, repo, f"{agents}:fix")
    st = engine.state(tid)
    assert st.status.value == "completed", [(a.step, a.reason, a.detail) for a in st.attempts]
    implement = st.attempts_of("implement")[0]
    ws = Path(implement.artifacts["workspace"])
    assert ws != repo and ws.is_dir()
    assert "a + b" in (ws / "calc.py").read_text()
    assert implement.artifacts["base_commit"] == _git(repo, "rev-parse", "HEAD").strip()
    assert "a - b" in (repo / "calc.py").read_text()  # the shared repository is not touched
    engine.close()
