"""Mermaid and Amazon States Language exports of the example workflows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statewright._errors import InputError
from statewright.definition import load_workflow, workflow_from_dict
from statewright.export import to_asl, to_mermaid
from statewright.export.asl import Queues

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
#: ASL has no map steps yet (to_asl refuses them, tested below).
ASL_EXAMPLES = [p for p in EXAMPLES if all(s.map is None for s in load_workflow(p).steps)]


@pytest.mark.parametrize("path", ASL_EXAMPLES, ids=lambda p: p.name)
def test_asl_is_closed_and_reachable(path: Path) -> None:
    """Every Next/Default/Catch target names a state, and every state is reachable from StartAt."""
    asl = json.loads(json.dumps(to_asl(load_workflow(path), Queues(default="https://sqs.example/q"))))
    states = asl["States"]
    edges: dict[str, set[str]] = {}
    for name, st in states.items():
        targets = {st.get("Next"), st.get("Default")} | {c["Next"] for c in st.get("Catch", [])}
        targets |= {c["Next"] for c in st.get("Choices", [])}
        edges[name] = {t for t in targets if t}
        assert edges[name] <= set(states), (name, edges[name] - set(states))
    seen, todo = set(), [asl["StartAt"]]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(edges[n])
    assert seen == set(states)


def test_mermaid_draws_steps_loop_backs_and_the_current_step() -> None:
    """The fix-bug chart names each step, draws its loop-backs dashed, and marks the current step."""
    wf = load_workflow(Path(__file__).resolve().parents[2] / "examples" / "fix-bug.yaml")
    text = to_mermaid(wf, current="review")
    assert text.startswith("flowchart TD")
    for s in wf.steps:
        assert f"{s.id}<br/>" in text
    assert "s1 -.->|fail, max 3| s0" in text and "s2 -.->|fail, max 3| s0" in text
    assert "s5 -->|ok: complete| done" in text
    assert "class s2 current" in text


MAPPED = workflow_from_dict({"workflow": "many", "steps": [
    {"id": "plan", "kind": "code", "owner": "t", "run": {"command": ["plan"]}},
    {"id": "each", "kind": "map", "owner": "t", "workflow": "review-one", "items": "results.plan.files",
     "max_concurrency": 8},
]})


def test_mermaid_draws_a_map_step_with_its_child_tasks() -> None:
    """The map step names what it maps over, the child workflow and its bound, and points at its children."""
    text = to_mermaid(MAPPED, current="each")
    assert 's1[/"each<br/><small>map · t</small><br/><small>each of results.plan.files → review-one, 8 at once' in text
    assert 's1c[["review-one: one task per item"]]' in text and "s1 -. child tasks .-> s1c" in text
    assert "s1 -->|ok| done" in text and "class s1 current" in text


def test_asl_refuses_a_map_step_whose_workflow_is_found_by_name_in_one_line() -> None:
    """The export holds the child workflow's states: it needs the file, not a name looked up later."""
    with pytest.raises(InputError) as err:
        to_asl(MAPPED, Queues(default="https://sqs.example/q"))
    assert str(err.value).startswith("step 'each': its workflow 'review-one' is found by name when a task starts")
    assert "\n" not in str(err.value)
