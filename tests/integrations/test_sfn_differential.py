"""The exported state machine, run by moto's Step Functions interpreter, against
statewright's own reducer, on the same scripted outcomes: the steps executed, in order, the
terminal outcome (completed, completed early, halted with its reason and step) and a
completed run's results match, for every route of every example and for generated
workflows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from statewright.definition import load_workflow
from statewright.definition.model import OutcomeRoute, Step, StepKind, Workflow
from strategies import ANALYSIS_OUTCOMES, ANALYSIS_SCHEMA, FIXER, PYTEST, load_cached

from .sfn_harness import Script, StepFunctions, definition, reducer_results, run_reducer, run_sfn, sfn_results

_ROOT = Path(__file__).resolve().parents[2] / "examples"
# every workflow file among the examples (a loop's or a schedule's file is not one), map steps
# included (their children's routes: test_sfn_map.py)
EXAMPLES = sorted(p for p in _ROOT.rglob("*.yaml")
                  if any(line.startswith("workflow: ") for line in p.read_text(encoding="utf-8").splitlines()))
INPUTS: dict[str, dict[str, Any]] = {
    "bug-triage": {"repo": "acme/app", "issue": 7, "title": "crash on save"},
    "expense-approval": {"month": "2026-11", "region": "eu"},
    "fix-bug": {"bug": "test_save fails"},
    "supplier-bank-change": {"supplier_id": "S-1", "account_fingerprint": "fp", "evidence": []},
    "github-review": {"repo": "octo-org/widgets", "number": 12, "title": "Add a flag", "body": "as titled"},
    "openai-triage": {"title": "crash on save", "body": "the app crashes when saving", "reporter": "carol"},
    "review-files": {"dir": "examples"},
    "review-one-file": {"item": "examples/file_review.py", "index": 0},
}


def test_inputs_cover_every_example_workflow() -> None:
    names = {load_workflow(p).name for p in EXAMPLES}
    assert names == set(INPUTS)
    assert {p.name for p in EXAMPLES} >= {"review.yaml", "triage.yaml", "bug-triage.yaml", "review-files.yaml"}


# States no scripted answer reaches: a clock's (an approval window, a silent worker:
# test_sfn_timing.py), retries running out (test_sfn_worker.py; moto retries a task with the
# outcome of the try before) and an answer statewright refuses (a rejection without a reason
# code, test_sfn_worker.py).
NOT_SCRIPTED = (": retries spent", ": worker lost", ": expired", ": expiry", ": not approved")


def unanswered(wf: Workflow) -> set[str]:
    """States no answer of the sfn worker reaches: a step with an output_schema passes only
    with a verdict or result (and a failure that keeps none is answered as an error)."""
    key = {StepKind.AI: "verdict", StepKind.CODE: "result"}
    return {f"{s.id}: without {key[s.kind]}" for s in wf.steps if s.kind in key and s.output_schema is not None}
GENERATED = 25


def answers(wf: Workflow, step: Step) -> list[str]:
    """Every answer but the plain pass that the step can be given (a map step's are its
    children's: test_sfn_map.py)."""
    if step.kind is StepKind.MAP:
        return []
    if step.kind is StepKind.HUMAN:
        return ["reject"]
    gated = any(s.kind is StepKind.HUMAN for s in wf.steps[: wf.index_of(step.id)])
    if step.kind is StepKind.WAIT:
        return ["1", "exhaust", "error"] + (["void"] if gated else [])
    out = ["fail", "fail-bare"] + (["void"] if gated else [])
    if step.kind is StepKind.CODE or step.output_schema is None:
        out.append("bare")
    props = (step.output_schema or {}).get("properties", {})
    if step.kind is StepKind.AI and "approved" in props:
        out.append("reject")
    routes = set(step.outcomes.values())
    out += [f"outcome-{r.value}" for r in (OutcomeRoute.FAIL, OutcomeRoute.HALT) if r in routes]
    if step.on_conflict is not None:
        out.append("conflict")
    return out


def passing(step: Step) -> str:
    return {StepKind.HUMAN: "approve", StepKind.WAIT: "0"}.get(step.kind, "pass")


def route_scripts(wf: Workflow, task_input: dict[str, Any]) -> Iterator[Script]:
    """Every step passing; then, for each step and each other answer it can give, that
    answer at every attempt of the step (a loop-back runs until its budget is spent), on a
    script that reaches the step (every step passing, or all but one earlier step, as
    statewright's run shows)."""
    everyone = {s.id: (passing(s),) for s in wf.steps}
    bases = [everyone] + [{**everyone, s.id: (a,)} for s in wf.steps for a in answers(wf, s)]
    yield everyone
    for s in wf.steps:
        if not answers(wf, s):
            continue
        base = next(b for b in bases if any(t[0] == s.id for t in run_reducer(wf, b, task_input)[0]))
        for a in answers(wf, s):
            yield {**base, s.id: (a,)}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(_ROOT)))
def test_every_route_of_an_example_runs_alike_on_step_functions(aws: StepFunctions, path: Path) -> None:
    """Each scripted run of the example ends alike on both engines, and together the runs
    enter every state of the exported machine (but those no scripted answer reaches)."""
    wf = load_workflow(path)
    asl = definition(wf, aws.tasks)
    entered: set[str] = set()
    runs = [(script, INPUTS[wf.name]) for script in route_scripts(wf, INPUTS[wf.name])]
    if wf.name == "fix-bug":  # its proposal names an input field that the input schema does not require
        runs.append(({s.id: (passing(s),) for s in wf.steps}, {}))
    for script, task_input in runs:
        trace, end, execution = run_sfn(aws, wf, script, task_input, asl)
        assert (trace, end) == run_reducer(wf, script, task_input), script
        assert sfn_results(aws, wf, execution) in (None, reducer_results(wf, script, task_input)), script
        entered |= aws.entered(execution)
    maps = tuple(f"{s.id}: " for s in wf.steps if s.kind is StepKind.MAP)  # their routes: test_sfn_map.py
    missed = {name for name in asl["States"] if name not in entered and not name.endswith(NOT_SCRIPTED)
              and not name.startswith(maps)} - unanswered(wf)
    if wf.name != "fix-bug":  # every reference there is to a field a schema requires
        missed = {name for name in missed if not name.endswith(": missing reference")}
    assert missed == set()


AGAIN = {"loop_back": "a", "max_attempts": 2}
GATE = {"id": "gate", "kind": "code", "owner": "team", "run": PYTEST, "on_failure": AGAIN}


@pytest.mark.parametrize(("a", "answers_of_a"), [
    ({"kind": "code", "run": PYTEST}, ("pass", "fail-bare")),
    ({"kind": "code", "run": PYTEST}, ("pass", "bare")),
    ({"kind": "ai", "agent": FIXER}, ("pass", "fail-bare")),
    ({"kind": "ai", "agent": FIXER}, ("pass", "bare")),
    ({"kind": "wait", "check": {"command": ["true"]}, "every": "1m", "max_checks": 2}, ("0", "error")),
], ids=["code-fails", "code-passes", "ai-fails", "ai-passes", "wait-errs"])
def test_a_result_the_latest_attempt_did_not_record_is_gone_on_both(
    aws: StepFunctions, a: dict[str, Any], answers_of_a: tuple[str, ...],
) -> None:
    """Attempt 1 of ``a`` records a result; after a loop-back, attempt 2 records none (and
    the task goes on): neither engine keeps the earlier result."""
    wf = load_cached({"workflow": "again", "steps": [
        {"id": "a", "owner": "team", "on_failure": "continue", **a}, GATE]}, "<again>")
    script = {"a": answers_of_a, "gate": ("fail", "pass")}
    trace, end, execution = run_sfn(aws, wf, script, {})
    assert (trace, end) == run_reducer(wf, script, {}) == (trace, ("completed",))
    assert [t[:3] for t in trace if t[0] == "a"][-1][2] == 2
    results = reducer_results(wf, script, {})
    assert "a" not in results and "gate" in results
    assert sfn_results(aws, wf, execution) == results


@pytest.mark.parametrize("ref", ["results.a", "results.a.exit"])
def test_a_proposal_reference_to_a_cleared_result_is_missing_on_both(aws: StepFunctions, ref: str) -> None:
    """A human step's proposal names a result that the latest attempt did not record (null
    on Step Functions): on both engines the step fails with ``missing_reference``."""
    wf = load_cached({"workflow": "again", "steps": [
        {"id": "a", "kind": "code", "owner": "team", "run": PYTEST, "on_failure": "continue"}, GATE,
        {"id": "approve", "kind": "human", "owner": "team", "approvers": {"role": "maintainer"}, "proposal": [ref]},
    ]}, "<again>")
    script = {"a": ("pass", "fail-bare"), "gate": ("fail", "pass"), "approve": ("approve",)}
    trace, end, _ = run_sfn(aws, wf, script, {})
    assert (trace, end) == run_reducer(wf, script, {}) == (trace, ("halted", "missing_reference", "approve"))


# --- generated workflows ----------------------------------------------------------------


@st.composite
def cases(draw: st.DrawFn) -> tuple[Workflow, Script]:
    """A valid workflow of 1-4 steps (every kind, route, outcome map and conflict route in
    play) and scripted answers for each step's attempts."""
    n = draw(st.integers(1, 4))
    steps: list[dict[str, Any]] = []
    for i in range(n):
        kind = draw(st.sampled_from(["ai", "code", "wait", "human"]))
        step: dict[str, Any] = {"id": f"s{i}-{kind}", "kind": kind, "owner": "team"}
        if kind == "ai":
            step["agent"] = FIXER
            schema = draw(st.sampled_from(["none", "review", "analysis"]))
            if schema == "review":
                step["output_schema"] = "review"
            elif schema == "analysis":
                step.update(output_schema=dict(ANALYSIS_SCHEMA), outcomes=dict(ANALYSIS_OUTCOMES))
        elif kind == "code":
            step["run"] = PYTEST
            gates = [j for j, other in enumerate(steps) if other["kind"] == "human"]
            if i > 0 and draw(st.booleans()):  # back to the last approval before it, or earlier
                last = gates[-1] if gates else i - 1
                step["on_conflict"] = {"loop_back": steps[draw(st.integers(0, last))]["id"],
                                       "max_attempts": draw(st.integers(1, 3))}
        elif kind == "wait":
            step.update(check={"command": ["true"]}, every="1m", max_checks=draw(st.integers(1, 3)))
        else:
            step["approvers"] = {"role": "maintainer"}
            if draw(st.booleans()):
                step["artifacts"] = ["diff"]
        routes = ["halt"] + (["continue"] if kind != "human" and i < n - 1 else []) + (["loop_back"] if i > 0 else [])
        route = draw(st.sampled_from(routes))
        if route == "loop_back":
            step["on_failure"] = {"loop_back": steps[draw(st.integers(0, i - 1))]["id"],
                                  "max_attempts": draw(st.integers(1, 3))}
        elif route == "continue":
            step["on_failure"] = "continue"
        if draw(st.integers(0, 3)) == 0:
            step["on_success"] = "complete"
        steps.append(step)
    wf = load_cached({"workflow": "generated", "steps": steps}, "<generated>")
    script = {
        s.id: tuple(draw(st.lists(st.sampled_from([passing(s), passing(s), *answers(wf, s)]), min_size=1, max_size=3)))
        for s in wf.steps
    }
    return wf, script


def test_generated_workflows_run_alike_on_step_functions(aws: StepFunctions) -> None:
    """For generated workflows and scripts, both engines execute the same steps in the same
    order and end alike; the number compared is printed."""
    compared: list[int] = []

    @settings(max_examples=GENERATED, deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow])
    @given(cases())
    def compare(case: tuple[Workflow, Script]) -> None:
        wf, script = case
        trace, end, execution = run_sfn(aws, wf, script, {})
        assert (trace, end) == run_reducer(wf, script, {})
        assert sfn_results(aws, wf, execution) in (None, reducer_results(wf, script, {}))
        compared.append(len(trace))

    compare()
    print(f"compared {len(compared)} generated workflows ({sum(compared)} steps executed on each engine)")
    assert len(compared) == GENERATED
