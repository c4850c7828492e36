"""Hypothesis strategies for the loop reducer: configs and state-aware event streams.

Event streams are driven by one Hypothesis-made ``random.Random`` per example (a single
draw), because drawing every event through Hypothesis costs a millisecond a draw.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from statewright.machine.loop.events import (
    ApprovalGranted,
    ApprovalRejected,
    BriefNeedsPerson,
    BriefReady,
    CheckFinished,
    Event,
    GateSleep,
    GateTimedOut,
    GoalEvaluated,
    ItemsFound,
    KillSwitch,
    PassEnded,
    PassWaiting,
    ProcessStarted,
    RecordAppended,
    TriggerArrived,
    WorkerNoResult,
    WorkerReturned,
)
from statewright.machine.loop.model import CheckOutcome, CheckResult, LoopConfig, LoopState, LoopStatus

S = LoopStatus
ITEMS = ("a", "b", "c")
TASK_ENDS = ("completed", "completed_early", "halted", "cancelled")
NOTES = ("", "Done. All tests pass.", "DONE", "goal met; stop the loop", "I could not finish")


@st.composite
def configs(draw: st.DrawFn) -> LoopConfig:
    gated = draw(st.booleans())
    return LoopConfig(
        loop="prop",
        check_names=tuple(draw(st.sampled_from([("suite",), ("suite", "lint")]))),
        oracle_names=tuple(draw(st.sampled_from([("tests",), ("tests", "lint")]))),
        max_passes=draw(st.integers(1, 8)),
        all_items_closed=draw(st.booleans()),
        gate_role="maintainer" if gated else None,
        gate_timeout_ms=draw(st.sampled_from([None, 1000])) if gated else None,
        max_tokens=draw(st.sampled_from([None, 500, 5000])),
        attempts_per_item=draw(st.integers(1, 3)),
        stuck_after=draw(st.integers(1, 5)),
        restart_limit=draw(st.integers(0, 2)),
    )


def _results(rnd: random.Random, names: tuple[str, ...]) -> tuple[CheckResult, ...]:
    out = []
    for name in names:
        if rnd.randint(0, 9) == 0:
            continue  # a result that never arrived
        # pass is likelier, so runs get far enough to reach every terminal
        outcome = rnd.choice([CheckOutcome.PASS, CheckOutcome.PASS, *CheckOutcome])
        out.append(CheckResult(name, outcome, f"{name} said {outcome}"))
    if rnd.randint(0, 9) == 0:
        out.append(CheckResult("intruder", CheckOutcome.PASS, "not asked for"))
    return tuple(out)


def next_event(rnd: random.Random, state: LoopState, now: int) -> Event:
    """Mostly an event that fits the state (with fitting or wrong ids), sometimes anything."""
    roll = rnd.randint(0, 19)
    if roll == 0:
        return ProcessStarted(now)
    if roll == 1:
        return KillSwitch("test", now)
    cur = state.current
    item = cur.item if cur and rnd.randint(0, 9) else rnd.choice(ITEMS)
    attempt = cur.attempt if cur and rnd.randint(0, 9) else rnd.randint(1, 4)
    cfg = state.config
    status = state.status if roll > 3 else rnd.choice(list(S))
    tokens = rnd.randint(0, 400)
    if status is S.IDLE:
        return TriggerArrived("schedule", now)
    if status is S.FINDING:
        return ItemsFound(tuple(rnd.sample(ITEMS, rnd.randint(0, 3))), now)
    if status is S.ASSIGNING:
        if rnd.randint(0, 5) == 0:
            return BriefNeedsPerson(item, "unclear", now)
        return BriefReady(item, "brief", now)
    if status is S.RUNNING:
        kind = rnd.randint(0, 7)
        task = f"t-{item}-{attempt}"
        if kind == 0:
            return WorkerNoResult(item, attempt, "cap fired", now, tokens=tokens)
        if kind == 1:
            return PassWaiting(item, attempt, task, now, step="approve", role="maintainer")
        if kind == 2:  # the pass's task ended (a child's end arrives in any state)
            return PassEnded(item, attempt, task, rnd.choice(TASK_ENDS), now, tokens=tokens)
        return WorkerReturned(item, attempt, now, note=rnd.choice(NOTES), tokens=tokens)
    if status is S.CHECKING:
        return CheckFinished(item, attempt, _results(rnd, cfg.check_names), now)
    if status is S.AWAITING_HUMAN:
        fp = cur.proposal_hash if cur and rnd.randint(0, 5) else "f" * 64
        kind = rnd.randint(0, 3)
        if kind == 0:
            return ApprovalRejected(fp, "bob", "no", now, ("maintainer",))
        if kind == 1:
            return GateTimedOut(now + rnd.choice([0, 1000, 10_000]))
        if kind == 2:
            return GateSleep(now)
        return ApprovalGranted(fp, "ann", now, ("maintainer",))
    if status is S.RECORDING:
        return RecordAppended(f"receipt-{now}", now)
    if status is S.DECIDING:
        return GoalEvaluated(_results(rnd, cfg.oracle_names), now)
    return TriggerArrived("late", now)  # a terminal status drawn: anything is illegal there
