"""Events (facts that happened) and commands (requests to perform) of the loop layer.

Every class has a stable ``type`` string written to the record. Events carry the
time they happened as ``at_ms`` (epoch milliseconds): the reducer has no clock.
Never let one stand for the other: ``LaunchWorker`` asks for a launch,
``WorkerReturned`` says a worker came back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from statewright.loop.model import CheckResult, Verdict

# ---------------------------------------------------------------- events


@dataclass(frozen=True)
class TriggerArrived:
    """A schedule, an event or a message asks the idle run to start (kill switch off)."""

    type: ClassVar[str] = "TriggerArrived"
    trigger: str
    at_ms: int


@dataclass(frozen=True)
class ItemsFound:
    """The source listed these item ids, in source order."""

    type: ClassVar[str] = "ItemsFound"
    items: tuple[str, ...]
    at_ms: int


@dataclass(frozen=True)
class BriefReady:
    """The brief for the picked item is complete; the launch comes next."""

    type: ClassVar[str] = "BriefReady"
    item: str
    brief: str
    at_ms: int


@dataclass(frozen=True)
class BriefNeedsPerson:
    """The brief cannot be written without a person's decision; the item parks."""

    type: ClassVar[str] = "BriefNeedsPerson"
    item: str
    reason: str
    at_ms: int


@dataclass(frozen=True)
class WorkerReturned:
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


@dataclass(frozen=True)
class WorkerNoResult:
    """The cap fired, the launch failed, or the worker produced nothing usable."""

    type: ClassVar[str] = "WorkerNoResult"
    item: str
    attempt: int
    cause: str
    at_ms: int
    tokens: int = 0
    money_usd: float = 0.0


@dataclass(frozen=True)
class CheckFinished:
    """The checks of one pass ran; each result is pass, fail, error or timeout."""

    type: ClassVar[str] = "CheckFinished"
    item: str
    attempt: int
    results: tuple[CheckResult, ...]
    at_ms: int


@dataclass(frozen=True)
class ApprovalGranted:
    """A person approved the proposal with this fingerprint."""

    type: ClassVar[str] = "ApprovalGranted"
    fingerprint: str
    who: str
    at_ms: int


@dataclass(frozen=True)
class ApprovalDenied:
    """A person refused the proposal; the item parks."""

    type: ClassVar[str] = "ApprovalDenied"
    fingerprint: str
    who: str
    reason: str
    at_ms: int


@dataclass(frozen=True)
class GateTimedOut:
    """The gate's time limit passed without a decision; the item parks."""

    type: ClassVar[str] = "GateTimedOut"
    at_ms: int


@dataclass(frozen=True)
class GateSleep:
    """No decision yet: the process goes to sleep at the gate (a clean stop)."""

    type: ClassVar[str] = "GateSleep"
    at_ms: int


@dataclass(frozen=True)
class RecordAppended:
    """The store acknowledged the pass record; ``receipt`` names the stored row."""

    type: ClassVar[str] = "RecordAppended"
    receipt: str
    at_ms: int


@dataclass(frozen=True)
class GoalEvaluated:
    """The goal oracles ran (or none were asked for); their output, whole."""

    type: ClassVar[str] = "GoalEvaluated"
    results: tuple[CheckResult, ...]
    at_ms: int


@dataclass(frozen=True)
class ProcessStarted:
    """A process took up the run: the first act of every start, handled by resume()."""

    type: ClassVar[str] = "ProcessStarted"
    at_ms: int


@dataclass(frozen=True)
class KillSwitch:
    """The kill switch (file, ``loop stop`` or a signal) stops the process here."""

    type: ClassVar[str] = "KillSwitch"
    source: str
    at_ms: int


@dataclass(frozen=True)
class ItemUnparked:
    """A person reopened a parked item (audited: who and why); the run does not move."""

    type: ClassVar[str] = "ItemUnparked"
    item: str
    actor: str
    reason: str
    at_ms: int


Event = (
    TriggerArrived
    | ItemsFound
    | BriefReady
    | BriefNeedsPerson
    | WorkerReturned
    | WorkerNoResult
    | CheckFinished
    | ApprovalGranted
    | ApprovalDenied
    | GateTimedOut
    | GateSleep
    | RecordAppended
    | GoalEvaluated
    | ProcessStarted
    | KillSwitch
    | ItemUnparked
)

# ---------------------------------------------------------------- commands


@dataclass(frozen=True)
class FindItems:
    """Read the source and report the item ids."""

    type: ClassVar[str] = "FindItems"


@dataclass(frozen=True)
class BuildBrief:
    """Write the brief for this attempt, with why earlier attempts failed."""

    type: ClassVar[str] = "BuildBrief"
    item: str
    attempt: int
    prior_failure: str = ""


@dataclass(frozen=True)
class LaunchWorker:
    """Launch the one worker of this attempt. Emitted only on the normal entry to RUNNING."""

    type: ClassVar[str] = "LaunchWorker"
    item: str
    attempt: int
    brief: str


@dataclass(frozen=True)
class StopWorker:
    """Stop any worker left alive from this attempt. Never followed by a relaunch."""

    type: ClassVar[str] = "StopWorker"
    item: str
    attempt: int


@dataclass(frozen=True)
class RunChecks:
    """Run the named checks against assets the worker cannot write."""

    type: ClassVar[str] = "RunChecks"
    item: str
    attempt: int
    checks: tuple[str, ...]


@dataclass(frozen=True)
class RequestApproval:
    """Ask a person with ``role`` to approve the proposal ``shown`` (by fingerprint)."""

    type: ClassVar[str] = "RequestApproval"
    item: str
    attempt: int
    fingerprint: str
    role: str
    shown: Mapping[str, object] = field(default_factory=dict)
    timeout_at_ms: int | None = None


@dataclass(frozen=True)
class AppendRecord:
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


@dataclass(frozen=True)
class EvaluateGoal:
    """Run these goal oracles now. Empty when the item clause is already false."""

    type: ClassVar[str] = "EvaluateGoal"
    oracles: tuple[str, ...]


Command = FindItems | BuildBrief | LaunchWorker | StopWorker | RunChecks | RequestApproval | AppendRecord | EvaluateGoal
