"""A real ``statewright agent`` process against a served API: one piece of work with
``--once``, and one SIGKILLed mid-step, whose missed heartbeat fails the attempt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette

from remote.support import People, attempts, people, remote_flow, settle
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.server.agents import agent_routes
from store.backends import SQL_BACKENDS, raw_sql

STATEWRIGHT = str(Path(sys.executable).with_name("statewright"))

AGENT_SCRIPT = """
import json, os, sys
brief = json.load(open(os.environ["STATEWRIGHT_BRIEF"]))
seen = {"env": sorted(os.environ), "task": brief["task_id"], "input": brief["input"]}
with open(os.environ["STATEWRIGHT_VERDICT"], "w") as f:
    json.dump({"approved": brief["task_id"] == os.environ["STATEWRIGHT_TASK_ID"], "summary": json.dumps(seen)}, f)
print("reviewed")
"""

STUCK_SCRIPT = """
import os, sys, time
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(300)
"""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine_defaults(clock: FakeClock, tmp_path: Path) -> Callable[[], dict[str, Any]]:
    return lambda: {"clock": clock, "workspace_root": tmp_path / "ws"}


@pytest.fixture
def engine(open_engine: Callable[..., Engine]) -> Engine:
    return open_engine()


def agent_env(who: People) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", os.defpath), "STATEWRIGHT_TOKEN": who.builder.token,
            "SECRET_OF_THE_AGENT_HOST": "do-not-pass"}


def test_one_piece_of_work_with_once(engine: Engine, serve: Callable[[Starlette], str], tmp_path: Path) -> None:
    """The agent claims the parked attempt, runs the command with the brief and a minimal
    environment (no STATEWRIGHT_TOKEN), reports its verdict, and exits 0."""
    who = people(engine)
    url = serve(Starlette(routes=agent_routes(engine)))
    tid = engine.submit(remote_flow(), {"change": 42})
    settle(engine)
    script = tmp_path / "agent.py"
    script.write_text(AGENT_SCRIPT)
    done = subprocess.run(
        [STATEWRIGHT, "agent", "--server", url, "--queue", "builds", "--once", "--wait", "5", "--",
         sys.executable, "agent.py"],  # a path relative to where the agent runs
        env=agent_env(who), capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    settle(engine)
    st = engine.state(tid)
    assert st.status.value == "completed"
    review = st.attempts_of("review")[-1]
    assert review.actor == "remote:builder" and review.note.strip() == "reviewed"
    assert review.verdict is not None and review.verdict["approved"] is True
    seen = json.loads(review.verdict["summary"])
    assert seen["task"] == tid and seen["input"] == {"change": 42}
    assert "STATEWRIGHT_TOKEN" not in seen["env"] and "SECRET_OF_THE_AGENT_HOST" not in seen["env"]
    assert {"STATEWRIGHT_BRIEF", "STATEWRIGHT_VERDICT", "STATEWRIGHT_TASK_ID"} <= set(seen["env"])


def test_without_once_the_agent_handles_work_as_it_comes_and_stops_on_sigterm(
    engine: Engine, serve: Callable[[Starlette], str], tmp_path: Path,
) -> None:
    """A long-running agent takes each piece of work its queue gets (two tasks, parked one
    after the other), and SIGTERM stops it cleanly (exit 0) between claims."""
    who = people(engine)
    url = serve(Starlette(routes=agent_routes(engine)))
    script = tmp_path / "agent.py"
    script.write_text(AGENT_SCRIPT)
    proc = subprocess.Popen(
        [STATEWRIGHT, "agent", "--server", url, "--queue", "builds", "--wait", "0.2", "--",
         sys.executable, str(script)],
        env=agent_env(who), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path,
    )
    try:
        for change in (1, 2):
            tid = engine.submit(remote_flow(), {"change": change})
            settle(engine)  # parks the review for the agent

            def completed(task_id: str = tid) -> bool | None:
                settle(engine)
                return True if engine.state(task_id).status.value == "completed" else None

            _wait_for(completed, proc)
            review = engine.state(tid).attempts_of("review")[-1]
            assert review.actor == "remote:builder" and json.loads(review.verdict["summary"])["input"] == {
                "change": change}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.mark.parametrize("backend", SQL_BACKENDS)  # the server and its worker share the database
def test_an_agent_killed_mid_step_misses_its_heartbeat(
    engine: Engine, clock: FakeClock, serve: Callable[[Starlette], str], store_url: str, tmp_path: Path,
) -> None:
    """SIGKILL the agent (and its command) while the step runs: its heartbeats stop, the
    deadline fails the attempt with heartbeat_timeout, and the task routes (back to prepare,
    parked again for the next agent)."""
    who = people(engine)
    url = serve(Starlette(routes=agent_routes(engine)))
    tid = engine.submit(remote_flow(heartbeat="1s"))
    settle(engine)
    script, ready = tmp_path / "stuck.py", tmp_path / "ready"
    script.write_text(STUCK_SCRIPT)
    proc = subprocess.Popen(
        [STATEWRIGHT, "agent", "--server", url, "--queue", "builds", "--once", "--wait", "5", "--",
         sys.executable, str(script), str(ready)],
        env=agent_env(who), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path,
    )
    try:
        child = int(_wait_for(lambda: ready.read_text() if ready.exists() else None, proc))
        _wait_for(lambda: _heartbeats(store_url) or None, proc)  # the agent heartbeats while its command runs
        assert engine.state(tid).attempts_of("review") == []
    finally:
        proc.kill()  # SIGKILL: no report, no goodbye
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()
        if ready.exists():
            os.kill(int(ready.read_text()), signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL and child > 0
    settle(engine)
    assert engine.state(tid).attempts_of("review") == []  # the deadline has not passed yet
    clock.advance(2)
    settle(engine)
    assert attempts(engine, tid)[1] == ("review", 1, "failed", "heartbeat_timeout", "timer:remote")
    cur = engine.state(tid).current
    assert cur is not None and (cur.step, cur.attempt) == ("review", 2)
    assert [r.agent for r in engine.store.remote_rows()] == [None]  # waiting for the next agent


def _heartbeats(store_url: str) -> int:
    rows = raw_sql(store_url, "SELECT token FROM sw_timers WHERE purpose = ?", ("remote_heartbeat",))
    return int(rows[0][0]) if rows else 0


def _wait_for(probe: Callable[[], Any], proc: subprocess.Popen[Any], seconds: float = 30.0) -> Any:
    """What ``probe`` returns once it is not None; fails when the agent ends first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        if proc.poll() is not None:
            pytest.fail(f"the agent ended early ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.02)
    pytest.fail("the agent did not get there in time")


def test_a_refused_agent_is_one_line(engine: Engine, serve: Callable[[Starlette], str], tmp_path: Path) -> None:
    """A token the server does not know, or an identity that is no agent for the queue: one
    line on stderr, exit 1, nothing claimed."""
    who = people(engine)
    url = serve(Starlette(routes=agent_routes(engine)))
    engine.submit(remote_flow())
    settle(engine)
    for token, said in (("swt_" + "z" * 43, "(401): the token is unknown"), (who.nobody.token, "(403):")):
        done = subprocess.run(
            [STATEWRIGHT, "agent", "--server", url, "--queue", "builds", "--once", "--", "true"],
            env={"PATH": os.environ.get("PATH", os.defpath), "STATEWRIGHT_TOKEN": token},
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and len(lines) == 1 and said in lines[0], done.stderr
    missing = subprocess.run(
        [STATEWRIGHT, "agent", "--server", url, "--queue", "builds", "--", "no-such-agent-command"],
        env={"PATH": os.environ.get("PATH", os.defpath), "STATEWRIGHT_TOKEN": who.builder.token},
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert missing.returncode == 1 and "'no-such-agent-command' is not on PATH" in missing.stderr
    assert [r.agent for r in engine.store.remote_rows()] == [None]  # nothing was claimed
