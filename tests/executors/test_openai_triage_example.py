"""examples/openai-triage: the workflow loads, its specs pass the executors' checks, and it
runs end to end on the engine against the fake OpenAI-compatible server."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakes.openai_server import FakeOpenAIServer, tool_call_reply
from statewright import Engine, load_workflow, run_task, workflow_from_dict
from statewright.executors import validate_agent_spec, validate_code_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai-triage" / "triage.yaml"
REPORT = {"title": "Crash on save", "body": "Saving a file named 'é.txt' crashes v2.3."}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


def pointed_at(server: FakeOpenAIServer) -> dict[str, Any]:
    raw = yaml.safe_load(EXAMPLE.read_text())
    out = copy.deepcopy(raw)
    for step in out["steps"]:
        if step.get("agent", {}).get("type") == "openai":
            step["agent"]["base_url"] = server.base_url
    return out


def test_the_example_loads_and_its_specs_are_valid() -> None:
    """The workflow validates, and every ai step talks to an OpenAI-compatible server."""
    workflow = load_workflow(EXAMPLE)
    ai_steps = [s for s in workflow.steps if s.agent]
    assert [s.id for s in ai_steps] == ["classify", "draft-reply"]
    for step in ai_steps:
        assert step.agent is not None
        assert step.agent["type"] == "openai"
        assert validate_agent_spec(step.agent) == []
    for step in workflow.steps:
        if step.run:
            assert validate_code_spec(step.run) == []


def test_a_valid_report_completes_early(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """classify says valid through submit_verdict: the task completes at that step."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-unused")
    server.script(tool_call_reply({"outcome": "valid", "summary": "crash on save",
                                   "labels": ["bug", "crash"]}, content="Reproducible."))
    engine = Engine.open(tmp_path / "state.db", workspace_root=tmp_path / "workspaces")
    try:
        workflow = workflow_from_dict(pointed_at(server), str(EXAMPLE))
        st = run_task(engine, engine.submit(workflow, REPORT))
    finally:
        engine.close()
    assert st.status == "completed_early"
    (attempt,) = st.attempts
    assert attempt.verdict == {"outcome": "valid", "summary": "crash on save",
                               "labels": ["bug", "crash"]}
    (request,) = server.requests
    assert request.headers["authorization"] == "Bearer sk-local-unused"
    assert "Decide whether it describes a real" in request.body["messages"][0]["content"]


def test_an_invalid_report_flows_on_to_the_triager(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """classify says invalid: a reply is drafted and the task parks for the triager."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-unused")
    server.script(
        tool_call_reply({"outcome": "invalid", "summary": "no steps to reproduce"}),
        tool_call_reply({"reply": "Thanks! Which editor version and OS?"}),
    )
    engine = Engine.open(tmp_path / "state.db", workspace_root=tmp_path / "workspaces")
    try:
        workflow = workflow_from_dict(pointed_at(server), str(EXAMPLE))
        st = run_task(engine, engine.submit(workflow, REPORT))
    finally:
        engine.close()
    assert st.status == "awaiting_approval"
    assert [a.step for a in st.attempts] == ["classify", "draft-reply"]
    assert st.attempts[1].verdict == {"reply": "Thanks! Which editor version and OS?"}
    assert len(server.requests) == 2
    brief = json.loads(server.requests[1].body["messages"][1]["content"])  # the model reads the task's state
    assert brief["input"] == REPORT
    assert brief["results"]["classify"] == {"outcome": "invalid", "summary": "no steps to reproduce"}
