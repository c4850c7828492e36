"""Good definitions load into the typed model; content hashes are stable; durations parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from statewright import WorkflowBuilder, load_workflow, workflow_from_dict, workflow_from_yaml
from statewright.definition import BUILTIN_SCHEMAS, OutcomeRoute, RetryPolicy, RouteKind, StepKind
from statewright.definition.durations import parse_duration_seconds

GOOD = """\
workflow: fix-bug
version: 2
description: Fix a reported bug
input_schema:
  type: object
  properties: {issue: {type: integer}}
  required: [issue]
steps:
  - id: implement
    kind: ai
    owner: dev-team
    instructions: Fix the bug.
    agent: {type: command, command: [python, examples/agents/fixer.py]}
    timeout: 20m
    protected: [tests/]
  - id: review
    kind: ai
    owner: review-team
    agent: {type: command, command: [python, examples/agents/reviewer.py]}
    output_schema: review
    on_failure: {loop_back: implement, max_attempts: 3}
  - id: triage
    kind: ai
    owner: review-team
    agent: {type: python, callable: "triage:decide"}
    output_schema:
      type: object
      properties:
        outcome: {type: string}
        summary: {type: string}
    outcomes: {ok: pass, retry: fail, stop: halt}
    on_failure: continue
  - id: approve
    kind: human
    owner: maintainers
    approvers: {role: maintainer}
    separate_from: [implement, review]
    expires_after: 2d
    on_failure: {loop_back: implement, max_attempts: 2}
  - id: ci
    kind: wait
    owner: dev-team
    check: {command: [gh, pr, checks]}
    every: 5m
    max_checks: 6
  - id: merge
    kind: code
    owner: dev-team
    run: {command: [gh, pr, merge]}
    on_success: complete
    retry: {max_attempts: 5, initial_backoff: 2s, max_backoff: 1m, multiplier: 3,
            jitter: false, non_retryable: [PermanentError]}
"""


def test_a_good_file_loads_into_the_typed_model(tmp_path: Path) -> None:
    path = tmp_path / "fix-bug.yaml"
    path.write_text(GOOD, encoding="utf-8")
    wf = load_workflow(path)
    assert (wf.name, wf.version, wf.description) == ("fix-bug", 2, "Fix a reported bug")
    assert wf.source == str(path)
    assert [(s.id, s.kind) for s in wf.steps] == [
        ("implement", StepKind.AI), ("review", StepKind.AI), ("triage", StepKind.AI),
        ("approve", StepKind.HUMAN), ("ci", StepKind.WAIT), ("merge", StepKind.CODE),
    ]
    implement, review, triage, approve, ci, merge = wf.steps
    assert implement.owner == "dev-team"
    assert implement.instructions == "Fix the bug."
    assert implement.agent == {"type": "command", "command": ["python", "examples/agents/fixer.py"]}
    assert implement.timeout_seconds == 1200.0
    assert implement.protected == ("tests/",)
    assert implement.on_failure.kind is RouteKind.HALT
    assert implement.on_success.kind is RouteKind.CONTINUE
    assert review.output_schema == BUILTIN_SCHEMAS["review"]
    assert review.on_failure.kind is RouteKind.LOOP_BACK
    assert (review.on_failure.target, review.on_failure.max_attempts) == ("implement", 3)
    assert triage.outcomes == {
        "ok": OutcomeRoute.PASS, "retry": OutcomeRoute.FAIL, "stop": OutcomeRoute.HALT
    }
    assert triage.on_failure.kind is RouteKind.CONTINUE
    assert approve.approvers_role == "maintainer"
    assert approve.separate_from == ("implement", "review")
    assert approve.expires_after_seconds == 2 * 86400.0
    assert (ci.every_seconds, ci.max_checks) == (300.0, 6)
    assert merge.on_success.kind is RouteKind.COMPLETE
    assert merge.retry == RetryPolicy(
        max_attempts=5, initial_backoff_seconds=2.0, max_backoff_seconds=60.0, multiplier=3.0,
        jitter=False, non_retryable=("PermanentError",),
    )
    assert wf.input_schema is not None
    assert wf.index_of("ci") == 4
    assert wf.step("ci") is ci
    assert "review(ai) [fail: loop_back->implement (max 3)]" in wf.describe()


def test_index_of_an_unknown_step_names_it() -> None:
    wf = workflow_from_yaml(GOOD)
    with pytest.raises(KeyError, match="has no step 'deploy'"):
        wf.index_of("deploy")


def test_object_output_schemas_are_closed_and_outcomes_pinned() -> None:
    triage = workflow_from_yaml(GOOD).step("triage")
    schema = triage.output_schema
    assert schema is not None
    assert schema["additionalProperties"] is False
    assert schema["properties"]["outcome"] == {"type": "string", "enum": ["ok", "retry", "stop"]}
    assert schema["required"] == ["outcome"]


def test_an_explicit_additional_properties_is_kept() -> None:
    wf = workflow_from_dict({
        "workflow": "w",
        "steps": [{
            "id": "a", "kind": "ai", "owner": "o", "agent": {"type": "python", "callable": "m:f"},
            "output_schema": {"type": "object", "additionalProperties": True},
        }],
    })
    assert wf.steps[0].output_schema == {"type": "object", "additionalProperties": True}


def test_defaults_apply_when_left_out() -> None:
    wf = workflow_from_dict({
        "workflow": "w",
        "steps": [{"id": "a", "kind": "code", "owner": "o", "run": {"command": ["true"]}}],
    })
    assert wf.version == 1
    assert wf.steps[0].retry == RetryPolicy()
    assert wf.steps[0].timeout_seconds is None


# --- content hash -----------------------------------------------------------------------


def test_the_content_hash_is_stable_across_loads_and_formatting() -> None:
    first = workflow_from_yaml(GOOD)
    again = workflow_from_yaml(GOOD)
    reformatted = workflow_from_yaml(GOOD.replace("{type: command, command: [gh, pr, checks]}",
                                                  "\n      type: command\n"
                                                  "      command: [gh, pr, checks]"))
    assert len(first.content_hash) == 64
    assert first.content_hash == again.content_hash == reformatted.content_hash


def test_the_content_hash_changes_when_the_definition_changes() -> None:
    original = workflow_from_yaml(GOOD).content_hash
    budget = workflow_from_yaml(GOOD.replace("max_attempts: 3", "max_attempts: 4")).content_hash
    words = workflow_from_yaml(GOOD.replace("Fix the bug.", "Fix the bug!")).content_hash
    assert len({original, budget, words}) == 3


def test_the_builder_hashes_like_the_equivalent_dict() -> None:
    agent = {"type": "command", "command": ["python", "fixer.py"]}
    built = (
        WorkflowBuilder("fix-bug", description="d")
        .ai("implement", owner="dev", agent=agent)
        .code("test", owner="dev", run={"command": ["pytest"]},
              on_failure={"loop_back": "implement", "max_attempts": 3})
        .human("approve", owner="m", approvers={"role": "maintainer"}, expires_after="1h")
        .wait("ci", owner="dev", check={"command": ["ci"]}, every="1m", max_checks=2)
        .build()
    )
    same = workflow_from_dict({
        "description": "d",
        "steps": [
            {"id": "implement", "kind": "ai", "owner": "dev", "agent": agent},
            {"id": "test", "kind": "code", "owner": "dev", "run": {"command": ["pytest"]},
             "on_failure": {"loop_back": "implement", "max_attempts": 3}},
            {"id": "approve", "kind": "human", "owner": "m", "approvers": {"role": "maintainer"},
             "expires_after": "1h"},
            {"id": "ci", "kind": "wait", "owner": "dev", "check": {"command": ["ci"]},
             "every": "1m", "max_checks": 2},
        ],
        "workflow": "fix-bug",
    })
    assert built.content_hash == same.content_hash
    assert built.steps == same.steps
    assert built.source == "<builder>"


def test_the_builder_runs_every_rule() -> None:
    builder = WorkflowBuilder("w").ai("a", owner="", agent={"type": "python", "callable": "m:f"})
    with pytest.raises(ValueError, match="<builder>: step 'a': 'owner' is required"):
        builder.build()


def test_leaving_out_version_hashes_like_version_1() -> None:
    steps = [{"id": "a", "kind": "code", "owner": "o", "run": {"command": ["true"]}}]
    implicit = workflow_from_dict({"workflow": "w", "steps": steps})
    explicit = workflow_from_dict({"workflow": "w", "version": 1, "steps": steps})
    second = workflow_from_dict({"workflow": "w", "version": 2, "steps": steps})
    assert implicit.content_hash == explicit.content_hash != second.content_hash


# --- durations -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("10m", 600.0), ("2h", 7200.0), ("2d", 172800.0), ("500ms", 0.5),
     ("1h30m", 5400.0), ("1m 30s", 90.0), ("1.5h", 5400.0), (45, 45.0), (2.5, 2.5), (0, 0.0)],
)
def test_durations_parse(text: object, seconds: float) -> None:
    assert parse_duration_seconds(text) == seconds


@pytest.mark.parametrize("bad", ["5 minutes", "", "10", "m", "10x", "-5s", True, None, [1], -1])
def test_bad_durations_say_what_is_accepted(bad: object) -> None:
    with pytest.raises(ValueError, match=r"duration|negative"):
        parse_duration_seconds(bad)


def test_backoff_grows_to_its_cap_and_jitter_stays_within_half() -> None:
    policy = RetryPolicy(initial_backoff_seconds=1, max_backoff_seconds=10, multiplier=2,
                         jitter=False)
    assert [policy.backoff_seconds(n, 0.0) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 8, 10]
    jittered = RetryPolicy(initial_backoff_seconds=4, jitter=True)
    assert jittered.backoff_seconds(1, 0.0) == 2.0
    assert 3.9 < jittered.backoff_seconds(1, 0.999) < 4.0
