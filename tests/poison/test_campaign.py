"""The poison campaign: hostile outputs of every kind, from every kind of step, among
healthy tasks, on both backends. Each output must end as a valid outcome or a failed
attempt with a reason code that routes like any failure; the worker must come back from
``until_idle``, the healthy tasks must complete, and the database must hold only standard
JSON, within the documented caps."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakes.openai_server import FakeOpenAIServer, ScriptedReply, text_reply, tool_call_reply
from statewright.definition.loader import workflow_from_dict
from statewright.machine.state import Outcome, TaskState, TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.screen import MAX_ARTIFACT_CHARS, MAX_NOTE_CHARS
from statewright.runtime.worker import Worker
from store.backends import SQL_BACKENDS, raw_sql
from tally import tally

HERE = Path(__file__).resolve().parent
AGENTS = "poison.agents"
MB = 1_000_000
SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "summary": {"type": "string"}, "score": {}, "data": {}},
    "required": ["approved"],
}
ROUTES: tuple[Any, ...] = ("continue", "halt", {"loop_back": "prepare", "max_attempts": 2})
RUN_BOUND_SECONDS = 120.0  # only bounds a broken (hung) run; a good one takes a few seconds

pytestmark = pytest.mark.parametrize("backend", SQL_BACKENDS)  # rows read back from the database with SQL


@dataclass(frozen=True)
class Case:
    name: str
    outcome: str  # the reason code the step's last attempt ends with, or "passed"


COMMAND_CASES = [
    Case("lone surrogate in verdict", "invalid_verdict"),
    Case("verdict nested 5,000 deep", "invalid_verdict"),
    Case("verdict objects nested 200 deep", "invalid_verdict"),
    Case("NaN in verdict", "invalid_verdict"),
    Case("Infinity in verdict", "invalid_verdict"),
    Case("5,000-digit integer in verdict", "invalid_verdict"),
    Case("verdict is not UTF-8", "invalid_verdict"),
    Case("verdict is a FIFO", "invalid_verdict"),
    Case("verdict is a symlink to /dev/zero", "invalid_verdict"),
    Case("verdict is a directory", "invalid_verdict"),
    Case("2 MB verdict", "output_too_large"),
    Case("20 MB note", "passed"),
    Case("lone surrogate bytes on stdout", "passed"),
]
PYTHON_CASES = [
    Case("lone surrogate in verdict", "invalid_verdict"),
    Case("lone surrogate in a verdict key", "invalid_verdict"),
    Case("verdict nested 5,000 deep", "invalid_verdict"),
    Case("verdict objects nested 5,000 deep", "invalid_verdict"),
    Case("verdict that contains itself", "invalid_verdict"),
    Case("NaN in verdict", "invalid_verdict"),
    Case("Infinity in verdict", "invalid_verdict"),
    Case("5,000-digit integer in verdict", "invalid_verdict"),
    Case("set in verdict", "invalid_verdict"),
    Case("integer key in verdict", "invalid_verdict"),
    Case("2 MB verdict", "output_too_large"),
    Case("NaN cost", "invalid_verdict"),
    Case("Infinity tokens", "invalid_verdict"),
    Case("1,000 artifacts", "output_too_large"),
    Case("raises a 5 MB message with lone surrogates", "exception"),
    Case("raises PermanentError with a 5 MB message", "refused"),
    Case("calls sys.exit()", "executor_error"),
    Case("20 MB note", "passed"),
    Case("lone surrogate in note", "passed"),
    Case("5 MB artifact", "passed"),
    Case("lone surrogates in artifact name and text", "passed"),
]
CODE_CASES = [
    Case("5 MB output with lone surrogates", "passed"),
    Case("1,000 artifacts", "output_too_large"),
    Case("lone surrogates in artifact name and text", "passed"),
    Case("raises PermanentError with a 5 MB message", "refused"),
    Case("calls sys.exit()", "executor_error"),
    Case("command prints 20 MB and surrogate bytes", "passed"),
    Case("check detail of 5 MB with a lone surrogate", "wait_exhausted"),
]


def _args(text: str) -> ScriptedReply:
    return tool_call_reply(text, raw_arguments=True)


# Each OpenAI case: the replies of one attempt (a bad first reply gets one repair turn).
OPENAI_CASES: list[tuple[Case, list[ScriptedReply]]] = [
    (Case("lone surrogate in tool-call arguments", "no_verdict"),
     [_args('{"approved": true, "summary": "\\ud800"}')] * 2),
    (Case("NaN in tool-call arguments", "no_verdict"), [_args('{"approved": true, "score": NaN}')] * 2),
    (Case("tool-call arguments nested 5,000 deep", "no_verdict"),
     [_args('{"approved": true, "data": ' + "[" * 5000 + "]" * 5000 + "}")] * 2),
    (Case("2 MB tool-call arguments", "no_verdict"),
     [_args('{"approved": true, "summary": "' + "v" * (2 * MB) + '"}')] * 2),
    (Case("20 MB note beside a valid call", "passed"),
     [tool_call_reply({"approved": True}, content="n" * (20 * MB))]),
    (Case("lone surrogate in the note, then a bad call", "no_verdict"),
     [text_reply("look: \ud800"), text_reply("still no call \udfff")]),
]


def _step(case: Case, index: int, kind: str, agent: Mapping[str, Any] | None = None) -> dict[str, Any]:
    route = ROUTES[index % len(ROUTES)] if kind in ("python", "command") else "continue"
    if kind == "code":
        run: dict[str, Any] = {"callable": f"{AGENTS}:code"}
        if case.name.startswith("command prints"):
            script = "import sys; sys.stdout.buffer.write(b'\\xed\\xa0\\x80' + b'o' * 20_000_000)"
            run = {"command": [sys.executable, "-c", script]}
        if case.name.startswith("check detail"):
            return {"id": "work", "kind": "wait", "owner": "tests", "every": "1s", "max_checks": 1,
                    "check": {"callable": f"{AGENTS}:check"}, "on_failure": route}
        return {"id": "work", "kind": "code", "owner": "tests", "run": run, "on_failure": route}
    return {"id": "work", "kind": "ai", "owner": "agents", "output_schema": SCHEMA, "agent": dict(agent or {}),
            "on_failure": route}


def _workflow(name: str, work: dict[str, Any]) -> Any:
    prepare = {"id": "prepare", "kind": "code", "owner": "tests", "run": {"callable": f"{AGENTS}:done"}}
    after = {"id": "after", "kind": "code", "owner": "tests", "run": {"callable": f"{AGENTS}:done"}}
    return workflow_from_dict({"workflow": name, "steps": [prepare, work, after]}, f"<{name}>")


def _healthy(engine: Engine, n: int) -> list[str]:
    spec = {"type": "python", "callable": f"{AGENTS}:agent"}
    wf = _workflow("healthy", _step(Case("clean", "passed"), 0, "python", spec))
    return [engine.submit(wf, {"case": "clean"}) for _ in range(n)]


def _run(engine: Engine) -> tuple[bool, str]:
    """Work until idle with two executors; (returned cleanly, what went wrong)."""
    errors: list[BaseException] = []

    def work() -> None:
        try:
            Worker(engine, concurrency=2).run(until_idle=True)
        except BaseException as exc:  # the test reports it
            errors.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(RUN_BOUND_SECONDS)
    if thread.is_alive():
        return False, f"the worker did not return within {RUN_BOUND_SECONDS:g} s"
    return not errors, repr(errors[0]) if errors else ""


def _ended_as(st: TaskState) -> str:
    last = st.attempts_of("work")[-1]
    return "passed" if last.outcome is Outcome.PASSED else last.reason


def _routed_as_declared(st: TaskState, case: Case) -> bool:
    """The task went on as the step's failure route says (or completed, for a pass)."""
    if case.outcome == "passed":
        return st.status is TaskStatus.COMPLETED
    route = st.workflow.step("work").on_failure.kind.value
    if route == "continue":
        return st.status is TaskStatus.COMPLETED
    if route == "halt":
        return st.status is TaskStatus.HALTED and st.halt is not None and st.halt.reason == case.outcome
    return (st.status is TaskStatus.HALTED and st.halt is not None
            and st.halt.reason == "loop_budget_exhausted" and len(st.attempts_of("work")) == 2)


def _nonstandard(_name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {_name}")


def _stored_json_problems(url: str) -> list[str]:
    """Every stored event body and state must be standard JSON, and none may be huge."""
    bad = []
    rows = raw_sql(url, "SELECT event_id, body FROM sw_events") + raw_sql(url, "SELECT task_id, state FROM sw_tasks")
    for key, text in rows:
        try:
            json.loads(text, parse_constant=_nonstandard)
        except ValueError as exc:
            bad.append(f"{key}: {exc}")
        if len(text) > 2 * MB:
            bad.append(f"{key}: {len(text)} characters stored")
    return bad


def _campaign(engine: Engine, backend: str, kind: str, submitted: list[tuple[Case, str]],
              store_url: str) -> None:
    healthy = _healthy(engine, 3)
    returned, why = _run(engine)
    states = engine.states([tid for _, tid in submitted] + healthy)
    alive = returned and all(states[t].status is TaskStatus.COMPLETED for t in healthy)
    wrong = []
    for case, tid in submitted:
        st = states[tid]
        outcome = _ended_as(st) if st.attempts_of("work") else f"not run ({st.status.value})"
        tally("poison", f"{kind}: {case.name}", backend=backend, outcome=outcome, worker_alive=alive)
        if outcome != case.outcome or not _routed_as_declared(st, case):
            wrong.append(f"{case.name}: ended as {outcome!r} ({st.status.value}), expected {case.outcome!r}")
    assert returned, why
    assert alive, {t: states[t].status.value for t in healthy}
    assert wrong == []
    assert _stored_json_problems(store_url) == []


def test_command_agent_poison(engine: Engine, backend: str, store_url: str) -> None:
    """Real command-agent processes write surrogates, deep nesting, NaN, FIFOs, symlinks and
    20 MB notes; each ends as a routed outcome and the worker goes on."""
    submitted = []
    for i, case in enumerate(COMMAND_CASES):
        spec = {"type": "command", "command": [sys.executable, str(HERE / "command_agent.py"), case.name],
                "timeout": "20s"}
        submitted.append((case, engine.submit(_workflow(f"command-{i}", _step(case, i, "command", spec)), {})))
    _campaign(engine, backend, "command agent", submitted, store_url)
    big = next(tid for case, tid in submitted if case.name == "20 MB note")
    note = engine.state(big).attempts_of("work")[-1].note
    assert 0 < len(note) <= MAX_NOTE_CHARS + 100


def test_python_agent_poison(engine: Engine, backend: str, store_url: str) -> None:
    """A python agent returns surrogates, cycles, sets, deep nesting, NaN costs, 20 MB notes
    and 1,000 artifacts; each ends as a routed outcome, stored within the caps."""
    spec = {"type": "python", "callable": f"{AGENTS}:agent"}
    submitted = [
        (case, engine.submit(_workflow(f"python-{i}", _step(case, i, "python", spec)), {"case": case.name}))
        for i, case in enumerate(PYTHON_CASES)
    ]
    _campaign(engine, backend, "python agent", submitted, store_url)
    by_name = {case.name: engine.state(tid) for case, tid in submitted}
    assert len(by_name["20 MB note"].attempts_of("work")[-1].note) <= MAX_NOTE_CHARS + 100
    assert len(by_name["5 MB artifact"].attempts_of("work")[-1].artifacts["big.txt"]) <= MAX_ARTIFACT_CHARS + 100
    assert by_name["lone surrogate in note"].attempts_of("work")[-1].note == "before \\ud800 after"


def test_code_step_poison(engine: Engine, backend: str, store_url: str, tmp_path: Path) -> None:
    """Code callables, a command and a wait check hand back 5 MB texts with lone surrogates
    and 1,000 artifacts; each ends as a routed outcome."""
    submitted = []
    for i, case in enumerate(CODE_CASES):
        ws = tmp_path / f"ws-{i}"
        ws.mkdir()
        (ws / "case").write_text(case.name, encoding="utf-8")
        wf = _workflow(f"code-{i}", _step(case, i, "code"))
        submitted.append((case, engine.submit(wf, {"workspace": str(ws)})))
    _campaign(engine, backend, "code step", submitted, store_url)


@pytest.fixture
def servers() -> Iterator[list[FakeOpenAIServer]]:
    started = [FakeOpenAIServer(replies) for _, replies in OPENAI_CASES]
    for server in started:
        server.__enter__()
    yield started
    for server in started:
        server.__exit__(None, None, None)


def test_openai_agent_poison(engine: Engine, backend: str, store_url: str, servers: list[FakeOpenAIServer]) -> None:
    """An OpenAI-compatible server sends tool-call arguments with surrogates, NaN, deep
    nesting and 2 MB, and notes of 20 MB; each ends as a routed outcome."""
    submitted = []
    for i, ((case, _), server) in enumerate(zip(OPENAI_CASES, servers, strict=True)):
        spec = {"type": "openai", "base_url": server.base_url, "model": "m", "timeout": "20s"}
        submitted.append((case, engine.submit(_workflow(f"openai-{i}", _step(case, i, "openai", spec)), {})))
    _campaign(engine, backend, "openai agent", submitted, store_url)
