"""What ``show`` says about how an attempt went: an agent's exception by its message, a
command started more than once (a worker died) as redelivered, transient errors as retried."""

from __future__ import annotations

from pathlib import Path

from statewright.definition.loader import workflow_from_dict
from statewright.runtime.engine import Engine
from statewright.runtime.history import history_lines
from statewright.runtime.worker import Worker

STEPS = "results.res_steps"


def test_an_agent_exception_shows_its_message_in_the_history(engine: Engine) -> None:
    wf = workflow_from_dict({"workflow": "boom", "steps": [
        {"id": "analyse", "kind": "ai", "owner": "risk",
         "agent": {"type": "python", "callable": f"{STEPS}:broken_agent"}},
    ]}, "<boom>")
    tid = engine.submit(wf, {})
    Worker(engine).run(until_idle=True)
    [line, _] = history_lines(engine.state(tid))
    assert "ValueError: the bank letter has no account number" in line, line


def test_a_redelivered_command_and_a_retried_one_say_so(engine: Engine, tmp_path: Path) -> None:
    wf = workflow_from_dict({"workflow": "tries", "steps": [
        {"id": "apply", "kind": "code", "owner": "ops", "run": {"command": ["true"]}},
        {"id": "call", "kind": "code", "owner": "ops", "run": {"callable": f"{STEPS}:flaky_once"},
         "retry": {"max_attempts": 3, "initial_backoff": "1s", "jitter": False}},
    ]}, "<tries>")
    tid = engine.submit(wf, {"workspace": str(tmp_path)})
    now = engine.clock.now_ms()
    [dead] = engine.store.claim("worker-that-died", now, 5_000, 1)  # started, never reported
    assert dead.task_id == tid
    engine.clock.advance(10)  # its lease runs out
    Worker(engine).run(until=lambda: engine.state(tid).terminal)
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    apply, call = st.attempts
    assert (apply.deliveries, apply.retries, call.deliveries, call.retries) == (2, 0, 2, 1)
    lines = history_lines(st)
    assert lines[0].endswith("(redelivered: started 2 times)"), lines
    assert "(1 transient error retried)" in lines[1], lines
