"""Shared pieces of the loop reducer: the Transition type, record lines, entry commands."""

from collections.abc import Mapping
from dataclasses import replace

from statewright._canonical import sha256_hex
from statewright._errors import IllegalEventError, LoopInvariantError
from statewright.machine import seam
from statewright.machine.loop.events import (
    AppendRecord,
    AwaitPass,
    BuildBrief,
    Command,
    EvaluateGoal,
    Event,
    FindItems,
    GateSleep,
    KillSwitch,
    RequestApproval,
    RunChecks,
    StopWorker,
    WakeRun,
)
from statewright.machine.loop.model import (
    LEGAL_MOVES,
    ItemLedger,
    LineKind,
    LoopState,
    LoopStatus,
    Pass,
    RecordLine,
    Verdict,
)

S = LoopStatus
FAILURE_TEXT_CHARS = 4000
RECENT_FAILURES = 5


Transition = seam.Transition[LoopState, Command, RecordLine | None]
"""The new state, the commands to perform after the line is stored, and the line."""


def entry_commands(state: LoopState) -> tuple[Command, ...]:
    """The commands that (re)do the work of ``state.status``. Never a launch: a pass in
    RUNNING is waited on only when its task is known (it waits for a person)."""
    here = state.status
    if here is S.FINDING:
        return (FindItems(),)
    if here is S.ASSIGNING:
        cur = current(state)
        entry = state.item(cur.item)
        return (BuildBrief(cur.item, cur.attempt, entry.last_failure if entry else ""),)
    if here is S.CHECKING:
        cur = current(state)
        return (RunChecks(cur.item, cur.attempt, state.config.check_names),)
    if here is S.AWAITING_HUMAN:
        return (approval_command(state),)
    if here is S.RECORDING:
        return (append_command(state),)
    if here is S.DECIDING:
        return (goal_command(state),)
    if here is S.RUNNING and state.current is not None and state.current.task_id:
        cur = state.current
        return (AwaitPass(cur.item, cur.attempt, cur.task_id),)
    if here is S.RUNNING:
        msg = f"run {state.run_id}: RUNNING is never run again; resume() records 'no result'"
        raise LoopInvariantError(msg)
    return ()


def proposal_hash(shown: Mapping[str, object]) -> str:
    """sha256 of the canonical JSON of what a person was shown."""
    return sha256_hex(dict(shown))


def clean_stop(state: LoopState, event: KillSwitch | GateSleep, text: str) -> Transition:
    commands: tuple[Command, ...] = ()
    if state.status is S.RUNNING and state.current is not None:
        commands = (StopWorker(state.current.item, state.current.attempt),)
    new = replace(state, clean_stop=True)
    cur = state.current
    if isinstance(event, GateSleep) and cur is not None:
        # No process drives the run now: a decision at the gate wakes it, and so does the
        # gate's time limit (a WakeRun not claimable before it passes).
        new = replace(new, current=replace(cur, asleep=True))
        expires = approval_command(state).timeout_at_ms
        if expires is not None:
            commands = (WakeRun(state.run_id, due_at_ms=expires, proposal_hash=cur.proposal_hash),)
    elif cur is not None and cur.asleep:  # a stopped run is not woken (its task's end, a decision)
        new = replace(new, current=replace(cur, asleep=False))
    written: dict[str, object] = {"clean_stop": text, "resume_in": str(state.status)}
    return Transition(
        new,
        commands,
        line(
            state,
            event,
            state.status,
            text,
            written,
            f"clean stop; resume in {state.status}",
            LineKind.CLEAN_STOP,
        ),
    )


def move(
    old: LoopState,
    new: LoopState,
    event: Event,
    text: str,
    written: Mapping[str, object],
    summary: str,
    commands: tuple[Command, ...] = (),
    kind: LineKind = LineKind.MOVE,
) -> Transition:
    if (old.status, new.status) not in LEGAL_MOVES:
        msg = f"run {old.run_id}: {old.status} -> {new.status} is not a row of the state table"
        raise LoopInvariantError(msg)
    moved = replace(new, restarts_here=0, clean_stop=False)
    return Transition(moved, commands, line(old, event, new.status, text, written, summary, kind))


def line(
    old: LoopState,
    event: Event,
    target: LoopStatus,
    text: str,
    written: Mapping[str, object],
    summary: str,
    kind: LineKind,
) -> RecordLine:
    return RecordLine(
        state=old.status,
        event=text,
        written=dict(written),
        summary=summary,
        next_state=target,
        kind=kind,
        event_type=event.type,
        at_ms=event.at_ms,
    )


def current(state: LoopState) -> Pass:
    if state.current is None:
        msg = f"run {state.run_id}: {state.status} has no pass in flight"
        raise LoopInvariantError(msg)
    return state.current


def expect_item(state: LoopState, event: Event, item: str, attempt: int | None) -> None:
    cur = current(state)
    if item != cur.item or (attempt is not None and attempt != cur.attempt):
        msg = (
            f"run {state.run_id}: {event.type} is for item {item!r} attempt {attempt}, but"
            f" the pass in flight is {cur.item!r} attempt {cur.attempt}"
        )
        raise IllegalEventError(msg, status=str(state.status), event_type=event.type)


def with_item(state: LoopState, entry: ItemLedger) -> tuple[ItemLedger, ...]:
    if state.item(entry.id) is None:
        return (*state.items, entry)
    return tuple(entry if i.id == entry.id else i for i in state.items)


def append_command(state: LoopState) -> AppendRecord:
    cur = current(state)
    verdict = cur.verdict
    if verdict is None:
        msg = f"run {state.run_id}: cannot append a record for {cur.item} without a verdict"
        raise LoopInvariantError(msg)
    return AppendRecord(
        record_no=state.records + 1,
        item=cur.item,
        attempt=cur.attempt,
        verdict=verdict,
        cause=cur.cause,
        note=cur.note,
        checks=cur.checks,
        tokens=cur.tokens,
        money_usd=cur.money_usd,
        decided_by=cur.decided_by,
    )


def approval_command(state: LoopState) -> RequestApproval:
    cur = current(state)
    cfg = state.config
    timeout_at = None
    if cfg.gate_timeout_ms is not None and cur.gate_started_at_ms is not None:
        timeout_at = cur.gate_started_at_ms + cfg.gate_timeout_ms
    return RequestApproval(cur.item, cur.attempt, cur.proposal_hash, cfg.gate_role or "", dict(cur.shown), timeout_at)


def goal_command(state: LoopState) -> EvaluateGoal:
    """Short-circuit like the goal predicate: no oracle runs while items are unclosed."""
    if state.config.all_items_closed and state.unclosed():
        return EvaluateGoal(())
    return EvaluateGoal(state.config.oracle_names)


def failure_text(cur: Pass) -> str:
    parts = [cur.cause] + [f"--- {r.name} ({r.outcome})\n{r.output}" for r in cur.checks if not r.passed]
    return "\n".join(p for p in parts if p)[:FAILURE_TEXT_CHARS]


def verb(verdict: Verdict) -> str:
    return {
        Verdict.FAIL: "failed",
        Verdict.NO_RESULT: "no result",
        Verdict.DENIED: "denied",
        Verdict.GATE_TIMEOUT: "gate timed out",
        Verdict.NEEDS_PERSON: "needs a person",
    }.get(verdict, str(verdict))


def short(note: str, limit: int = 60) -> str:
    one_line = " ".join(note.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"
