"""Task state: immutable, serialisable, rebuilt from the log by replaying the reducer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, fields
from enum import StrEnum
from typing import Any

from statewright._canonical import encode_compact
from statewright._record import record
from statewright.definition.model import Workflow
from statewright.machine._records import record_dict
from statewright.machine.children import Child, ParentRef


class TaskStatus(StrEnum):
    NEW = "new"  # created, TaskSubmitted not yet applied
    RUNNING = "running"  # a step command is outstanding
    WAITING = "waiting"  # a wait step sleeps on a durable timer
    AWAITING_APPROVAL = "awaiting_approval"
    COMPLETED = "completed"
    COMPLETED_EARLY = "completed_early"
    HALTED = "halted"
    CANCELLED = "cancelled"


TERMINAL = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.COMPLETED_EARLY, TaskStatus.HALTED, TaskStatus.CANCELLED}
)


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    HALTED = "halted"  # a policy stop (verdict outcome mapped to halt)


@record
class Attempt:
    """One recorded attempt of one step: written once, when it ends."""

    step: str
    kind: str
    owner: str
    actor: str
    number: int
    outcome: Outcome
    reason: str = ""
    detail: str = ""
    verdict: Mapping[str, Any] | None = None
    artifacts: Mapping[str, str] = field(default_factory=dict)
    output: str = ""
    cost: Mapping[str, float] = field(default_factory=dict)
    note: str = ""
    started_at_ms: int = 0
    ended_at_ms: int = 0
    epoch: int = 0
    route: str = ""
    checks: int = 0
    key: str = ""  # the idempotency key it ran under (see machine.task.idempotency_key)
    deliveries: int = 1  # starts of its command (more than 1: redelivered after a worker died)
    retries: int = 0  # transient errors retried before it ended


@record
class Current:
    """The step in flight and what the reducer expects to hear about it next."""

    step: str
    attempt: int
    started_at_ms: int
    command_id: str = ""
    repair_used: bool = False
    checks: int = 0
    timer_id: str = ""
    proposal_hash: str = ""
    expires_at_ms: int | None = None
    key: str = ""  # the idempotency key of an ai, code or wait step's attempt
    captured: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # a human step's artifacts
    stuck_timer_id: str = ""  # the step's stuck_after timer, until it fires


@record
class LoopBack:
    """A failure that sent the task back: the memory the next brief carries."""

    target: str
    target_attempt: int
    failed_step: str
    failed_attempt: int
    reason: str
    must_fix: tuple[str, ...] = ()
    output: str = ""


@record
class Approval:
    """An approval the task recorded: who approved which proposal at which step, and when."""

    step: str
    actor: str
    proposal_hash: str
    at_ms: int
    token_id: str = ""  # checked again before the approved work runs


@record
class OperatorAction:
    """An operator's retry or cancel, as the task recorded it."""

    action: str  # retry | cancel
    actor: str
    reason: str
    at_ms: int
    step: str = ""


@record
class Evidence:
    """Evidence a person supplied to the task, in the order given."""

    actor: str
    at_ms: int
    evidence: Mapping[str, Any]
    note: str = ""


@record
class HaltInfo:
    """Where the task halted, and why."""

    step: str
    reason: str
    detail: str = ""


@record
class TaskState:
    """A task's state: what its events, applied in order from ``new_task``, add up to."""

    task_id: str
    workflow: Workflow = field(compare=False, repr=False)
    status: TaskStatus = TaskStatus.NEW
    version: int = 0
    input: Mapping[str, Any] = field(default_factory=dict)
    results: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    step_index: int = 0
    current: Current | None = None
    attempts: tuple[Attempt, ...] = ()
    loop_backs: tuple[LoopBack, ...] = ()
    approvals: tuple[Approval, ...] = ()
    operator_actions: tuple[OperatorAction, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    halt: HaltInfo | None = None
    epoch: int = 0
    created_at_ms: int = 0
    updated_at_ms: int = 0
    parent: ParentRef | None = None  # a child task's parent
    children: tuple[Child, ...] = ()  # the child tasks it started, in the order started
    priority: int = 0  # higher is claimed first
    tenant: str = ""  # whose fair share and limits its steps count against

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def cost(self) -> dict[str, float]:
        """What the task's attempts cost so far, summed: tokens_in, tokens_out, money_usd,
        seconds, and any other figure an attempt reported."""
        total: dict[str, float] = {"tokens_in": 0, "tokens_out": 0, "money_usd": 0.0, "seconds": 0.0}
        for a in self.attempts:
            for k, v in a.cost.items():
                if isinstance(v, int | float):
                    total[k] = total.get(k, 0) + v
        return total

    def attempts_of(self, step_id: str, *, epoch: int | None = None) -> list[Attempt]:
        return [
            a
            for a in self.attempts
            if a.step == step_id and (epoch is None or a.epoch == epoch)
        ]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in _STATE_FIELDS:
            value = getattr(self, key)
            if isinstance(value, tuple):
                out[key] = [record_dict(v) for v in value]
            elif value is not None and hasattr(value, "__dataclass_fields__"):
                out[key] = record_dict(value)
            else:
                out[key] = value
        out["workflow"] = {
            "name": self.workflow.name,
            "version": self.workflow.version,
            "hash": self.workflow.content_hash,
        }
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], workflow: Workflow) -> TaskState:
        cur = data.get("current")
        halt = data.get("halt")
        return cls(
            task_id=data["task_id"],
            workflow=workflow,
            status=TaskStatus(data["status"]),
            version=int(data["version"]),
            input=data.get("input", {}),
            results=data.get("results", {}),
            step_index=int(data.get("step_index", 0)),
            current=Current(**cur) if cur else None,
            attempts=tuple(
                Attempt(**{**a, "outcome": Outcome(a["outcome"])}) for a in data.get("attempts", [])
            ),
            loop_backs=tuple(
                LoopBack(**{**lb, "must_fix": tuple(lb.get("must_fix", ()))})
                for lb in data.get("loop_backs", [])
            ),
            approvals=tuple(Approval(**a) for a in data.get("approvals", [])),
            operator_actions=tuple(OperatorAction(**o) for o in data.get("operator_actions", [])),
            evidence=tuple(Evidence(**e) for e in data.get("evidence", [])),
            halt=HaltInfo(**halt) if halt else None,
            epoch=int(data.get("epoch", 0)),
            created_at_ms=int(data.get("created_at_ms", 0)),
            updated_at_ms=int(data.get("updated_at_ms", 0)),
            parent=ParentRef.from_dict(data["parent"]) if data.get("parent") else None,
            children=tuple(Child(**c) for c in data.get("children", [])),
            priority=int(data.get("priority", 0)),
            tenant=str(data.get("tenant", "")),
        )


#: The serialised fields of TaskState, in declaration order (the workflow is written as a reference).
_STATE_FIELDS = tuple(f.name for f in fields(TaskState) if f.name != "workflow")


def projection(state: TaskState) -> Projection:
    """``state.to_dict()`` for serialising at once, as the store does after every step: the
    same JSON, but each record's own attribute dictionary (its fields, in declaration order)
    is shared instead of copied. Read it, never change it."""
    out = Projection()
    out.state = state
    for key in _STATE_FIELDS:
        value = getattr(state, key)
        if isinstance(value, tuple):
            out[key] = [v.__dict__ for v in value]
        elif value is not None and hasattr(value, "__dataclass_fields__"):
            out[key] = value.__dict__
        else:
            out[key] = value
    out["workflow"] = {
        "name": state.workflow.name,
        "version": state.workflow.version,
        "hash": state.workflow.content_hash,
    }
    return out


# The compact JSON of records already written, by id (the record is kept, so its id cannot
# be reused while it is here). A task's attempts, loop-backs and approvals only ever grow, and
# each is immutable: a step writes its task's whole projection, but encodes only what is new.
_RECORD_TEXT: dict[int, tuple[object, str]] = {}
_RECORD_TEXT_MAX = 4096
_STATE_FIELD_SET = frozenset(_STATE_FIELDS)


class Projection(dict[str, Any]):
    """What ``projection`` returns: the dict, and ``compact_json()``, its text as
    ``json.dumps(self, separators=(",", ":"), ensure_ascii=False)`` writes it, with the
    records of the state's tuples (attempts, loop-backs, ...) encoded once each and their
    text reused by every later step of the task. Stores write it with that method when the
    mapping they are given has it."""

    __slots__ = ("state",)
    state: TaskState

    def compact_json(self) -> str:
        parts: list[str] = []
        rest: dict[str, Any] = {}  # the keys since the last tuple of records, encoded together
        for key, value in self.items():
            held = getattr(self.state, key, None) if key in _STATE_FIELD_SET else None
            if not (held and isinstance(held, tuple) and isinstance(value, list) and len(value) == len(held)
                    and all(d is r.__dict__ for d, r in zip(value, held, strict=True))):
                rest[key] = value  # anything but the list projection() made is encoded as it is
                continue
            if rest:
                parts.append(encode_compact(rest)[1:-1])
                rest = {}
            parts.append(f"{encode_compact(key)}:[{','.join(map(_record_text, held))}]")
        if rest:
            parts.append(encode_compact(rest)[1:-1])
        return "{" + ",".join(parts) + "}"


def _record_text(r: object) -> str:
    hit = _RECORD_TEXT.get(id(r))
    if hit is not None and hit[0] is r:
        return hit[1]
    text = encode_compact(r.__dict__)
    if len(_RECORD_TEXT) >= _RECORD_TEXT_MAX:
        _RECORD_TEXT.clear()
    _RECORD_TEXT[id(r)] = (r, text)
    return text


def new_task(task_id: str, workflow: Workflow) -> TaskState:
    """The state before TaskSubmitted: version 0, no commands."""
    return TaskState(task_id=task_id, workflow=workflow)
