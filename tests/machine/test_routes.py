"""Failure and success routes, verdict outcomes, and typed verdicts that fail closed."""

from __future__ import annotations

from typing import Any

import pytest

from statewright import TaskStatus, workflow_from_dict
from statewright.definition import Workflow
from statewright.machine.commands import RunStep
from statewright.machine.state import Outcome
from strategies import ANALYSIS_OUTCOMES, ANALYSIS_SCHEMA, FIXER, Driver, fix_bug

RUN = {"command": ["true"]}


def wf(*steps: dict[str, Any]) -> Workflow:
    return workflow_from_dict({"workflow": "w", "steps": list(steps)})


def ai(sid: str, **fields: Any) -> dict[str, Any]:
    return {"id": sid, "kind": "ai", "owner": "team", "agent": FIXER, **fields}


def code(sid: str, **fields: Any) -> dict[str, Any]:
    return {"id": sid, "kind": "code", "owner": "team", "run": RUN, **fields}


def trail(d: Driver) -> list[tuple[str, int, str, str]]:
    return [(a.step, a.number, a.outcome.value, a.route) for a in d.state.attempts]


# --- halt, continue, complete ---------------------------------------------------------


def test_a_failure_halts_by_default() -> None:
    d = Driver(wf(ai("a"), code("b")))
    d.submit()
    commands = d.report(ok=False, error="timeout", detail="no answer in 20m")
    assert commands == []
    assert d.state.status is TaskStatus.HALTED
    assert d.state.halt is not None
    assert (d.state.halt.step, d.state.halt.reason) == ("a", "timeout")
    assert d.state.halt.detail == "no answer in 20m"
    assert trail(d) == [("a", 1, "failed", "halt")]
    assert d.state.current is None


def test_an_advisory_failure_continues_to_the_next_step() -> None:
    d = Driver(wf(ai("enrich", on_failure="continue"), code("close")))
    d.submit()
    commands = d.report(ok=False, error="exit_status")
    assert [(c.type, c.step) for c in commands] == [("RunStep", "close")]
    d.report(actor="code:close")
    assert d.state.status is TaskStatus.COMPLETED
    assert trail(d) == [
        ("enrich", 1, "failed", "continue (advisory)"),
        ("close", 1, "passed", "continue"),
    ]


def test_a_complete_route_ends_the_task_early_and_skips_the_rest() -> None:
    d = Driver(wf(ai("decide", on_success="complete", on_failure="continue"), code("close")))
    d.submit()
    assert d.report(verdict=None) == []
    assert d.state.status is TaskStatus.COMPLETED_EARLY
    assert trail(d) == [("decide", 1, "passed", "complete")]
    assert d.state.attempts_of("close") == []


def test_the_failure_branch_of_a_decision_step_carries_on() -> None:
    d = Driver(wf(ai("decide", on_success="complete", on_failure="continue"), code("close")))
    d.submit()
    d.report(ok=False, error="exit_status")
    d.report()
    assert d.state.status is TaskStatus.COMPLETED
    assert [a.step for a in d.state.attempts] == ["decide", "close"]


def test_complete_on_the_last_step_is_a_plain_completion() -> None:
    d = Driver(wf(ai("a"), code("b", on_success="complete")))
    d.submit()
    d.report()
    d.report()
    assert d.state.status is TaskStatus.COMPLETED


# --- loop back on a budget -------------------------------------------------------------


@pytest.mark.parametrize("budget", [1, 2, 3, 4])
def test_a_loop_runs_the_looping_step_at_most_max_attempts_then_halts(budget: int) -> None:
    loop = {"loop_back": "implement", "max_attempts": budget}
    d = Driver(wf(ai("implement"), ai("review", output_schema="review", on_failure=loop)))
    d.submit()
    for n in range(1, budget + 1):
        assert d.state.current is not None
        assert (d.state.current.step, d.state.current.attempt) == ("implement", n)
        d.report(artifacts={"diff": f"sha:{n}"})
        commands = d.report(verdict={"approved": False, "must_fix": [f"fix {n}"]})
        if n < budget:
            assert [(c.type, c.step, c.attempt) for c in commands] == [
                ("RunStep", "implement", n + 1)
            ]
    assert commands == []
    assert d.state.status is TaskStatus.HALTED
    assert d.state.halt is not None
    assert d.state.halt.step == "review"
    assert d.state.halt.reason == "loop_budget_exhausted"
    assert d.state.halt.detail == (
        f"review failed {budget} of {budget} attempts; last reason: not_approved"
    )
    assert len(d.state.attempts_of("review")) == budget
    assert len(d.state.attempts_of("implement")) == budget
    assert d.state.attempts[-1].route == "halt (loop budget exhausted)"
    assert [lb.failed_attempt for lb in d.state.loop_backs] == list(range(1, budget))


def test_one_loop_does_not_spend_another_steps_budget() -> None:
    """Review rejects twice; the test step's first failure still loops instead of halting."""
    d = Driver(fix_bug())
    d.submit()
    for _ in range(2):
        d.report()  # implement
        d.report()  # test passes
        d.report(verdict={"approved": False, "must_fix": ["rename"]})  # review rejects
    d.report()  # implement 3
    commands = d.report(ok=False, error="exit_status", output="1 failed")  # test attempt 3
    assert d.state.status is TaskStatus.RUNNING
    assert [(c.step, c.attempt) for c in commands] == [("implement", 4)]
    for n in (4, 5):  # the test step's second and third failures
        d.report()
        d.report(ok=False, error="exit_status")
        assert len(d.state.attempts_of("implement")) == n
    assert d.state.status is TaskStatus.HALTED
    assert d.state.halt is not None
    assert (d.state.halt.step, d.state.halt.reason) == ("test", "loop_budget_exhausted")
    assert d.state.halt.detail == "test failed 3 of 3 attempts; last reason: exit_status"


def test_a_loop_back_records_the_memory_the_next_brief_carries() -> None:
    loop = {"loop_back": "implement", "max_attempts": 3}
    d = Driver(wf(ai("implement"), code("test", on_failure=loop)))
    d.submit()
    d.report()
    d.report(ok=False, error="exit_status", output="E   assert 1 == 2")
    (lb,) = d.state.loop_backs
    assert (lb.target, lb.target_attempt, lb.failed_step, lb.failed_attempt) == (
        "implement", 1, "test", 1
    )
    assert (lb.reason, lb.must_fix, lb.output) == ("exit_status", (), "E   assert 1 == 2")


# --- verdicts -----------------------------------------------------------------------------


def supplier() -> Workflow:
    return wf(
        code("collect"),
        ai("analyse", output_schema=dict(ANALYSIS_SCHEMA), outcomes=dict(ANALYSIS_OUTCOMES),
           on_failure={"loop_back": "collect", "max_attempts": 3}),
        code("execute"),
    )


def at_analysis() -> Driver:
    d = Driver(supplier())
    d.submit()
    d.report(actor="code:collect")
    return d


def test_an_outcome_mapped_to_pass_advances() -> None:
    d = at_analysis()
    commands = d.report(verdict={"outcome": "sufficient", "summary": "all documents agree"})
    assert [(c.step, c.attempt) for c in commands] == [("execute", 1)]
    assert d.state.attempts[-1].outcome is Outcome.PASSED


def test_an_outcome_mapped_to_fail_takes_the_failure_route() -> None:
    d = at_analysis()
    verdict = {"outcome": "needs_clarification", "summary": "callback missing",
               "missingEvidence": ["independent contact confirmation"]}
    commands = d.report(verdict=verdict)
    assert [(c.step, c.attempt) for c in commands] == [("collect", 2)]
    last = d.state.attempts[-1]
    assert (last.outcome, last.reason, last.detail) == (
        Outcome.FAILED, "outcome:needs_clarification", "callback missing"
    )
    assert last.verdict == verdict


def test_an_outcome_mapped_to_halt_stops_whatever_budget_is_left() -> None:
    d = at_analysis()
    commands = d.report(verdict={"outcome": "suspected_fraud", "summary": "origin mismatch"})
    assert commands == []
    assert d.state.status is TaskStatus.HALTED
    assert d.state.halt is not None
    assert (d.state.halt.step, d.state.halt.reason) == ("analyse", "outcome:suspected_fraud")
    assert d.state.attempts[-1].outcome is Outcome.HALTED
    assert d.state.attempts[-1].route == "halt (policy)"
    assert d.state.loop_backs == ()


def test_approved_false_is_a_step_failure() -> None:
    d = Driver(wf(ai("implement"), ai("review", output_schema="review")))
    d.submit()
    d.report()
    d.report(verdict={"approved": False, "must_fix": ["add a test", "handle None"]})
    last = d.state.attempts[-1]
    assert (last.outcome, last.reason, last.detail) == (
        Outcome.FAILED, "not_approved", "add a test; handle None"
    )
    assert d.state.status is TaskStatus.HALTED


def test_approved_true_passes() -> None:
    d = Driver(wf(ai("review", output_schema="review")))
    d.submit()
    d.report(verdict={"approved": True, "summary": "fine"})
    assert d.state.status is TaskStatus.COMPLETED


def review_only() -> Driver:
    d = Driver(wf(ai("review", output_schema="review"), code("merge")))
    d.submit()
    return d


@pytest.mark.parametrize(
    "bad",
    [
        {"approved": "yes"},
        {"approved": True, "confidence": 0.9},  # an unknown field fails closed
        {"must_fix": []},
        None,
        ["approved"],
    ],
    ids=["wrong type", "unknown field", "missing field", "no verdict", "not an object"],
)
def test_a_schema_invalid_verdict_gets_one_repair_then_fails(bad: Any) -> None:
    d = review_only()
    first_id = d.state.current.command_id if d.state.current else ""
    (repair,) = d.report(verdict=bad)
    assert isinstance(repair, RunStep)
    assert (repair.step, repair.attempt) == ("review", 1)
    assert repair.command_id == f"{first_id}/repair"
    assert repair.repair_error
    assert repair.brief["repair"]["error"] == repair.repair_error
    assert d.state.status is TaskStatus.RUNNING
    assert d.state.attempts == ()  # the repair is part of the same attempt
    assert d.report(verdict=bad) == []
    assert d.state.status is TaskStatus.HALTED
    (attempt,) = d.state.attempts
    assert (attempt.number, attempt.outcome, attempt.reason) == (1, Outcome.FAILED,
                                                                 "invalid_verdict")
    assert attempt.verdict is None


def test_a_repaired_verdict_that_is_valid_passes_as_the_same_attempt() -> None:
    d = review_only()
    d.report(verdict={"approved": True, "extra": 1})
    commands = d.report(verdict={"approved": True})
    assert [(c.step, c.attempt) for c in commands] == [("merge", 1)]
    (attempt,) = d.state.attempts
    assert (attempt.number, attempt.outcome, attempt.verdict) == (
        1, Outcome.PASSED, {"approved": True}
    )


def test_an_executor_reported_invalid_verdict_is_repaired_once() -> None:
    d = review_only()
    (repair,) = d.report(ok=False, error="invalid_verdict", detail="approved: not a boolean")
    assert repair.repair_error == "approved: not a boolean"
    d.report(ok=False, error="invalid_verdict", detail="still wrong")
    assert (d.state.attempts[-1].reason, d.state.attempts[-1].detail) == (
        "invalid_verdict", "still wrong"
    )
    assert d.state.status is TaskStatus.HALTED


def test_an_unknown_outcome_fails_closed() -> None:
    d = at_analysis()
    (repair,) = d.report(verdict={"outcome": "probably_fine", "summary": "?"})
    assert repair.repair_error is not None
    assert "probably_fine" in repair.repair_error
    d.report(verdict={"outcome": "probably_fine", "summary": "?"})
    assert d.state.attempts[-1].reason == "invalid_verdict"
    assert d.state.attempts[-1].outcome is Outcome.FAILED


def test_a_failed_report_fails_even_with_an_approving_verdict() -> None:
    d = review_only()
    d.report(ok=False, error="exit_status", verdict={"approved": True})
    assert d.state.attempts[-1].outcome is Outcome.FAILED
    assert d.state.attempts[-1].reason == "exit_status"


@pytest.mark.parametrize("note", ["approved", "APPROVED: all good", '{"approved": true}'])
def test_the_note_is_never_read_as_a_verdict(note: str) -> None:
    d = review_only()
    d.report(verdict={"approved": False, "must_fix": ["rename"]}, note=note)
    attempt = d.state.attempts[-1]
    assert attempt.outcome is Outcome.FAILED
    assert attempt.note == note
    assert d.state.status is TaskStatus.HALTED


def test_a_note_is_no_substitute_for_a_missing_verdict() -> None:
    d = review_only()
    (repair,) = d.report(verdict=None, note="approved")
    assert repair.repair_error is not None
    d.report(verdict=None, note="approved, really")
    assert d.state.attempts[-1].reason == "invalid_verdict"


def test_a_verdict_that_is_not_an_object_is_invalid_even_without_a_schema() -> None:
    """Found by the property tests: a list verdict crashed the reducer with AttributeError."""
    d = Driver(wf(code("build"), code("ship")))
    d.submit()
    (repair,) = d.report(verdict=["approved"])
    assert repair.repair_error == "the verdict must be a JSON object, got list"
    d.report(verdict=["approved"])
    assert (d.state.attempts[-1].reason, d.state.status) == ("invalid_verdict",
                                                             TaskStatus.HALTED)


def test_a_failed_report_keeps_only_an_object_verdict() -> None:
    d = Driver(wf(code("build"), code("ship")))
    d.submit()
    d.report(ok=False, error="exit_status", verdict=["x"])
    assert (d.state.attempts[-1].reason, d.state.attempts[-1].verdict) == ("exit_status", None)
