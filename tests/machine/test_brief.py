"""A loop-back attempt's brief carries every prior attempt of that loop and why it failed."""

from __future__ import annotations

from statewright import workflow_from_dict
from statewright.definition import BUILTIN_SCHEMAS
from statewright.machine.brief import OUTPUT_CUT_CHARS, cut_output
from statewright.machine.commands import RunStep
from strategies import FIXER, REVIEWER, Driver

LOOP = {"loop_back": "implement", "max_attempts": 3}
WORKFLOW = workflow_from_dict({
    "workflow": "fix",
    "steps": [
        {"id": "implement", "kind": "ai", "owner": "dev", "agent": FIXER,
         "instructions": "Fix the bug described in the input."},
        {"id": "test", "kind": "code", "owner": "dev", "run": {"command": ["pytest"]},
         "on_failure": LOOP},
        {"id": "review", "kind": "ai", "owner": "reviewers", "agent": REVIEWER,
         "output_schema": "review", "on_failure": LOOP},
    ],
})
PYTEST_FAILURE = (
    "FAILED tests/test_parse.py::test_empty_file - ValueError: empty input\n1 failed, 12 passed"
)


def third_implement_brief() -> tuple[Driver, RunStep]:
    d = Driver(WORKFLOW)
    d.submit({"issue": 42})
    d.report(actor="agent:fixer", artifacts={"diff": "sha:1"})
    d.report(actor="code:pytest", ok=False, error="exit_status", output=PYTEST_FAILURE)
    d.report(actor="agent:fixer", artifacts={"diff": "sha:2"})
    d.report(actor="code:pytest", output="13 passed")
    (command,) = d.report(
        actor="agent:reviewer",
        verdict={"approved": False, "must_fix": ["handle a file with only a BOM",
                                                 "add a regression test"],
                 "summary": "close, but not yet"},
        note="I think this is approved overall",
    )
    assert isinstance(command, RunStep)
    return d, command


def test_attempt_3_brief_quotes_attempts_1_and_2_golden() -> None:
    _, command = third_implement_brief()
    assert (command.step, command.attempt, command.kind) == ("implement", 3, "ai")
    assert command.brief == {
        "task_id": "t1",
        "workflow": "fix",
        "workflow_version": 1,
        "step": "implement",
        "owner": "dev",
        "attempt": 3,
        "instructions": "Fix the bug described in the input.",
        "input": {"issue": 42},
        "results": {"review": {"approved": False,
                               "must_fix": ["handle a file with only a BOM", "add a regression test"],
                               "summary": "close, but not yet"}},
        "earlier_steps": {},
        "prior_attempts": [
            {
                "attempt": 1,
                "rejected_by": "test",
                "rejected_attempt": 1,
                "reason": "exit_status",
                "must_fix": [],
                "output": PYTEST_FAILURE,
            },
            {
                "attempt": 2,
                "rejected_by": "review",
                "rejected_attempt": 1,
                "reason": "not_approved",
                "must_fix": ["handle a file with only a BOM", "add a regression test"],
                "output": "handle a file with only a BOM; add a regression test",
            },
        ],
        "output_schema": None,
    }


def test_the_first_brief_has_no_prior_attempts() -> None:
    d = Driver(WORKFLOW)
    (command,) = d.submit({"issue": 42})
    assert isinstance(command, RunStep)
    assert command.brief["prior_attempts"] == []
    assert command.brief["attempt"] == 1


def test_a_looping_steps_own_brief_lists_its_earlier_rejections_and_the_work() -> None:
    d, _ = third_implement_brief()
    d.report(actor="agent:fixer", artifacts={"diff": "sha:3"})
    (command,) = d.report(actor="code:pytest", output="14 passed")
    assert isinstance(command, RunStep)
    assert (command.step, command.attempt) == ("review", 2)
    brief = command.brief
    assert brief["output_schema"] == BUILTIN_SCHEMAS["review"]
    assert brief["earlier_steps"] == {
        "implement": {"attempt": 3, "outcome": "passed", "verdict": None,
                      "artifacts": {"diff": "sha:3"}},
        "test": {"attempt": 3, "outcome": "passed", "verdict": None, "artifacts": {}},
    }
    assert brief["prior_attempts"] == [{
        "attempt": 1, "rejected_by": "review", "rejected_attempt": 1, "reason": "not_approved",
        "must_fix": ["handle a file with only a BOM", "add a regression test"],
        "output": "handle a file with only a BOM; add a regression test",
    }]


def test_code_steps_get_no_brief() -> None:
    d = Driver(WORKFLOW)
    d.submit()
    (command,) = d.report()
    assert isinstance(command, RunStep)
    assert (command.step, command.kind, command.brief) == ("test", "code", {})


def test_long_failing_output_keeps_its_tail() -> None:
    text = "x" * 10 + "y" * OUTPUT_CUT_CHARS
    cut = cut_output(text)
    assert cut.endswith("y" * OUTPUT_CUT_CHARS)
    assert cut.startswith("[... 10 earlier characters cut ...]\n")
    assert cut_output("short") == "short"
