"""Shared workflows, a reducer driver and Hypothesis strategies for the pure-core tests.

``Driver`` feeds hand-written events to ``transition`` with fresh ids and a manual clock.
``runs()`` draws a workflow and a sequence of events (answers to the commands the reducer
emitted, plus noise: wrong ids, stale timers, bad approvals, operator actions), applies
them and records every step, accepted or rejected, for the property tests to check."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from statewright._canonical import canonical_json
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
from statewright.machine.state import TaskState, TaskStatus, new_task
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


@functools.lru_cache(maxsize=4096)
def _load(canonical: str, source: str) -> Workflow:
    """Load once per distinct definition: schema checks dominate generation time."""
    return workflow_from_dict(json.loads(canonical), source)


def load_cached(data: Mapping[str, Any], source: str) -> Workflow:
    return _load(json.dumps(data, sort_keys=True), source)


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
    return load_cached({"workflow": "random", "steps": steps}, "<random>")


def workflows() -> st.SearchStrategy[Workflow]:
    """The fix-bug, triage and supplier shapes, or a random valid workflow."""
    fixed = st.sampled_from([
        (fix_bug_dict(), "fix-bug"), (triage_dict(), "triage"), (supplier_dict(), "supplier"),
    ]).map(lambda pair: load_cached(*pair))
    return st.one_of(fixed, random_workflows())


# --- Hypothesis: events ---------------------------------------------------------------

# Text with lone surrogates, and numbers with NaN and the infinities.
HOSTILE_TEXT = st.text(st.characters(exclude_categories=()), max_size=20)
HOSTILE_ATOMS = st.one_of(
    st.none(), st.booleans(), HOSTILE_TEXT, st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
)
HOSTILE_JSON = st.recursive(
    HOSTILE_ATOMS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(HOSTILE_TEXT, inner, max_size=4)),
    max_leaves=20,
)


AGENT_ACTORS = st.sampled_from(("agent:fixer", "agent:reviewer", "alice", "code:runner"))
_APPROVAL_FLAWS = st.sampled_from(["none", "none", "hash", "hash", "role", "actor", "step"])
PEOPLE = st.sampled_from(("alice", "bob", "carol"))  # alice also reports work: duty rules bite
ALL_ROLES = ("maintainer", "finance-approver", "triager")
CLOCK_STEPS_MS = st.sampled_from((0, 1_000, 1_000, 1_000, 60_000, 300_000, 3_600_000,
                                  90_000_000))
# (ok, error): mostly clean reports, some failures, some executor-flagged bad verdicts
_RESULTS = st.sampled_from([(True, None)] * 6 + [(False, "timeout"), (False, "exit_status"),
                                                 (False, "invalid_verdict"), (True, "timeout")])
# (note, output, artifacts): the note is noise the reducer must never read
_FLAVOURS = st.sampled_from([
    ("", "", {}), ("approved", "", {"diff": "sha:abc"}),
    ("LGTM, all done", "FAILED tests/test_x.py::test_y", {"diff": "sha:def"}),
    ("", "3 passed", {"diff": "sha:abc"}),
])
_REASON_CODES = st.sampled_from(["needs_work", "policy_denial", ""])
_NOISE_VERDICTS = st.sampled_from([None, {"approved": "yes"}, {"unknown": 1}, [],
                                   {"outcome": "bogus"}])
_REVIEW_VERDICTS = st.fixed_dictionaries(
    {"approved": st.booleans()},
    optional={"must_fix": st.lists(st.sampled_from(["add a test", "handle None"]), max_size=2)},
)
_ANALYSIS_VERDICTS = st.fixed_dictionaries(
    {"outcome": st.sampled_from(sorted(ANALYSIS_OUTCOMES)),
     "summary": st.sampled_from(["ok", "callback missing"])},
    optional={"missingEvidence": st.lists(st.just("callback"), max_size=1)},
)
_VERDICTS = {
    "none": st.one_of(st.none(), _REVIEW_VERDICTS, _NOISE_VERDICTS),
    "review": st.one_of(_REVIEW_VERDICTS, _REVIEW_VERDICTS,
                        _REVIEW_VERDICTS.map(lambda v: {**v, "extra": True}), _NOISE_VERDICTS),
    "analysis": st.one_of(_ANALYSIS_VERDICTS, _ANALYSIS_VERDICTS, _NOISE_VERDICTS),
}
# a cancel ends the run for good, so it is rare; the others are refused or answer work
_CHOICES = st.sampled_from(["latest"] * 12 + ["old"] * 2 + ["bogus"] * 2
                           + ["submit", "retry", "cancel"])


def verdicts(run_step: RunStep) -> st.SearchStrategy[Any]:
    """Verdicts for one step: valid ones for its schema, invalid ones, unknown fields, none."""
    schema = run_step.brief.get("output_schema") if run_step.brief else None
    if schema is None:
        return _VERDICTS["none"]
    if "approved" in schema.get("properties", {}):
        return _VERDICTS["review"]
    return _VERDICTS["analysis"]


def snapshot(state: TaskState) -> str:
    """The state's dict form as text: a copy no later mutation can reach."""
    return canonical_json(state.to_dict())


@dataclass(frozen=True)
class Applied:
    """One event offered to the reducer, and what came of it."""

    event: Event
    before: TaskState
    before_json: str  # canonical JSON of before.to_dict(), taken before the event
    accepted: bool
    after: TaskState
    after_json: str  # the same, of the state after it (the untouched input when refused)
    commands: tuple[Command, ...]


@dataclass(frozen=True)
class Run:
    workflow: Workflow
    task_id: str
    steps: tuple[Applied, ...]

    @property
    def accepted(self) -> list[Applied]:
        return [s for s in self.steps if s.accepted]

    def __repr__(self) -> str:
        """The workflow and each event with its fate: what a falsifying example shows."""
        lines = [self.workflow.describe()]
        for s in self.steps:
            fate = f"-> {s.after.status.value}" if s.accepted else "refused"
            lines.append(f"{s.event!r} {fate}")
        return "Run(\n    " + "\n    ".join(lines) + "\n)"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # Hypothesis's printer would otherwise dump every state


def _passing_verdict(cmd: RunStep) -> dict[str, Any] | None:
    schema = cmd.brief.get("output_schema") if cmd.brief else None
    if schema is None:
        return None
    if "approved" in schema.get("properties", {}):
        return {"approved": True}
    return {"outcome": "sufficient", "summary": "all evidence agrees"}


def _answer(draw: st.DrawFn, cmd: Command, at_ms: int, luck: int,
            stale_hashes: Sequence[str]) -> dict[str, Any]:
    """The class and fields of an event answering ``cmd``, well or badly. A run's ``luck``
    (-1 to 2) scripts some answers: the higher it is, the more often the work simply
    succeeds; at -1 it often simply fails, which drives loops to their budgets."""
    scripted = draw(st.integers(0, 9)) < 4 * abs(luck)
    lucky = scripted and luck > 0
    if isinstance(cmd, RunStep) and scripted:
        if lucky:
            return {"cls": AttemptReported, "command_id": cmd.command_id, "step": cmd.step,
                    "attempt": cmd.attempt, "actor": draw(AGENT_ACTORS),
                    "verdict": _passing_verdict(cmd), "note": "done"}
        return {"cls": AttemptReported, "command_id": cmd.command_id, "step": cmd.step,
                "attempt": cmd.attempt, "actor": draw(AGENT_ACTORS), "ok": False,
                "error": "exit_status", "output": "FAILED tests/test_x.py::test_y",
                "note": "all good, approved"}
    if isinstance(cmd, RunCheck) and scripted:
        return {"cls": CheckReported, "command_id": cmd.command_id, "step": cmd.step,
                "attempt": cmd.attempt, "check_number": cmd.check_number, "passed": lucky}
    if isinstance(cmd, RunStep):
        ok, error = draw(_RESULTS)
        note, output, artifacts = draw(_FLAVOURS)
        return {
            "cls": AttemptReported, "command_id": cmd.command_id, "step": cmd.step,
            "attempt": cmd.attempt, "actor": draw(AGENT_ACTORS), "ok": ok, "error": error,
            "verdict": draw(verdicts(cmd)), "note": note, "output": output,
            "artifacts": artifacts, "cost": {"tokens": 10.0},
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
    # a well-formed answer, or one with exactly one flaw the reducer must refuse
    fields: dict[str, Any] = {"step": cmd.step, "actor": draw(PEOPLE), "roles": ALL_ROLES,
                              "proposal_hash": cmd.proposal_hash}
    flaw = draw(_APPROVAL_FLAWS)  # refused answers do not stop a lucky run: draw always
    if flaw == "hash":
        fields["proposal_hash"] = draw(st.sampled_from(["", "0" * 64, *stale_hashes]))
    elif flaw == "role":
        fields["roles"] = draw(st.sampled_from([(), ("developer",)]))
    elif flaw == "actor":
        fields["actor"] = draw(st.sampled_from(["", "agent:fixer", "system:loop"]))
    elif flaw == "step":
        fields["step"] = "elsewhere"
    if lucky or draw(st.booleans()):
        return {"cls": ApprovalGranted, **fields}
    return {"cls": ApprovalRejected, **fields, "reason_code": draw(_REASON_CODES)}


def _noise(draw: st.DrawFn, choice: str, task_id: str) -> dict[str, Any]:
    if choice == "retry":
        return {"cls": TaskRetried, "actor": draw(st.sampled_from(["olga", ""])),
                "reason": "operator retry"}
    if choice == "cancel":
        return {"cls": TaskCancelled, "actor": "olga",
                "reason": draw(st.sampled_from(["no longer needed", ""]))}
    if choice == "bogus":
        return dict(draw(st.sampled_from([
            {"cls": AttemptReported, "command_id": f"{task_id}/nope/1", "step": "nope"},
            {"cls": CheckReported, "command_id": f"{task_id}/nope/1/check-1", "passed": True},
            {"cls": TimerFired, "timer_id": f"{task_id}/nope/1/expiry"},
        ])))
    return {"cls": TaskSubmitted, "input": {"issue": 7}}


@st.composite
def runs(draw: st.DrawFn, max_events: int = 30) -> Run:
    """A workflow and up to ``max_events`` events offered to the reducer, each recorded.

    Most events answer the commands of the latest transition (with random outcomes,
    verdicts, actors, roles and hashes); the rest answer older commands (stale and
    duplicate reports, stale timers) or are noise: a second submission, operator retries
    and cancels with or without a reason, reports for commands that never existed."""
    workflow = draw(workflows())
    luck = draw(st.integers(-1, 2))
    task_id = "t1"
    state = new_task(task_id, workflow)
    state_json = snapshot(state)
    emitted: list[Command] = []
    latest: list[Command] = []
    hashes: list[str] = []  # every proposal hash shown so far: the stale ones to replay
    now_ms = 1_000_000
    steps: list[Applied] = []
    after_the_end = 0
    for serial in range(draw(st.integers(1, max_events))):
        if state.terminal and state.status is not TaskStatus.HALTED:
            after_the_end += 1
            if after_the_end > 3:  # a few knocks on a closed door are enough
                break
        now_ms += draw(CLOCK_STEPS_MS)
        choice = draw(_CHOICES)
        if state.status is TaskStatus.HALTED and draw(st.integers(0, 2)) == 0:
            choice = "retry"  # an operator usually steps in
        if choice == "latest" and latest:
            # the first command is the work itself (a timer, if any, comes after it)
            first = draw(st.integers(0, 9)) < 4 * abs(luck)
            command = latest[0] if first else draw(st.sampled_from(latest))
            fields = _answer(draw, command, now_ms, luck, hashes)
        elif choice in ("latest", "old") and emitted:
            fields = _answer(draw, draw(st.sampled_from(emitted)), now_ms, luck, hashes)
        else:
            fields = _noise(draw, choice, task_id)
        cls = fields.pop("cls")
        now_ms = max(now_ms, fields.pop("at_ms", now_ms))
        event = cls(event_id=f"e{serial}", at_ms=now_ms, **fields)
        try:
            after, commands = transition(state, event)
        except IllegalEventError:
            steps.append(Applied(event, state, state_json, False, state, snapshot(state), ()))
            continue
        after_json = snapshot(after)
        steps.append(Applied(event, state, state_json, True, after, after_json, tuple(commands)))
        state, state_json = after, after_json
        if commands:
            latest = list(commands)
            emitted.extend(commands)
            hashes.extend(c.proposal_hash for c in commands if isinstance(c, RequestApproval))
    return Run(workflow, task_id, tuple(steps))
