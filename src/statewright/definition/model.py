"""Frozen, typed workflow definitions. Built only by the loader (from YAML, dicts or the
builder), which checks every rule first; nothing here does I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from statewright._record import record
from statewright.definition.durations import parse_duration_seconds
from statewright.definition.limits import DEFAULT_RESULT_LIMIT_BYTES
from statewright.definition.notify import NotifyEvent, NotifyTarget

if TYPE_CHECKING:  # the loader imports github.py for a workflow that has a github section
    from statewright.definition.github import GithubProjection


class StepKind(StrEnum):
    AI = "ai"
    HUMAN = "human"
    WAIT = "wait"
    CODE = "code"
    MAP = "map"  # one child task per item of a list in the task's state


class RouteKind(StrEnum):
    HALT = "halt"
    CONTINUE = "continue"
    LOOP_BACK = "loop_back"
    COMPLETE = "complete"


class OutcomeRoute(StrEnum):
    """Where a verdict's ``outcome`` value sends the task."""

    PASS = "pass"
    FAIL = "fail"
    HALT = "halt"  # a policy stop that no loop budget overrides


@record
class Route:
    """Where a step's outcome leads: halt, continue, complete, or loop back to ``target`` at most
    ``max_attempts`` times."""

    kind: RouteKind
    target: str | None = None
    max_attempts: int | None = None

    def describe(self) -> str:
        if self.kind is RouteKind.LOOP_BACK:
            return f"loop_back->{self.target} (max {self.max_attempts})"
        return self.kind.value


HALT = Route(RouteKind.HALT)
CONTINUE = Route(RouteKind.CONTINUE)
COMPLETE = Route(RouteKind.COMPLETE)


@record
class RetryPolicy:
    """Retries of one *command* on transient errors, apart from step failures.
    ``max_deliveries``: starts of the command that may end without an outcome (each
    worker that ran it died) before it fails with ``worker_died``; None: the worker's
    own bound (``--max-deliveries``)."""

    max_attempts: int = 3
    initial_backoff_seconds: float = 1.0
    max_backoff_seconds: float = 60.0
    multiplier: float = 2.0
    jitter: bool = True
    non_retryable: tuple[str, ...] = ()
    max_deliveries: int | None = None

    def backoff_seconds(self, failures: int, unit_random: float) -> float:
        """Delay before the next try after ``failures`` failures; ``unit_random`` in [0, 1)."""
        try:
            grown = self.initial_backoff_seconds * self.multiplier ** max(0, failures - 1)
        except OverflowError:  # a long run of failures: the cap applies long before
            grown = self.max_backoff_seconds
        base = min(self.max_backoff_seconds, grown)
        return base * (0.5 + unit_random / 2) if self.jitter else base


#: A remote agent's heartbeat interval when its step names none.
DEFAULT_HEARTBEAT_SECONDS = 60.0


@record
class RemoteAgent:
    """``agent: {type: remote, queue: NAME, heartbeat: 30s}``: the attempt parks on the queue
    until a remote agent claims it, and fails when the agent misses a heartbeat."""

    queue: str
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS


@record
class MapSpec:
    """A map step: one child task of ``workflow`` per element of the list ``items`` (a
    reference into the task's state), each on the input ``{"item": ELEMENT, "index": I}``, at
    most ``max_concurrency`` running at once. The step fails when more children fail than
    ``tolerated_failures`` (a count), or than ``tolerated_percent`` of the items when that is
    set. ``workflow_hash`` pins the child workflow by content hash (the loader fills it for a
    file; empty: the latest workflow registered under the name ``workflow``)."""

    workflow: str
    items: str
    workflow_hash: str = ""
    max_concurrency: int = 10
    tolerated_failures: int = 0
    tolerated_percent: float | None = None

    def tolerated(self, n_items: int) -> int:
        """How many of ``n_items`` children may fail before the step fails."""
        if self.tolerated_percent is None:
            return self.tolerated_failures
        return int(n_items * self.tolerated_percent / 100)


@record
class Step:
    """One step of a workflow, as the loader checked it."""

    id: str
    kind: StepKind
    owner: str
    description: str = ""
    instructions: str = ""
    agent: Mapping[str, Any] | None = None
    run: Mapping[str, Any] | None = None
    check: Mapping[str, Any] | None = None
    every_seconds: float = 0.0
    max_checks: int = 0
    timeout_seconds: float | None = None
    output_schema: Mapping[str, Any] | None = None
    outcomes: Mapping[str, OutcomeRoute] = field(default_factory=dict)
    on_failure: Route = HALT
    on_success: Route = CONTINUE
    approvers_role: str | None = None
    approvers_scope: Mapping[str, str] = field(default_factory=dict)  # scope key -> reference (input.region)
    reject_codes: tuple[str, ...] = ()  # a human step's own set; empty: the workflow's
    separate_from: tuple[str, ...] = ()
    expires_after_seconds: float | None = None
    retry: RetryPolicy = RetryPolicy()
    protected: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)  # declared variables for its process
    secrets: tuple[str, ...] = ()  # names taken from the worker's environment when it runs
    proposal: tuple[str, ...] = ()  # a human step's proposal: references into the task's state
    artifacts: tuple[str, ...] = ()  # a human step's artifacts: workspace files, or "diff"
    on_conflict: Route | None = None  # a code step whose effect answered ``conflict``
    result_limit_bytes: int = DEFAULT_RESULT_LIMIT_BYTES  # its result, written as JSON
    notify: tuple[NotifyTarget, ...] = ()  # a human step: told when it waits for approval
    stuck_after_seconds: float | None = None  # the workflow's notify.stuck is told after this long here
    map: MapSpec | None = None  # a map step's children
    concurrency: int | None = None  # at most this many attempts of it performed at once, fleet-wide
    limits: tuple[str, ...] = ()  # the named limits (definition/fleet.py) it draws on

    @property
    def remote(self) -> RemoteAgent | None:
        """The remote agent this ai or code step parks for, or None when the worker runs it."""
        agent = self.agent
        if agent is None or agent.get("type") != "remote":
            return None
        hb = agent.get("heartbeat")
        seconds = parse_duration_seconds(hb) if hb is not None else DEFAULT_HEARTBEAT_SECONDS
        return RemoteAgent(str(agent.get("queue", "")), seconds)


#: The reasons a rejection may give when a workflow declares none (seed 002's rejection codes).
DEFAULT_REJECT_CODES: tuple[str, ...] = (
    "insufficient_evidence", "incorrect_extraction", "policy_denial", "suspected_fraud", "other",
)


@record
class Workflow:
    """A checked workflow definition: its steps in order, named by ``content_hash``."""

    name: str
    version: int
    steps: tuple[Step, ...]
    description: str = ""
    input_schema: Mapping[str, Any] | None = None
    reject_codes: tuple[str, ...] = DEFAULT_REJECT_CODES
    content_hash: str = ""
    source: str = "<definition>"
    notify: Mapping[NotifyEvent, tuple[NotifyTarget, ...]] = field(default_factory=dict)  # halted, stuck
    github: GithubProjection | None = None  # labels on the task's issue or pull request
    concurrency: int | None = None  # at most this many of its tasks' steps performed at once, fleet-wide
    tenant_ref: str | None = None  # ``input.FIELD``: where a task's tenant is read when submit names none
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: The workflows its map steps start, by content hash, when loaded from files with it.
    children: Mapping[str, Workflow] = field(default_factory=dict, compare=False, repr=False)

    def index_of(self, step_id: str) -> int:
        for i, step in enumerate(self.steps):
            if step.id == step_id:
                return i
        msg = f"workflow {self.name!r} has no step {step_id!r}"
        raise KeyError(msg)

    def step(self, step_id: str) -> Step:
        return self.steps[self.index_of(step_id)]

    def reject_codes_of(self, step: Step) -> tuple[str, ...]:
        """The reason codes a rejection at ``step`` may give."""
        return step.reject_codes or self.reject_codes

    def targets(self, event: NotifyEvent, step: Step | None = None) -> tuple[NotifyTarget, ...]:
        """Who is told of ``event``: a human step's own targets for an approval, the
        workflow's for a halt or a stuck task."""
        if event is NotifyEvent.APPROVAL:
            return step.notify if step is not None else ()
        return self.notify.get(event, ())

    def describe(self) -> str:
        """One readable line of steps with their routes."""
        parts = []
        for s in self.steps:
            routes = []
            if s.on_failure != HALT:
                routes.append(f"fail: {s.on_failure.describe()}")
            if s.on_success != CONTINUE:
                routes.append(f"ok: {s.on_success.describe()}")
            if s.on_conflict is not None:
                routes.append(f"conflict: {s.on_conflict.describe()}")
            if s.outcomes:
                routes.append(
                    "outcomes: " + ", ".join(f"{k}={v.value}" for k, v in s.outcomes.items())
                )
            extra = f" [{'; '.join(routes)}]" if routes else ""
            parts.append(f"{s.id}({s.kind.value}){extra}")
        return f"{self.name} v{self.version}: " + " -> ".join(parts)
