"""The loop layer's vocabulary and its immutable state.

Pure: no I/O, no clock, no randomness. Time arrives inside events as epoch
milliseconds; the state only ever holds what events and the definition told it.

The state table itself (the 25 legal rows) lives in :data:`TABLE`; the reducer
refuses to make any move that is not one of its rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from enum import StrEnum

from statewright._errors import LoopDefinitionError
from statewright._record import record


class LoopStatus(StrEnum):
    """Where a run is: eight working states and four terminals."""

    IDLE = "idle"
    FINDING = "finding"
    ASSIGNING = "assigning"
    RUNNING = "running"
    CHECKING = "checking"
    AWAITING_HUMAN = "awaiting_human"
    RECORDING = "recording"
    DECIDING = "deciding"
    DONE = "done"
    ESCALATED = "escalated"
    STUCK = "stuck"
    OUT_OF_BUDGET = "out_of_budget"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINALS

    @classmethod
    def _missing_(cls, value: object) -> LoopStatus | None:
        """Runs recorded before the one casing stored the names in upper case: read them too."""
        if not isinstance(value, str):
            return None
        return next((s for s in cls if s.value == value.lower()), None)


TERMINALS = frozenset({LoopStatus.DONE, LoopStatus.ESCALATED, LoopStatus.STUCK, LoopStatus.OUT_OF_BUDGET})
WORKING = tuple(s for s in LoopStatus if s not in TERMINALS)


class ItemStatus(StrEnum):
    """An item in the plan: workable while open and attempts remain."""

    OPEN = "open"
    CLOSED = "closed"
    PARKED = "parked"


class CheckOutcome(StrEnum):
    """One check or goal oracle. Only ``pass`` passes: an error or a timeout is a fail."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    TIMEOUT = "timeout"


class Verdict(StrEnum):
    """What one pass came to, appended in RECORDING."""

    PASS = "pass"
    FAIL = "fail"
    NO_RESULT = "no_result"
    DENIED = "denied"
    GATE_TIMEOUT = "gate_timeout"
    NEEDS_PERSON = "needs_person"

    @classmethod
    def _missing_(cls, value: object) -> Verdict | None:
        """Runs recorded before the one casing stored these words: read them too."""
        return LEGACY_VERDICTS.get(value) if isinstance(value, str) else None


#: The verdicts as runs recorded before the one casing stored them.
LEGACY_VERDICTS: Mapping[str, Verdict] = {
    "PASS": Verdict.PASS,
    "FAIL": Verdict.FAIL,
    "no result": Verdict.NO_RESULT,
    "gate timeout": Verdict.GATE_TIMEOUT,
    "needs a person": Verdict.NEEDS_PERSON,
}


class LineKind(StrEnum):
    """Why a record line was written."""

    MOVE = "move"  # an event moved the run along a row of the table
    START = "start"  # a process start after a clean stop (excused, uncounted)
    RESTART = "restart"  # an unclean process start, counted against the state
    CLEAN_STOP = "clean stop"  # kill switch, signal, or asleep at a gate
    OPERATOR = "operator"  # an audited act of a person (unpark); the state does not move
    NOTE = "note"  # a fact kept that does not move the run (a pass's task ended after the run moved on)
    PROGRESS = "progress"  # one pass of a wave is through the state; the run waits there for the others


class BudgetCap(StrEnum):
    """The loop-level caps, checked by rule 4 of DECIDING."""

    PASSES = "passes"
    TOKENS = "tokens"
    MONEY_USD = "money_usd"
    WALL_TIME = "wall_time"


S = LoopStatus


@record
class Row:
    """One row of the outer-loop state table."""

    source: LoopStatus
    when: str
    target: LoopStatus


_RESTART_ROWS = tuple(
    Row(s, "third restart in the same state", S.STUCK)
    for s in (
        S.FINDING,
        S.ASSIGNING,
        S.RUNNING,
        S.CHECKING,
        S.AWAITING_HUMAN,
        S.RECORDING,
        S.DECIDING,
    )
)

TABLE: tuple[Row, ...] = (
    Row(S.IDLE, "trigger arrives, kill switch off", S.FINDING),
    Row(S.FINDING, "a workable item exists; pick one", S.ASSIGNING),
    Row(S.FINDING, "no workable item", S.DECIDING),
    Row(S.ASSIGNING, "brief complete; launch comes next", S.RUNNING),
    Row(S.ASSIGNING, "brief needs a person's decision", S.RECORDING),
    Row(S.RUNNING, "worker returns a result", S.CHECKING),
    Row(S.RUNNING, "cap fires, launch fails, or no result", S.RECORDING),
    Row(S.CHECKING, "fail, timeout, or unfinished twice", S.RECORDING),
    Row(S.CHECKING, "verdict pass, item ungated", S.RECORDING),
    Row(S.CHECKING, "pass, and a person must approve", S.AWAITING_HUMAN),
    Row(S.AWAITING_HUMAN, "approval for that proposal_hash", S.RECORDING),
    Row(S.AWAITING_HUMAN, "denial, or time limit passes", S.RECORDING),
    Row(S.RECORDING, "store acknowledges the append", S.DECIDING),
    Row(S.DECIDING, "1. goal predicate true", S.DONE),
    Row(S.DECIDING, "2. no workable item left", S.ESCALATED),
    Row(S.DECIDING, "3. passes since last close >= threshold", S.STUCK),
    Row(S.DECIDING, "4. a loop budget is spent", S.OUT_OF_BUDGET),
    Row(S.DECIDING, "5. none of the above", S.FINDING),
    *_RESTART_ROWS,
)

LEGAL_MOVES: frozenset[tuple[LoopStatus, LoopStatus]] = frozenset((r.source, r.target) for r in TABLE)


@record
class LoopConfig:
    """What the reducer needs from a loop definition: names, thresholds and caps.

    Durations are milliseconds. ``max_passes`` is required: a hard cap on passes is
    the floor beneath every goal function.
    """

    loop: str
    check_names: tuple[str, ...]
    oracle_names: tuple[str, ...]
    max_passes: int
    all_items_closed: bool = True
    gate_role: str | None = None
    gate_timeout_ms: int | None = None
    max_tokens: int | None = None
    max_money_usd: float | None = None
    wall_time_ms: int | None = None
    attempts_per_item: int = 3
    stuck_after: int = 5
    restart_limit: int = 2
    parallel: int = 1  # passes worked at once (a wave), one item each
    pass_tokens: int | None = None  # what one pass may spend: reserved from the budget at launch
    pass_money_usd: float | None = None

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not self.check_names:
            problems.append("check: list at least one check; a pass needs an oracle")
        if not self.oracle_names:
            problems.append(
                "goal.oracles: list at least one oracle command; a goal a machine"
                " cannot check is not a goal a loop can run toward"
            )
        for name, names in (("check", self.check_names), ("goal.oracles", self.oracle_names)):
            if len(set(names)) != len(names):
                problems.append(f"{name}: names must be unique, got {list(names)}")
        for label, value in (
            ("budgets.passes", self.max_passes),
            ("attempts_per_item", self.attempts_per_item),
            ("stuck_after", self.stuck_after),
            ("parallel", self.parallel),
        ):
            if value < 1:
                problems.append(f"{label}: must be at least 1, got {value}")
        if self.restart_limit < 0:
            problems.append(f"restart_limit: must be 0 or more, got {self.restart_limit}")
        if self.parallel > self.max_passes:
            problems.append(
                f"parallel: {self.parallel} passes at once is over the budget of {self.max_passes} passes"
                " (budgets.passes); lower parallel or raise the budget"
            )
        if self.parallel > 1:
            for cap, per_pass, name in (
                (self.max_tokens, self.pass_tokens, "tokens"),
                (self.max_money_usd, self.pass_money_usd, "money_usd"),
            ):
                if cap is not None and per_pass is None:
                    problems.append(
                        f"budgets.per_pass.{name}: required with parallel > 1 and budgets.{name}: what one pass"
                        " may spend is reserved when it launches, so that passes at once never overspend"
                    )
        if problems:
            raise LoopDefinitionError(problems, source=f"loop {self.loop!r}")


@record
class ItemLedger:
    """An item's standing; carried into the next run (parked stays parked).

    ``attempts`` counts every attempt ever made (so attempt numbers, and the pass keys made
    from them, never repeat); ``reopened_after`` is the count when a person last unparked
    the item: the attempts left are counted from there."""

    id: str
    status: ItemStatus = ItemStatus.OPEN
    attempts: int = 0
    last_failure: str = ""
    reopened_after: int = 0

    def attempts_left(self, per_item: int) -> int:
        return per_item - (self.attempts - self.reopened_after)


@record
class CheckResult:
    """One check or goal oracle: its name, outcome and the output whole."""

    name: str
    outcome: CheckOutcome
    output: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome is CheckOutcome.PASS

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "outcome": str(self.outcome), "output": self.output}


@record
class Pass:
    """The pass in flight: filled in state by state, cleared in RECORDING."""

    item: str
    attempt: int
    brief: str = ""
    launched: bool = False
    note: str = ""
    artifacts: tuple[str, ...] = ()
    receipts: tuple[str, ...] = ()
    tokens: int = 0
    money_usd: float = 0.0
    checks: tuple[CheckResult, ...] = ()
    proposal_hash: str = ""
    shown: Mapping[str, object] = field(default_factory=dict)
    gate_started_at_ms: int | None = None
    verdict: Verdict | None = None
    cause: str = ""
    decided_by: str = ""
    task_id: str = ""  # the pass's task the run waits on in RUNNING (it waits for a person)
    asleep: bool = False  # no process drives the run: it sleeps on that task or at the gate (a worker wakes it)
    authors: tuple[str, ...] = ()  # the people who acted in that task: none of them decides at the gate
    returned: bool = False  # the worker came back with a result that the checks have yet to judge


@record
class LoopState:
    """A run's state. Build the next one with ``dataclasses.replace``."""

    run_id: str
    config: LoopConfig
    status: LoopStatus = LoopStatus.IDLE
    items: tuple[ItemLedger, ...] = ()
    plan: tuple[str, ...] = ()
    current: Pass | None = None  # the pass in flight; with ``parallel`` > 1, the wave's first
    more: tuple[Pass, ...] = ()  # the wave's other passes, in the order they were picked
    passes: int = 0
    records: int = 0
    passes_since_last_close: int = 0
    tokens_spent: int = 0
    money_spent_usd: float = 0.0
    started_at_ms: int | None = None
    restarts_here: int = 0
    clean_stop: bool = False
    recent_failures: tuple[str, ...] = ()
    reason: str = ""
    cleared_by: str = ""  # who lifted the hold a STUCK run puts on its loop, and why
    cleared_reason: str = ""

    @property
    def wave(self) -> tuple[Pass, ...]:
        """The passes in flight: one, or up to ``parallel``; empty between waves."""
        return () if self.current is None else (self.current, *self.more)

    @property
    def held(self) -> bool:
        """A STUCK run that nobody has cleared holds every new run of its loop."""
        return self.status is LoopStatus.STUCK and not self.cleared_by

    def item(self, item_id: str) -> ItemLedger | None:
        for entry in self.items:
            if entry.id == item_id:
                return entry
        return None

    def workable(self) -> tuple[str, ...]:
        """Plan items that are open with attempts left, in plan order."""
        out: list[str] = []
        per_item = self.config.attempts_per_item
        for item_id in self.plan:
            entry = self.item(item_id)
            if entry is not None and entry.status is ItemStatus.OPEN and entry.attempts_left(per_item) > 0:
                out.append(item_id)
        return tuple(out)

    def unclosed(self) -> tuple[str, ...]:
        """Plan items that are not closed (open or parked)."""
        return tuple(i for i in self.plan if (e := self.item(i)) is None or e.status is not ItemStatus.CLOSED)


@record
class RecordLine:
    """One line of the record: the state, the event or check, what was written."""

    state: LoopStatus
    event: str
    written: Mapping[str, object]
    summary: str
    next_state: LoopStatus
    kind: LineKind
    event_type: str
    at_ms: int
