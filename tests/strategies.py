"""Shared workflows, a reducer driver and Hypothesis strategies for the pure-core tests.

``Driver`` feeds hand-written events to ``transition`` with fresh ids and a manual clock.
``runs()`` draws a workflow and a sequence of events (answers to the commands the reducer
emitted, plus noise: wrong ids, stale timers, bad approvals, operator actions), applies
them and records every step, accepted or rejected, for the property tests to check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from statewright._errors import IllegalEventError
from statewright.definition import Workflow, workflow_from_dict
from statewright.machine.commands import (
    Command,
    RequestApproval,
    RunCheck,
    RunStep,
    StartTimer,
)
from statewright.machine.events import (
    ApprovalGranted,
    ApprovalRejected,
    AttemptReported,
    CheckReported,
    Event,
    TaskCancelled,
    TaskRetried,
    TaskSubmitted,
    TimerFired,
)
from statewright.machine.state import TaskState, new_task
from statewright.machine.task import transition

# --- workflows --------------------------------------------------------------------------

FIXER = {"type": "command", "command": ["python", "examples/agents/fixer.py"]}
REVIEWER = {"type": "command", "command": ["python", "examples/agents/reviewer.py"]}
PYTEST = {"command": ["python", "-m", "pytest", "-q"]}
MERGE = {"command": ["git", "merge", "--ff-only", "fix"]}
CI = {"command": ["gh", "pr", "checks"]}

ANALYSIS_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "outcome": {"type": "string"},
        "missingEvidence": {"type": "array", "items": {"type": "string"}},
        "summary": {"type": "string"},
    },
    "required": ["outcome", "summary"],
}
ANALYSIS_OUTCOMES = {"sufficient": "pass", "needs_clarification": "fail", "suspected_fraud": "halt"}


def fix_bug_dict() -> dict[str, Any]:
    """implement -> test -> review -> approve -> ci -> merge, with three loop-backs."""
    loop = {"loop_back": "implement", "max_attempts": 3}
    return {
        "workflow": "fix-bug",
        "version": 1,
        "steps": [
            {"id": "implement", "kind": "ai", "owner": "dev", "agent": FIXER},
            {"id": "test", "kind": "code", "owner": "dev", "run": PYTEST, "on_failure": loop},
            {
                "id": "review", "kind": "ai", "owner": "reviewers", "agent": REVIEWER,
                "output_schema": "review", "on_failure": loop,
            },
            {
                "id": "approve", "kind": "human", "owner": "maintainers",
                "approvers": {"role": "maintainer"}, "separate_from": ["implement"],
                "expires_after": "1h",
                "on_failure": {"loop_back": "implement", "max_attempts": 2},
            },
            {
                "id": "ci", "kind": "wait", "owner": "dev", "check": CI, "every": "5m",
                "max_checks": 3,
            },
            {"id": "merge", "kind": "code", "owner": "dev", "run": MERGE},
        ],
    }


def fix_bug() -> Workflow:
    return workflow_from_dict(fix_bug_dict(), "fix-bug.yaml")


def triage_dict() -> dict[str, Any]:
    """A decision step that completes early on success; its failure carries on."""
    return {
        "workflow": "triage",
        "steps": [
            {
                "id": "decide", "kind": "ai", "owner": "triage", "agent": FIXER,
                "on_success": "complete", "on_failure": "continue",
            },
            {"id": "enrich", "kind": "ai", "owner": "triage", "agent": FIXER,
             "on_failure": "continue"},
            {"id": "confirm", "kind": "human", "owner": "triage",
             "approvers": {"role": "triager"}},
            {"id": "close", "kind": "code", "owner": "triage", "run": MERGE},
        ],
    }


def supplier_dict() -> dict[str, Any]:
    """Analysis with mapped outcomes, a clarification loop, an approval, an execution."""
    return {
        "workflow": "supplier",
        "steps": [
            {
                "id": "analyse", "kind": "ai", "owner": "risk", "agent": FIXER,
                "output_schema": ANALYSIS_SCHEMA, "outcomes": ANALYSIS_OUTCOMES,
                "on_failure": "continue",
            },
            {
                "id": "clarify", "kind": "code", "owner": "risk", "run": PYTEST,
                "on_failure": {"loop_back": "analyse", "max_attempts": 2},
            },
            {
                "id": "approve", "kind": "human", "owner": "finance",
                "approvers": {"role": "finance-approver"}, "separate_from": ["clarify"],
                "expires_after": "24h",
            },
            {"id": "execute", "kind": "code", "owner": "finance", "run": MERGE},
        ],
    }


# --- a hand driver --------------------------------------------------------------------


class Driver:
    """Feeds events to the reducer with fresh ids and a manual clock, keeping the log."""

    def __init__(self, workflow: Workflow, task_id: str = "t1", now_ms: int = 1_000_000) -> None:
        self.state: TaskState = new_task(task_id, workflow)
        self.now_ms = now_ms
        self.events: list[Event] = []
        self.last: list[Command] = []
        self._serial = 0

    def make(self, cls: type[Event], *, advance_ms: int = 1000, **fields: Any) -> Event:
        """A new event of ``cls`` with the next id, ``advance_ms`` after the previous one."""
        self._serial += 1
        self.now_ms += advance_ms
        return cls(event_id=f"e{self._serial}", at_ms=self.now_ms, **fields)

    def apply(self, event: Event) -> list[Command]:
        self.state, self.last = transition(self.state, event)
        self.events.append(event)
        return self.last

    def submit(self, payload: Mapping[str, Any] | None = None) -> list[Command]:
        return self.apply(self.make(TaskSubmitted, input=dict(payload or {})))

    def report_event(self, **fields: Any) -> Event:
        """An AttemptReported for the command in flight; ``fields`` override the defaults."""
        cur = self.state.current
        if cur is None:
            raise AssertionError(f"nothing in flight (status {self.state.status})")
        defaults: dict[str, Any] = {
            "command_id": cur.command_id, "step": cur.step, "attempt": cur.attempt,
            "actor": "agent:worker", "ok": True,
        }
        return self.make(AttemptReported, **{**defaults, **fields})

    def report(self, **fields: Any) -> list[Command]:
        return self.apply(self.report_event(**fields))

    def check(self, passed: bool, **fields: Any) -> list[Command]:
        cur = self.state.current
        if cur is None:
            raise AssertionError("no check in flight")
        return self.apply(
            self.make(
                CheckReported, command_id=cur.command_id, step=cur.step, attempt=cur.attempt,
                passed=passed, **fields,
            )
        )

    def fire(self, *, advance_ms: int = 1000) -> list[Command]:
        cur = self.state.current
        if cur is None:
            raise AssertionError("no timer pending")
        return self.apply(self.make(TimerFired, timer_id=cur.timer_id, advance_ms=advance_ms))

    def grant_event(self, actor: str = "alice", roles: Sequence[str] = ("maintainer",),
                    **fields: Any) -> Event:
        cur = self.state.current
        if cur is None:
            raise AssertionError("no approval pending")
        defaults: dict[str, Any] = {
            "step": cur.step, "actor": actor, "roles": tuple(roles),
            "proposal_hash": cur.proposal_hash,
        }
        return self.make(ApprovalGranted, **{**defaults, **fields})

    def grant(self, actor: str = "alice", roles: Sequence[str] = ("maintainer",),
              **fields: Any) -> list[Command]:
        return self.apply(self.grant_event(actor, roles, **fields))

    def reject_event(self, actor: str = "alice", roles: Sequence[str] = ("maintainer",),
                     reason_code: str = "needs_work", **fields: Any) -> Event:
        cur = self.state.current
        if cur is None:
            raise AssertionError("no approval pending")
        defaults: dict[str, Any] = {
            "step": cur.step, "actor": actor, "roles": tuple(roles),
            "proposal_hash": cur.proposal_hash, "reason_code": reason_code,
        }
        return self.make(ApprovalRejected, **{**defaults, **fields})

    def reject(self, actor: str = "alice", roles: Sequence[str] = ("maintainer",),
               reason_code: str = "needs_work", **fields: Any) -> list[Command]:
        return self.apply(self.reject_event(actor, roles, reason_code, **fields))

    def retry(self, actor: str = "olga", reason: str = "flaky runner") -> list[Command]:
        return self.apply(self.make(TaskRetried, actor=actor, reason=reason))

    def cancel(self, actor: str = "olga", reason: str = "duplicate issue") -> list[Command]:
        return self.apply(self.make(TaskCancelled, actor=actor, reason=reason))


# --- Hypothesis: workflows ------------------------------------------------------------

_KINDS = ("ai", "code", "wait", "human")


@st.composite
def random_workflows(draw: st.DrawFn) -> Workflow:
    """A valid workflow of 1-5 steps with every kind, route and approval rule in play."""
    n = draw(st.integers(1, 5))
    steps: list[dict[str, Any]] = []
    for i in range(n):
        kind = draw(st.sampled_from(_KINDS))
        sid = f"s{i}{kind}"
        step: dict[str, Any] = {"id": sid, "kind": kind, "owner": "team"}
        if kind == "ai":
            step["agent"] = FIXER
            schema = draw(st.sampled_from(["none", "review", "analysis"]))
            if schema == "review":
                step["output_schema"] = "review"
            elif schema == "analysis":
                step["output_schema"] = dict(ANALYSIS_SCHEMA)
                step["outcomes"] = dict(ANALYSIS_OUTCOMES)
        elif kind == "code":
            step["run"] = PYTEST
        elif kind == "wait":
            step.update(check=CI, every="1m", max_checks=draw(st.integers(1, 3)))
        else:
            step["approvers"] = {"role": "maintainer"}
            earlier = [s["id"] for s in steps]
            if earlier:
                step["separate_from"] = draw(st.lists(st.sampled_from(earlier), unique=True))
            if draw(st.booleans()):
                step["expires_after"] = "1h"
        routes = ["halt"]
        if i < n - 1 and kind != "human":
            routes.append("continue")
        if i > 0:
            routes.append("loop_back")
        route = draw(st.sampled_from(routes))
        if route == "loop_back":
            target = steps[draw(st.integers(0, i - 1))]["id"]
            step["on_failure"] = {"loop_back": target, "max_attempts": draw(st.integers(1, 3))}
        elif route == "continue":
            step["on_failure"] = "continue"
        if draw(st.integers(0, 4)) == 0:
            step["on_success"] = "complete"
        steps.append(step)
    return workflow_from_dict({"workflow": "random", "steps": steps}, "<random>")


def workflows() -> st.SearchStrategy[Workflow]:
    fixed = [
        workflow_from_dict(fix_bug_dict(), "fix-bug"),
        workflow_from_dict(triage_dict(), "triage"),
        workflow_from_dict(supplier_dict(), "supplier"),
    ]
    return st.one_of(st.sampled_from(fixed), random_workflows())


# --- Hypothesis: events ---------------------------------------------------------------

AGENT_ACTORS = ("agent:fixer", "agent:reviewer", "alice", "code:runner")
APPROVERS = ("alice", "bob", "carol", "agent:fixer", "")
ROLE_SETS = ((), ("maintainer",), ("finance-approver",), ("maintainer", "finance-approver"),
             ("triager",), ("triager", "maintainer", "finance-approver"))
CLOCK_STEPS_MS = (0, 1_000, 60_000, 300_000, 3_600_000, 90_000_000)


def verdicts(run_step: RunStep) -> st.SearchStrategy[Any]:
    """Verdicts for one step: valid ones for its schema, invalid ones, unknown fields, none."""
    schema = run_step.brief.get("output_schema") if run_step.brief else None
    noise = st.sampled_from([None, {"approved": "yes"}, {"unknown": 1}, [], {"outcome": "bogus"}])
    review = st.fixed_dictionaries(
        {"approved": st.booleans()},
        optional={"must_fix": st.lists(st.sampled_from(["add a test", "handle None"]),
                                       max_size=2)},
    )
    analysis = st.fixed_dictionaries(
        {"outcome": st.sampled_from(sorted(ANALYSIS_OUTCOMES)),
         "summary": st.sampled_from(["ok", "callback missing"])},
        optional={"missingEvidence": st.lists(st.just("callback"), max_size=1)},
    )
    with_extra = review.map(lambda v: {**v, "extra": True})
    if schema is None:
        return st.one_of(st.none(), review, noise)
    if "approved" in schema.get("properties", {}):
        return st.one_of(review, review, with_extra, noise)
    return st.one_of(analysis, analysis, noise)


@dataclass(frozen=True)
class Applied:
    """One event offered to the reducer, and what came of it."""

    event: Event
    before: TaskState
    before_dict: dict[str, Any]
    accepted: bool
    after: TaskState
    after_dict: dict[str, Any]
    commands: tuple[Command, ...]


@dataclass(frozen=True)
class Run:
    workflow: Workflow
    task_id: str
    steps: tuple[Applied, ...]

    @property
    def accepted(self) -> list[Applied]:
        return [s for s in self.steps if s.accepted]


def _answer(draw: st.DrawFn, cmd: Command, at_ms: int, state: TaskState) -> dict[str, Any]:
    """Fields of an event answering ``cmd`` (well or badly); returns type + fields."""
    if isinstance(cmd, RunStep):
        error = draw(st.sampled_from([None, None, None, "timeout", "invalid_verdict"]))
        return {
            "cls": AttemptReported, "command_id": cmd.command_id, "step": cmd.step,
            "attempt": cmd.attempt, "actor": draw(st.sampled_from(AGENT_ACTORS)),
            "ok": draw(st.sampled_from([True, True, True, False])), "error": error,
            "verdict": draw(verdicts(cmd)),
            "note": draw(st.sampled_from(["", "approved", "LGTM, all done"])),
            "output": draw(st.sampled_from(["", "FAILED tests/test_x.py::test_y"])),
            "artifacts": draw(st.sampled_from([{}, {"diff": "sha:abc"}, {"diff": "sha:def"}])),
            "cost": {"tokens": 10.0},
        }
    if isinstance(cmd, RunCheck):
        return {"cls": CheckReported, "command_id": cmd.command_id, "step": cmd.step,
                "attempt": cmd.attempt, "check_number": cmd.check_number,
                "passed": draw(st.booleans())}
    if isinstance(cmd, StartTimer):
        return {"cls": TimerFired, "timer_id": cmd.timer_id,
                "at_ms": max(at_ms, cmd.due_at_ms) + draw(st.sampled_from([0, 5]))}
    if not isinstance(cmd, RequestApproval):
        raise AssertionError(f"unexpected command {cmd!r}")
    hashes = [cmd.proposal_hash, cmd.proposal_hash, "", "0" * 64]
    cur = state.current
    if cur is not None and cur.proposal_hash:
        hashes.append(cur.proposal_hash)
    fields: dict[str, Any] = {
        "step": draw(st.sampled_from([cmd.step, cmd.step, "", "elsewhere"])),
        "actor": draw(st.sampled_from(APPROVERS)),
        "roles": draw(st.sampled_from(ROLE_SETS)),
        "proposal_hash": draw(st.sampled_from(hashes)),
    }
    if draw(st.booleans()):
        return {"cls": ApprovalGranted, **fields}
    return {"cls": ApprovalRejected, **fields,
            "reason_code": draw(st.sampled_from(["needs_work", "policy_denial", ""]))}


@st.composite
def runs(draw: st.DrawFn, max_events: int = 30) -> Run:
    """A workflow and up to ``max_events`` events offered to the reducer, each recorded."""
    workflow = draw(workflows())
    task_id = "t1"
    state = new_task(task_id, workflow)
    emitted: list[Command] = []
    latest: list[Command] = []
    now_ms = 1_000_000
    steps: list[Applied] = []
    for serial in range(draw(st.integers(1, max_events))):
        now_ms += draw(st.sampled_from(CLOCK_STEPS_MS))
        choice = draw(st.sampled_from(
            ["latest"] * 8 + ["old", "submit", "retry", "cancel", "bogus"]
        ))
        fields: dict[str, Any]
        if choice == "latest" and latest:
            fields = _answer(draw, draw(st.sampled_from(latest)), now_ms, state)
        elif choice in ("latest", "old") and emitted:
            fields = _answer(draw, draw(st.sampled_from(emitted)), now_ms, state)
        elif choice == "retry":
            fields = {"cls": TaskRetried, "actor": draw(st.sampled_from(["olga", ""])),
                      "reason": "operator retry"}
        elif choice == "cancel":
            fields = {"cls": TaskCancelled, "actor": "olga",
                      "reason": draw(st.sampled_from(["no longer needed", ""]))}
        elif choice == "bogus":
            fields = draw(st.sampled_from([
                {"cls": AttemptReported, "command_id": f"{task_id}/nope/1", "step": "nope"},
                {"cls": CheckReported, "command_id": f"{task_id}/nope/1/check-1", "passed": True},
                {"cls": TimerFired, "timer_id": f"{task_id}/nope/1/expiry"},
            ]))
        else:
            fields = {"cls": TaskSubmitted, "input": {"issue": 7}}
        cls = fields.pop("cls")
        now_ms = max(now_ms, fields.pop("at_ms", now_ms))
        event = cls(event_id=f"e{serial}", at_ms=now_ms, **fields)
        before_dict = state.to_dict()
        try:
            after, commands = transition(state, event)
        except IllegalEventError:
            steps.append(Applied(event, state, before_dict, False, state, state.to_dict(), ()))
            continue
        steps.append(Applied(event, state, before_dict, True, after, after.to_dict(),
                             tuple(commands)))
        state = after
        if commands:
            latest = list(commands)
            emitted.extend(commands)
    return Run(workflow, task_id, tuple(steps))
