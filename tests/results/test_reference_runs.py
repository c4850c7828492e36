"""References and state at run time, on every backend: a command gets each reference as
one argument (never through a shell), a missing one fails the attempt with
``missing_reference`` and routes like any failure, a loop-back's latest result is the one
seen; wait steps record their last check; code output is held to its output_schema; a
result over the step's ``result_limit`` fails with ``output_too_large``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import pytest

from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.machine.events import CheckReported
from statewright.runtime.engine import Engine
from statewright.runtime.verify import verify_task
from statewright.runtime.worker import Worker

STEPS = "results.res_steps"
ARGV = "import json, os, sys; json.dump({'argv': sys.argv[1:]}, open(os.environ['STATEWRIGHT_OUTPUT'], 'w'))"


def _workflow(*steps: dict[str, Any]) -> Workflow:
    return workflow_from_dict({"workflow": "runs", "steps": list(steps)}, "<runs>")


def _code(step_id: str, fn: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "code", "owner": "tests", "run": {"callable": f"{STEPS}:{fn}"}, **extra}


def _argv_step(step_id: str, *items: str, **extra: Any) -> dict[str, Any]:
    """A command step whose result is the argv it was given."""
    return {"id": step_id, "kind": "code", "owner": "tests",
            "run": {"command": [sys.executable, "-c", ARGV, *items]}, **extra}


def _run(engine: Engine, wf: Workflow, workspace: Path, **data: Any) -> str:
    workspace.mkdir(exist_ok=True)
    tid = engine.submit(wf, {"workspace": str(workspace), **data})
    Worker(engine).run(until_idle=True)
    return tid


def test_references_reach_the_command_as_one_argument_each(engine: Engine, tmp_path: Path) -> None:
    wf = _workflow(_code("analyse", "analyse"),
                   _argv_step("use", "{input.supplier}", "--iban={results.analyse.iban}", "{results.analyse}",
                              "{results.analyse.run}", "{{input.supplier}"))
    tid = _run(engine, wf, tmp_path / "ws", supplier="S 1")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    analysed = '{"iban":"DE89370400440532013000","run":1,"who":"S 1"}'
    assert st.results["use"] == {"argv": ["S 1", "--iban=DE89370400440532013000", analysed, "1", "{input.supplier}"]}


def test_shell_injection_in_the_input_stays_one_literal_argument(engine: Engine, tmp_path: Path) -> None:
    script = tmp_path / "argv.py"
    script.write_text(ARGV, encoding="utf-8")
    wf = _workflow(
        _argv_step("listed", "{input.evil}", "{input.sub}", "x-{input.sub}-y", "{input.tick}"),
        {"id": "split", "kind": "code", "owner": "tests",
         "run": {"command": f"{sys.executable} {script} {{input.sub}} {{input.evil}}"}},
    )
    ws = tmp_path / "ws"
    tid = _run(engine, wf, ws, evil="; rm -rf ~", sub="$(touch pwned)", tick="`touch pwned2` && touch pwned3")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results["listed"] == {"argv": ["; rm -rf ~", "$(touch pwned)", "x-$(touch pwned)-y",
                                             "`touch pwned2` && touch pwned3"]}
    assert st.results["split"] == {"argv": ["$(touch pwned)", "; rm -rf ~"]}
    made = {p.name for p in ws.rglob("*")} | {p.name for p in tmp_path.iterdir()}
    assert not made & {"pwned", "pwned2", "pwned3"}, made


@pytest.mark.parametrize(("writes", "item", "why"), [
    (None, "{results.maybe.x}", "{results.maybe.x}: step 'maybe' has no result (not run yet"),
    ({"y": 1}, "{results.maybe.x}", "{results.maybe.x}: results.maybe has no field 'x'"),
    ({"x": "text"}, "{results.maybe.x.deeper}", "results.maybe.x is a string, which has no field 'deeper'"),
    ({"x": [1, 2]}, "{results.maybe.x.2}", "results.maybe.x is a list of 2; it has no item '2'"),
    ({"x": [1, 2]}, "{input.nothing}", "{input.nothing}: input has no field 'nothing'"),
], ids=["no-result", "missing-field", "not-an-object", "index-out-of-range", "missing-input"])
def test_a_missing_reference_fails_the_attempt_before_the_command_runs(
    engine: Engine, tmp_path: Path, writes: dict[str, Any] | None, item: str, why: str,
) -> None:
    write = f"import json, os; json.dump({writes!r}, open(os.environ['STATEWRIGHT_OUTPUT'], 'w'))"
    source = "pass" if writes is None else write
    maybe = {"id": "maybe", "kind": "code", "owner": "tests", "run": {"command": [sys.executable, "-c", source]}}
    marker = tmp_path / "ws" / "ran"
    use = {"id": "use", "kind": "code", "owner": "tests",
           "run": {"command": [sys.executable, "-c", f"open({str(marker)!r}, 'w')", item]}}
    tid = _run(engine, _workflow(maybe, use), tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "halted"
    last = st.attempts[-1]
    assert (last.step, last.reason) == ("use", "missing_reference")
    assert why in last.detail, last.detail
    assert not marker.exists()
    assert verify_task(engine, tid) == []


def test_a_missing_reference_routes_like_any_failure(engine: Engine, tmp_path: Path) -> None:
    wf = _workflow(_argv_step("use", "{input.absent}", on_failure="continue"), _code("after", "nothing"))
    tid = _run(engine, wf, tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert [(a.step, a.outcome.value, a.reason) for a in st.attempts] == [
        ("use", "failed", "missing_reference"), ("after", "passed", "")]


def test_after_a_loop_back_the_latest_result_is_the_one_referenced(engine: Engine, tmp_path: Path) -> None:
    wf = _workflow(_code("analyse", "analyse"),
                   _code("gate", "gate", on_failure={"loop_back": "analyse", "max_attempts": 2}),
                   _argv_step("use", "{results.analyse.run}"))
    tid = _run(engine, wf, tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results["use"] == {"argv": ["2"]}


FIRST_ONLY = """
import json, os, pathlib, sys
runs = pathlib.Path("analyse.runs")
n = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(n))
if n > 1:
    sys.exit(1)
json.dump({"run": n}, open(os.environ["STATEWRIGHT_OUTPUT"], "w"))
"""


@pytest.mark.parametrize("analyse", [
    {"id": "analyse", "kind": "code", "owner": "tests", "run": {"command": [sys.executable, "-c", FIRST_ONLY]},
     "on_failure": "continue"},
    {"id": "analyse", "kind": "ai", "owner": "tests", "agent": {"type": "python", "callable": f"{STEPS}:verdict_once"}},
], ids=["command-fails-without-output", "agent-passes-without-verdict"])
def test_a_latest_attempt_without_a_result_leaves_the_step_without_one(
    engine: Engine, tmp_path: Path, analyse: dict[str, Any],
) -> None:
    """Attempt 1 records ``{"run": 1}``; after a loop-back, attempt 2 records nothing: the
    earlier result is gone from the state, and a reference to it fails the attempt."""
    wf = _workflow(analyse, _code("gate", "gate", on_failure={"loop_back": "analyse", "max_attempts": 2}),
                   _argv_step("use", "{results.analyse.run}"))
    tid = _run(engine, wf, tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "halted"
    assert [(a.step, a.number) for a in st.attempts if a.step == "analyse"] == [("analyse", 1), ("analyse", 2)]
    last = st.attempts[-1]
    assert (last.step, last.reason) == ("use", "missing_reference")
    assert "{results.analyse.run}: step 'analyse' has no result" in last.detail, last.detail
    assert "analyse" not in st.results
    assert verify_task(engine, tid) == []


CHECK = """
import json, os, sys
state = json.load(open(os.environ["STATEWRIGHT_STATE"]))
sys.exit(0 if sys.argv[1] == state["results"]["analyse"]["iban"] == "DE89370400440532013000" else 3)
"""


def test_a_wait_check_gets_state_and_references_and_its_last_check_is_its_result(
    engine: Engine, tmp_path: Path,
) -> None:
    wait = {"id": "ci", "kind": "wait", "owner": "tests", "every": "1m", "max_checks": 2,
            "check": {"command": [sys.executable, "-c", CHECK, "{results.analyse.iban}"]}}
    wf = _workflow(_code("analyse", "analyse"), wait, _argv_step("use", "{results.ci.passed}", "{results.ci.detail}"))
    tid = _run(engine, wf, tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results["ci"] == {"check": 1, "passed": True, "detail": "exit status 0"}
    assert st.results["use"] == {"argv": ["true", "exit status 0"]}
    assert verify_task(engine, tid) == []


def test_a_wait_check_with_a_missing_reference_fails_the_step_at_once(engine: Engine, tmp_path: Path) -> None:
    wait = {"id": "ci", "kind": "wait", "owner": "tests", "every": "1m", "max_checks": 5,
            "check": {"command": [sys.executable, "-c", "pass", "{input.run_id}"]}}
    tid = _run(engine, _workflow(wait), tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "halted"
    assert (st.attempts[-1].reason, st.attempts[-1].checks) == ("missing_reference", 1)
    assert "input has no field 'run_id'" in st.attempts[-1].detail
    assert sum(isinstance(e, CheckReported) for e in engine.events(tid)) == 1


class _Json(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def json_server() -> Iterator[tuple[str, type[_Json]]]:
    handler = type("Handler", (_Json,), {})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/status", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_an_http_check_keeps_its_json_body_in_the_result(
    engine: Engine, tmp_path: Path, json_server: tuple[str, type[_Json]],
) -> None:
    url, handler = json_server
    handler.body = json.dumps({"state": "green", "build": 7}).encode()
    wait = {"id": "ci", "kind": "wait", "owner": "tests", "every": "1m", "max_checks": 1,
            "check": {"http": url, "json_path": "$.state", "equals": "green"}}
    wf = _workflow(wait, _argv_step("use", "{results.ci.body.build}"))
    tid = _run(engine, wf, tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results["ci"]["body"] == {"state": "green", "build": 7}
    assert st.results["use"] == {"argv": ["7"]}


def test_an_http_body_over_the_result_limit_fails_the_wait_step(
    engine: Engine, tmp_path: Path, json_server: tuple[str, type[_Json]],
) -> None:
    url, handler = json_server
    handler.body = json.dumps({"state": "green", "log": "x" * 2000}).encode()
    wait = {"id": "ci", "kind": "wait", "owner": "tests", "every": "1m", "max_checks": 3,
            "result_limit": "1KiB", "check": {"http": url, "json_path": "$.state"}}
    tid = _run(engine, _workflow(wait), tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "halted"
    assert (st.attempts[-1].reason, st.attempts[-1].checks) == ("output_too_large", 1)
    assert st.results == {}


AGENT = """
import json, os, sys
state = json.load(open(os.environ["STATEWRIGHT_STATE"]))
verdict = {"arg": sys.argv[1], "from_state": state["results"]["analyse"]["iban"], "who": state["input"]["supplier"]}
json.dump(verdict, open(os.environ["STATEWRIGHT_VERDICT"], "w"))
"""
SAW = {"type": "object", "properties": {"arg": {"type": "string"}, "from_state": {"type": "string"},
                                        "who": {"type": "string"}}, "required": ["arg", "from_state", "who"]}


def test_a_command_agent_gets_state_and_references(engine: Engine, tmp_path: Path) -> None:
    agent = {"id": "judge", "kind": "ai", "owner": "tests", "output_schema": SAW,
             "agent": {"type": "command", "command": [sys.executable, "-c", AGENT, "{results.analyse.iban}"]}}
    tid = _run(engine, _workflow(_code("analyse", "analyse"), agent), tmp_path / "ws", supplier="S-9")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results["judge"] == {"arg": "DE89370400440532013000", "from_state": "DE89370400440532013000",
                                   "who": "S-9"}


def test_a_model_agent_reads_input_and_results_in_its_brief(engine: Engine, tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"supplier": {"type": "string"}, "iban": {"type": "string"}}}
    agent = {"id": "judge", "kind": "ai", "owner": "tests", "output_schema": schema,
             "agent": {"type": "python", "callable": f"{STEPS}:brief_agent"}}
    tid = _run(engine, _workflow(_code("analyse", "analyse"), agent), tmp_path / "ws", supplier="S-3")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results["judge"] == {"supplier": "S-3", "iban": "DE89370400440532013000"}


def test_an_ai_steps_verdict_is_its_result_without_an_output_schema(engine: Engine, tmp_path: Path) -> None:
    """A verdict given on a step without an output_schema is kept as the step's result, and
    later steps reference it."""
    agent = {"id": "judge", "kind": "ai", "owner": "tests",
             "agent": {"type": "python", "callable": f"{STEPS}:free_verdict"}}
    tid = _run(engine, _workflow(agent, _argv_step("use", "{results.judge.found}", "{results.judge.risk.0}")),
               tmp_path / "ws", supplier="S-4")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results["judge"] == {"found": "S-4", "risk": ["new account"]}
    assert st.attempts[0].verdict == st.results["judge"]
    assert st.results["use"] == {"argv": ["S-4", "new account"]}
    assert verify_task(engine, tid) == []


def test_a_command_agents_verdict_file_is_its_result_without_an_output_schema(engine: Engine, tmp_path: Path) -> None:
    write = "import json, os; json.dump({'seen': 3}, open(os.environ['STATEWRIGHT_VERDICT'], 'w'))"
    agent = {"id": "judge", "kind": "ai", "owner": "tests",
             "agent": {"type": "command", "command": [sys.executable, "-c", write]}}
    tid = _run(engine, _workflow(agent), tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results == {"judge": {"seen": 3}}


IBAN_SCHEMA = {"type": "object", "properties": {"iban": {"type": "string"}, "run": {"type": "integer"},
                                                "who": {"type": ["string", "null"]}},
               "required": ["iban"]}


@pytest.mark.parametrize(("fn", "detail"), [
    ("typed_wrong", "the output does not match the output_schema at iban: 5 is not of type 'string'"),
    ("nothing", "the step declares an output_schema but wrote no output (STATEWRIGHT_OUTPUT or 'output')"),
])
def test_code_output_is_held_to_its_output_schema(engine: Engine, tmp_path: Path, fn: str, detail: str) -> None:
    tid = _run(engine, _workflow(_code("analyse", fn, output_schema=IBAN_SCHEMA)), tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "halted"
    assert (st.attempts[-1].reason, st.attempts[-1].detail) == ("invalid_output", detail)
    assert st.results == {}
    assert verify_task(engine, tid) == []


def test_a_commands_output_file_is_held_to_its_output_schema(engine: Engine, tmp_path: Path) -> None:
    write = "import json, os; json.dump({'iban': 5}, open(os.environ['STATEWRIGHT_OUTPUT'], 'w'))"
    step = {"id": "analyse", "kind": "code", "owner": "tests", "output_schema": IBAN_SCHEMA,
            "run": {"command": [sys.executable, "-c", write]}}
    tid = _run(engine, _workflow(step), tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "halted"
    assert (st.attempts[-1].reason, st.attempts[-1].detail) == (
        "invalid_output", "the output does not match the output_schema at iban: 5 is not of type 'string'")
    assert st.results == {}


def test_code_output_that_matches_its_schema_is_recorded(engine: Engine, tmp_path: Path) -> None:
    tid = _run(engine, _workflow(_code("analyse", "analyse", output_schema=IBAN_SCHEMA)), tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert st.results["analyse"]["iban"] == "DE89370400440532013000"


BIG = "import os; open(os.environ['STATEWRIGHT_OUTPUT'], 'w').write('{\"x\": \"' + 'y' * 2000 + '\"}')"


@pytest.mark.parametrize("step", [
    {"id": "s", "kind": "code", "owner": "tests", "run": {"command": [sys.executable, "-c", BIG]}},
    _code("s", "huge_output"),
    {"id": "s", "kind": "ai", "owner": "tests", "output_schema": {"type": "object", "properties": {"text": {}}},
     "agent": {"type": "python", "callable": f"{STEPS}:big_verdict"}},
    {"id": "s", "kind": "ai", "owner": "tests", "agent": {"type": "python", "callable": f"{STEPS}:big_verdict"}},
], ids=["command", "callable", "verdict", "verdict-without-schema"])
def test_a_result_over_the_step_limit_fails_with_output_too_large(
    engine: Engine, tmp_path: Path, step: dict[str, Any],
) -> None:
    tid = _run(engine, _workflow({**step, "result_limit": "1KiB"}), tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "halted"
    assert st.attempts[-1].reason == "output_too_large", st.attempts[-1]
    assert st.results == {}


def test_a_larger_result_limit_lets_a_large_result_through(engine: Engine, tmp_path: Path) -> None:
    tid = _run(engine, _workflow(_code("s", "huge_output", result_limit="512KiB")), tmp_path / "ws")
    st = engine.state(tid)
    assert st.status.value == "completed", st.halt
    assert len(st.results["s"]["x"]) == 300_000


@pytest.mark.parametrize(("decision", "status", "reason"), [
    ("go", "completed", ""), ("stop", "halted", "outcome:stop"), ("redo", "halted", "outcome:redo"),
])
def test_a_code_steps_outcome_routes_the_task(
    engine: Engine, tmp_path: Path, decision: str, status: str, reason: str,
) -> None:
    """A code step with ``outcomes`` routes on its output's ``outcome``, as an ai verdict's does."""
    step = _code("decide", "decide", output_schema={"type": "object", "properties": {"outcome": {"type": "string"}}},
                 outcomes={"go": "pass", "stop": "halt", "redo": "fail"})
    tid = _run(engine, _workflow(step), tmp_path / "ws", decision=decision)
    st = engine.state(tid)
    assert (st.status.value, st.attempts[-1].reason) == (status, reason)
    assert st.results["decide"] == {"outcome": decision}
