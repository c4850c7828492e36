"""Data flows through the task: a code step's output is durable task state, recorded in its
AttemptReported event, given to later steps (``ctx.results``, ``STATEWRIGHT_STATE``),
replaced on a loop-back, rebuilt by ``verify``'s replay, and refused when hostile."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statewright.cli import cli
from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.machine.events import AttemptReported, event_from_dict
from statewright.runtime.engine import Engine
from statewright.runtime.verify import verify_task
from statewright.runtime.worker import Worker

STEPS = "results.res_steps"


def _workflow(name: str, *steps: dict[str, Any]) -> Workflow:
    return workflow_from_dict({"workflow": name, "steps": list(steps)}, f"<{name}>")


def _code(step_id: str, fn: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "code", "owner": "tests", "run": {"callable": f"{STEPS}:{fn}"}, **extra}


def _command(step_id: str, source: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "code", "owner": "tests",
            "run": {"command": [sys.executable, "-c", source]}, **extra}


def _run(engine: Engine, wf: Workflow, workspace: Path, **extra: Any) -> str:
    workspace.mkdir(exist_ok=True)
    tid = engine.submit(wf, {"workspace": str(workspace), **extra})
    Worker(engine).run(until_idle=True)
    return tid


READ_STATE = """
import json, os
state = json.load(open(os.environ["STATEWRIGHT_STATE"]))
json.dump({"from_file": state["results"]["analyse"]["iban"], "supplier": state["input"]["supplier"]},
          open(os.environ["STATEWRIGHT_OUTPUT"], "w"))
"""


def test_the_next_step_sees_a_result_through_ctx_results(engine: Engine, tmp_path: Path) -> None:
    wf = _workflow("flow", _code("analyse", "analyse"), _code("use", "consume"))
    tid = _run(engine, wf, tmp_path / "ws", supplier="S-1")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results == {"analyse": {"iban": "DE89370400440532013000", "run": 1, "who": "S-1"},
                          "use": {"saw_run": 1}}
    seen = json.loads((tmp_path / "ws" / "seen.json").read_text())
    assert seen["results"] == {"analyse": st.results["analyse"]}
    assert seen["input"]["supplier"] == "S-1"
    assert seen["changed"] is False and seen["input_changed"] is False  # read-only
    reported = [e for e in engine.events(tid) if isinstance(e, AttemptReported)]
    assert reported[0].result == st.results["analyse"]


def test_a_command_reads_statewright_state_and_writes_statewright_output(engine: Engine, tmp_path: Path) -> None:
    wf = _workflow("cmd", _code("analyse", "analyse"), _command("use", READ_STATE))
    tid = _run(engine, wf, tmp_path / "ws", supplier="S-2")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results["use"] == {"from_file": "DE89370400440532013000", "supplier": "S-2"}


def test_a_command_without_an_output_file_has_no_result(engine: Engine, tmp_path: Path) -> None:
    wf = _workflow("quiet", _command("noop", "pass"), _code("old", "legacy"))
    tid = _run(engine, wf, tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results == {}
    assert st.attempts[-1].output == "plain text"


def test_a_loop_back_replaces_the_result_and_verify_rebuilds_it(engine: Engine, tmp_path: Path) -> None:
    wf = _workflow(
        "loop", _code("analyse", "analyse"),
        _code("gate", "gate", on_failure={"loop_back": "analyse", "max_attempts": 2}),
        _code("use", "consume"),
    )
    tid = _run(engine, wf, tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results["analyse"]["run"] == 2
    assert st.results["use"] == {"saw_run": 2}
    runs = [e.result["run"] for e in engine.events(tid)
            if isinstance(e, AttemptReported) and e.step == "analyse" and e.result]
    assert runs == [1, 2]  # both stay in the history
    assert verify_task(engine, tid) == []
    # the replay alone gives the results: rebuild from the logged events
    from statewright.machine.state import new_task
    from statewright.machine.task import transition

    replayed = new_task(tid, st.workflow)
    for e in engine.events(tid):
        replayed, _ = transition(replayed, event_from_dict(e.to_dict()))
    assert replayed.results == st.results


def test_verify_flags_a_result_edited_in_the_stored_projection(tmp_path: Path) -> None:
    """A result is state the log must explain: one edited behind statewright's back is found."""
    import sqlite3

    from statewright.runtime.clock import FakeClock
    from statewright.store import open_store

    db = tmp_path / "state.db"
    engine = Engine(open_store(db), clock=FakeClock(), workspace_root=tmp_path / "workspaces")
    tid = _run(engine, _workflow("edited", _code("analyse", "analyse")), tmp_path / "ws")
    engine.close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sw_tasks SET state = replace(state, 'DE89370400440532013000', "
                     "'GB00000000000000000000') WHERE task_id = ?", (tid,))
        [stored] = conn.execute("SELECT state FROM sw_tasks WHERE task_id = ?", (tid,)).fetchone()
    assert json.loads(stored)["results"]["analyse"]["iban"] == "GB00000000000000000000"
    out = CliRunner().invoke(cli, ["verify", "--db", str(db)])
    assert out.exit_code == 1, out.output
    assert f"{tid}: replayed state differs from the stored projection" in out.output


def test_old_attempt_events_load_without_a_result() -> None:
    ev = event_from_dict({"type": "AttemptReported", "event_id": "e", "at_ms": 1, "step": "a"})
    assert isinstance(ev, AttemptReported) and ev.result is None


def test_show_prints_results(engine: Engine, tmp_path: Path, store_url: str) -> None:
    wf = _workflow("show", _code("analyse", "analyse"))
    tid = _run(engine, wf, tmp_path / "ws")
    runner = CliRunner()
    as_json = runner.invoke(cli, ["show", tid, "--db", store_url, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["state"]["results"]["analyse"]["run"] == 1
    plain = runner.invoke(cli, ["show", tid, "--db", store_url])
    assert plain.exit_code == 0, plain.output
    assert "analyse: {" in plain.stdout and "DE89370400440532013000" in plain.stdout


FIFO = "import os; os.mkfifo(os.environ['STATEWRIGHT_OUTPUT'])"
TOO_LARGE = "import os; open(os.environ['STATEWRIGHT_OUTPUT'], 'w').write('{\"x\": \"' + 'y' * 300000 + '\"}')"
NOT_OBJECT = "import os; open(os.environ['STATEWRIGHT_OUTPUT'], 'w').write('[1, 2]')"
NAN = "import os; open(os.environ['STATEWRIGHT_OUTPUT'], 'w').write('{\"x\": NaN}')"
INFINITY = "import os; open(os.environ['STATEWRIGHT_OUTPUT'], 'w').write('{\"x\": Infinity}')"
LINK = "import os; os.symlink('/etc/hostname', os.environ['STATEWRIGHT_OUTPUT'])"


@pytest.mark.parametrize(("step", "reason"), [
    (_command("bad", FIFO), "invalid_output"),
    (_command("bad", TOO_LARGE), "output_too_large"),
    (_command("bad", NOT_OBJECT), "invalid_output"),
    (_command("bad", NAN), "invalid_output"),
    (_command("bad", LINK), "invalid_output"),
    (_command("bad", INFINITY), "invalid_output"),
    (_code("bad", "nan_output"), "invalid_output"),
    (_code("bad", "infinite_output"), "invalid_output"),
    (_code("bad", "huge_output"), "output_too_large"),
], ids=["fifo", "too-large-file", "not-an-object", "nan-file", "symlink", "infinity-file", "nan-callable",
     "infinity-callable", "too-large-callable"])
def test_hostile_output_fails_the_attempt_with_a_reason(
    engine: Engine, tmp_path: Path, step: dict[str, Any], reason: str,
) -> None:
    tid = _run(engine, _workflow("hostile", step), tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "halted"
    assert st.attempts[-1].reason == reason, st.attempts[-1]
    assert st.results == {}
    assert verify_task(engine, tid) == []
