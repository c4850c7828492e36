"""A worker SIGKILLed between a transition and its label update (the transition committed,
with its SyncLabels in the outbox): the next worker performs the command, and the issue shows
the task's state. On every store backend, with real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from statewright.definition.loader import workflow_from_dict
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from store.backends import SQL_BACKENDS

from .fake_github import TOKEN, FakeGitHub
from .support import REPO


def _worker(store_url: str, github: FakeGitHub, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STATEWRIGHT_", "GITHUB_"))}
    env.update(GITHUB_API_URL=github.url, GITHUB_TOKEN=TOKEN, **extra)
    argv = [sys.executable, "-m", "statewright", "worker", "--db", store_url, "--lease", "1", "--until-idle"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("backend", SQL_BACKENDS)  # a worker process is killed: the database outlives it
def test_a_crash_after_the_transition_is_repaired_by_the_outbox(
    open_engine: Callable[..., Engine], store_url: str, github: FakeGitHub,
) -> None:
    engine = open_engine()
    wf = workflow_from_dict({
        "workflow": "one-step", "input_schema": {"type": "object", "properties": {
            "repo": {"type": "string"}, "number": {"type": "integer"}}},
        "github": {"repo": REPO, "labels": {"build": "building"}, "terminal": {"completed": "built"}},
        "steps": [{"id": "build", "kind": "code", "owner": "ci", "run": {"command": ["sh", "-c", "true"]}}],
    }, "<one-step>")
    tid = engine.submit(wf, {"repo": REPO, "number": 5})

    died = _worker(store_url, github, STATEWRIGHT_CRASH_AT="after_append")
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert engine.state(tid).status is TaskStatus.COMPLETED  # the transition committed...
    assert "built" not in github.labels(REPO, 5)  # ...and the label update did not happen
    later_ms = time.time_ns() // 1_000_000 + 60_000  # the workers' clock, past the dead one's lease
    pending = engine.store.claim("probe", later_ms, 1, 10)
    assert [c.type for c in pending] == ["SyncLabels"]  # it waits in the outbox
    for c in pending:  # given back unstarted, for the next worker
        engine.store.release(c.command_id, c.token, 0, failed=False, started=False)

    done = _worker(store_url, github)
    assert done.returncode == 0, done.stderr
    assert github.labels(REPO, 5) == {"built"}
    assert engine.store.claim("probe", later_ms + 60_000, 1000, 10) == []
