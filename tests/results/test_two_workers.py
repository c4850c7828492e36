"""Two worker processes on one PostgreSQL database, each with its own workspace root (its
own disk, as on two machines): the step after an approval runs on the other worker and still
has the first step's result, from the task's state and not from a file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from people.support import People
from statewright.definition.loader import workflow_from_dict
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.store import open_store
from store.backends import fresh_pg_schema

pytestmark = pytest.mark.postgres

ANALYSE = """
import json, os
open("made-here", "w").write("analyse")
json.dump({"iban": "DE89370400440532013000", "evidence": ["E1", "E2"]}, open(os.environ["STATEWRIGHT_OUTPUT"], "w"))
"""
USE = """
import json, os, sys
state = json.load(open(os.environ["STATEWRIGHT_STATE"]))
out = {"arg": sys.argv[1], "evidence": sys.argv[2], "from_state": state["results"]["analyse"]["iban"],
       "file_from_step_1": os.path.exists("made-here")}
open("made-here", "w").write("use")
json.dump(out, open(os.environ["STATEWRIGHT_OUTPUT"], "w"))
"""
WORKFLOW = workflow_from_dict({"workflow": "two-hosts", "steps": [
    {"id": "analyse", "kind": "code", "owner": "t", "run": {"command": [sys.executable, "-c", ANALYSE]}},
    {"id": "approve", "kind": "human", "owner": "t", "approvers": {"role": "maintainer"}},
    {"id": "use", "kind": "code", "owner": "t",
     "run": {"command": [sys.executable, "-c", USE, "{results.analyse.iban}", "{results.analyse.evidence.1}"]}},
]})


def _worker(cwd: Path, url: str) -> None:
    """One worker process, its workspace root under ``cwd``, run until nothing is due."""
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    done = subprocess.run(
        [sys.executable, "-m", "statewright", "worker", "--until-idle", "--db", url],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_next_step_on_another_worker_has_the_first_steps_result(tmp_path: Path) -> None:
    with fresh_pg_schema() as (url, _name):
        engine = Engine(open_store(url), clock=FakeClock(), workspace_root=tmp_path / "submitter")
        try:
            tid = engine.submit(WORKFLOW, {"supplier": "S-1"})
            _worker(tmp_path / "a", url)
            parked = engine.state(tid)
            assert parked.status.value == "awaiting_approval", parked.halt
            assert parked.current is not None
            alice = People(engine).add("alice", "maintainer")
            engine.approve(tid, alice, proposal_hash=parked.current.proposal_hash)
            _worker(tmp_path / "b", url)
            st = engine.state(tid)
        finally:
            engine.close()
    assert st.status.value == "completed", st.halt
    assert st.results["use"] == {"arg": "DE89370400440532013000", "evidence": "E2",
                                 "from_state": "DE89370400440532013000", "file_from_step_1": False}
    a_space = tmp_path / "a" / ".statewright" / "workspaces" / tid
    b_space = tmp_path / "b" / ".statewright" / "workspaces" / tid
    assert (a_space / "made-here").read_text() == "analyse"  # step 1 ran on worker A
    assert (b_space / "made-here").read_text() == "use"  # step 2 ran on worker B, without A's files
