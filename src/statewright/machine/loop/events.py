"""Events (facts that happened) and commands (requests to perform) of the loop layer.

Every class is a :class:`statewright.machine.seam.Record` with a stable ``type`` string
written to the log. Events carry the time they happened as ``at_ms`` (epoch milliseconds;
the reducer has no clock) and an ``event_id`` the driver gives them (keyword-only: the
reducer never reads it); commands carry a ``command_id`` the driver gives them when they
enter the outbox. Never let one stand for the other: ``LaunchWorker`` asks for a launch,
``WorkerReturned`` says a worker came back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, fields
from typing import Any, ClassVar

from statewright._errors import IllegalEventError
from statewright._record import record
from statewright.machine.loop.model import CheckOutcome, CheckResult, Verdict
from statewright.machine.seam import Record

# ---------------------------------------------------------------- events


@record
class LoopEvent(Record):
    """A fact of a loop run. ``event_id`` makes its append idempotent."""

    event_id: str = field(default="", kw_only=True)


@record
class LoopCommand(Record):
    """A request a loop run makes. ``command_id`` names it in the outbox."""

    command_id: str = field(default="", kw_only=True)


@record
class TriggerArrived(LoopEvent):
    """A schedule, an event or a message asks the idle run to start (kill switch off)."""

    type: ClassVar[str] = "TriggerArrived"
    trigger: str
    at_ms: int


@record
class ItemsFound(LoopEvent):
    """The source listed these item ids, in source order."""

    type: ClassVar[str] = "ItemsFound"
    items: tuple[str, ...]
    at_ms: int


@record
class BriefReady(LoopEvent):
    """The brief for the picked item is complete; the launch comes next."""

    type: ClassVar[str] = "BriefReady"
    item: str
    brief: str
    at_ms: int


@record
class BriefNeedsPerson(LoopEvent):
    """The brief cannot be written without a person's decision; the item parks."""

    type: ClassVar[str] = "BriefNeedsPerson"
    item: str
    reason: str
    at_ms: int


@record
class WorkerReturned(LoopEvent):
    """The worker came back with a result. ``note`` is its own words, never a verdict."""

    type: ClassVar[str] = "WorkerReturned"
    item: str
    attempt: int
    at_ms: int
    note: str = ""
    artifacts: tuple[str, ...] = ()
    receipts: tuple[str, ...] = ()
    tokens: int = 0
    money_usd: float = 0.0


@record
class WorkerNoResult(LoopEvent):
    """The cap fired, the launch failed, or the worker produced nothing usable."""

    type: ClassVar[str] = "WorkerNoResult"
    item: str
    attempt: int
    cause: str
    at_ms: int
    tokens: int = 0
    money_usd: float = 0.0


@record
class PassWaiting(LoopEvent):
    """The pass's task ``task_id`` waits for a person (an approval at ``step``): the run waits
    in RUNNING on the task's end, and the process goes to sleep there (a clean stop)."""

    type: ClassVar[str] = "PassWaiting"
    item: str
    attempt: int
    task_id: str
    at_ms: int
    step: str = ""
    role: str = ""


@record
class PassEnded(LoopEvent):
    """The pass's task ``task_id`` (a child task of the run) ended with ``status`` (a task
    status: completed, completed_early, halted, cancelled). Written in the same transaction as
    the task's terminal event; its ``event_id`` is ``TASK:ended:VERSION``. A run that has moved
    on since keeps it as a note. ``actors`` are the people who acted in the task (approved or
    rejected its steps): authors of the pass's work, so none of them decides at the run's gate."""

    type: ClassVar[str] = "PassEnded"
    item: str
    attempt: int
    task_id: str
    status: str
    at_ms: int
    reason: str = ""
    detail: str = ""
    tokens: int = 0
    money_usd: float = 0.0
    actors: tuple[str, ...] = ()

    @property
    def succeeded(self) -> bool:
        return self.status in ("completed", "completed_early")


@record
class CheckFinished(LoopEvent):
    """The checks of one pass ran; each result is pass, fail, error or timeout."""

    type: ClassVar[str] = "CheckFinished"
    item: str
    attempt: int
    results: tuple[CheckResult, ...]
    at_ms: int


@record
class ApprovalGranted(LoopEvent):
    """A person approved the proposal with this hash. ``roles`` are the roles the store says
    the person holds (the reducer checks the gate's role among them)."""

    type: ClassVar[str] = "ApprovalGranted"
    proposal_hash: str
    actor: str
    at_ms: int
    roles: tuple[str, ...] = ()


@record
class ApprovalRejected(LoopEvent):
    """A person refused the proposal; the item parks."""

    type: ClassVar[str] = "ApprovalRejected"
    proposal_hash: str
    actor: str
    reason_code: str
    at_ms: int
    roles: tuple[str, ...] = ()


@record
class GateTimedOut(LoopEvent):
    """The gate's time limit passed without a decision; the item parks."""

    type: ClassVar[str] = "GateTimedOut"
    at_ms: int


@record
class GateSleep(LoopEvent):
    """No decision yet: the process goes to sleep at the gate (a clean stop)."""

    type: ClassVar[str] = "GateSleep"
    at_ms: int


@record
class RecordAppended(LoopEvent):
    """The store acknowledged the pass record; ``receipt`` names the stored row."""

    type: ClassVar[str] = "RecordAppended"
    receipt: str
    at_ms: int


@record
class GoalEvaluated(LoopEvent):
    """The goal oracles ran (or none were asked for); their output, whole."""

    type: ClassVar[str] = "GoalEvaluated"
    results: tuple[CheckResult, ...]
    at_ms: int


@record
class ProcessStarted(LoopEvent):
    """A process took up the run: the first act of every start, handled by resume()."""

    type: ClassVar[str] = "ProcessStarted"
    at_ms: int


@record
class KillSwitch(LoopEvent):
    """The kill switch (file, ``loop stop`` or a signal) stops the process here."""

    type: ClassVar[str] = "KillSwitch"
    source: str
    at_ms: int


@record
class ItemUnparked(LoopEvent):
    """A person reopened a parked item (audited: who and why); the run does not move."""

    type: ClassVar[str] = "ItemUnparked"
    item: str
    actor: str
    reason: str
    at_ms: int


@record
class HoldCleared(LoopEvent):
    """A person (an operator) lifted the hold a STUCK run puts on new runs of its loop."""

    type: ClassVar[str] = "HoldCleared"
    actor: str
    reason: str
    at_ms: int


@record
class RunOpened(LoopEvent):
    """The first event of every run's stream: the state it opened with (IDLE, its config and
    the item ledger carried from earlier runs) and the loop file it is pinned to. It is the
    replay's start, never given to ``transition``."""

    type: ClassVar[str] = "RunOpened"
    state: Mapping[str, Any]
    definition_path: str
    definition_sha256: str
    assets: Mapping[str, str]
    at_ms: int


Event = (
    TriggerArrived
    | ItemsFound
    | BriefReady
    | BriefNeedsPerson
    | WorkerReturned
    | WorkerNoResult
    | PassWaiting
    | PassEnded
    | CheckFinished
    | ApprovalGranted
    | ApprovalRejected
    | GateTimedOut
    | GateSleep
    | RecordAppended
    | GoalEvaluated
    | ProcessStarted
    | KillSwitch
    | ItemUnparked
    | HoldCleared
    | RunOpened
)

# ---------------------------------------------------------------- commands


@record
class FindItems(LoopCommand):
    """Read the source and report the item ids."""

    type: ClassVar[str] = "FindItems"


@record
class BuildBrief(LoopCommand):
    """Write the brief for this attempt, with why earlier attempts failed."""

    type: ClassVar[str] = "BuildBrief"
    item: str
    attempt: int
    prior_failure: str = ""


@record
class LaunchWorker(LoopCommand):
    """Launch the one worker of this attempt. Emitted only on the normal entry to RUNNING."""

    type: ClassVar[str] = "LaunchWorker"
    item: str
    attempt: int
    brief: str


@record
class AwaitPass(LoopCommand):
    """Wait for the end of the pass's task ``task_id`` (work it here while it can run; sleep
    while it waits for a person). Never a new launch."""

    type: ClassVar[str] = "AwaitPass"
    item: str
    attempt: int
    task_id: str


@record
class WakeRun(LoopCommand):
    """The run sleeps (on its pass's task, or at the gate) and something moved it: the task
    ended, or a person decided at the gate. A worker that claims this (from the outbox, by its
    type) drives the run on, as 'loop run' would. Never performed by the driver that asked for
    it. With ``due_at_ms`` it is the gate's timer: not claimable before the gate's time limit
    passes, and then only if the run still sleeps at the gate that showed ``proposal_hash``."""

    type: ClassVar[str] = "WakeRun"
    run_id: str
    due_at_ms: int | None = None
    proposal_hash: str = ""


@record
class DriveRun(LoopCommand):
    """A process drives the run: the lease it holds while it does, from the line ``line`` it
    started with. The driver renews it and gives it up when it stops; the reducer never asks
    for it. Should the driver die, its lease runs out and a worker that claims this takes the
    run up where it was, as a restarted 'loop run' would (an unclean start, counted), unless a
    process started on the run since."""

    type: ClassVar[str] = "DriveRun"
    run_id: str
    line: int


@record
class StopWorker(LoopCommand):
    """Stop any worker left alive from this attempt. Never followed by a relaunch."""

    type: ClassVar[str] = "StopWorker"
    item: str
    attempt: int


@record
class RunChecks(LoopCommand):
    """Run the named checks against assets the worker cannot write."""

    type: ClassVar[str] = "RunChecks"
    item: str
    attempt: int
    checks: tuple[str, ...]


@record
class RequestApproval(LoopCommand):
    """Ask a person with ``role`` to approve the proposal ``shown`` (by proposal_hash)."""

    type: ClassVar[str] = "RequestApproval"
    item: str
    attempt: int
    proposal_hash: str
    role: str
    shown: Mapping[str, object] = field(default_factory=dict)
    timeout_at_ms: int | None = None


@record
class AppendRecord(LoopCommand):
    """Append the pass record (idempotent by ``record_no``) and report the receipt."""

    type: ClassVar[str] = "AppendRecord"
    record_no: int
    item: str
    attempt: int
    verdict: Verdict
    cause: str = ""
    note: str = ""
    checks: tuple[CheckResult, ...] = ()
    tokens: int = 0
    money_usd: float = 0.0
    decided_by: str = ""


@record
class EvaluateGoal(LoopCommand):
    """Run these goal oracles now. Empty when the item clause is already false."""

    type: ClassVar[str] = "EvaluateGoal"
    oracles: tuple[str, ...]


Command = (
    FindItems | BuildBrief | LaunchWorker | AwaitPass | WakeRun | DriveRun | StopWorker | RunChecks
    | RequestApproval | AppendRecord | EvaluateGoal
)


EVENT_TYPES: Mapping[str, type[LoopEvent]] = {
    cls.type: cls
    for cls in (
        TriggerArrived, ItemsFound, BriefReady, BriefNeedsPerson, WorkerReturned, WorkerNoResult, PassWaiting,
        PassEnded, CheckFinished, ApprovalGranted, ApprovalRejected, GateTimedOut, GateSleep, RecordAppended,
        GoalEvaluated, ProcessStarted, KillSwitch, ItemUnparked, HoldCleared, RunOpened,
    )
}
COMMAND_TYPES: Mapping[str, type[LoopCommand]] = {
    cls.type: cls
    for cls in (FindItems, BuildBrief, LaunchWorker, AwaitPass, WakeRun, DriveRun, StopWorker, RunChecks,
                RequestApproval, AppendRecord, EvaluateGoal)
}


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """Rebuild a loop event from its logged form (``LoopEvent.to_dict()``)."""
    return _rebuild(EVENT_TYPES, data)  # type: ignore[return-value]


def command_from_dict(data: Mapping[str, Any]) -> Command:
    """Rebuild a loop command from its logged form (``LoopCommand.to_dict()``)."""
    return _rebuild(COMMAND_TYPES, data)  # type: ignore[return-value]


def _rebuild(types: Mapping[str, type[Record]], data: Mapping[str, Any]) -> Record:
    kind = str(data.get("type"))
    cls = types.get(kind)
    if cls is None:
        raise IllegalEventError(f"unknown loop record type {kind!r}", event_type=kind)
    names = {f.name for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in names:
            continue
        if key in ("results", "checks") and value and isinstance(value[0], Mapping):
            value = tuple(CheckResult(c["name"], CheckOutcome(c["outcome"]), c.get("output", "")) for c in value)
        elif key == "verdict":
            value = Verdict(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return cls(**kwargs)
