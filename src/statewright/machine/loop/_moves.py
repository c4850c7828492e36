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
    LaunchWorker,
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
        return tuple(BuildBrief(p.item, p.attempt, _last_failure(state, p.item)) for p in pending(state))
    if here is S.CHECKING:
        return tuple(RunChecks(p.item, p.attempt, state.config.check_names) for p in pending(state))
    if here is S.AWAITING_HUMAN:
        return tuple(approval_command(state, p) for p in pending(state))
    if here is S.RECORDING:
        return (append_command(state),)
    if here is S.DECIDING:
        return (goal_command(state),)
    if here is S.RUNNING:
        waiting = pending(state)
        if not waiting or any(not p.task_id for p in waiting):
            msg = f"run {state.run_id}: running is never run again; resume() records no_result"
            raise LoopInvariantError(msg)
        return tuple(AwaitPass(p.item, p.attempt, p.task_id) for p in waiting)
    return ()


def _last_failure(state: LoopState, item: str) -> str:
    entry = state.item(item)
    return entry.last_failure if entry else ""


# ------------------------------------------------------------------ waves
#
# With ``parallel`` > 1 the run works a wave of passes, one item each, through the same
# table: the run stays in a state (a PROGRESS line per pass) until every pass of the wave is
# through it, and only then moves on. A wave of one moves on at once, as a single pass does.


def pending(state: LoopState) -> tuple[Pass, ...]:
    """The wave's passes that are not yet through the run's state."""
    here = state.status
    wave = state.wave
    if here is S.ASSIGNING:
        return tuple(p for p in wave if not p.launched and p.verdict is None)
    if here is S.RUNNING:
        return tuple(p for p in wave if not p.returned and p.verdict is None)
    if here is S.CHECKING:
        return tuple(p for p in wave if p.returned and p.verdict is None and not p.checks)
    if here is S.AWAITING_HUMAN:
        return tuple(p for p in wave if p.verdict is None)
    return ()


def in_this_process(state: LoopState) -> tuple[Pass, ...]:
    """RUNNING's passes that a process works now: not back, and not waiting on a task."""
    return tuple(p for p in pending(state) if not p.task_id) if state.status is S.RUNNING else ()


def pass_of(state: LoopState, event: Event, item: str, attempt: int | None) -> Pass:
    """The wave's pass the event is for; refused (state unchanged) when there is none."""
    for p in state.wave:
        if p.item == item and (attempt is None or attempt == p.attempt):
            return p
    flight = ", ".join(f"{p.item!r} attempt {p.attempt}" for p in state.wave) or "none"
    which = "the pass in flight is" if len(state.wave) == 1 else "the passes in flight are"
    msg = f"run {state.run_id}: {event.type} is for item {item!r} attempt {attempt}, but {which} {flight}"
    raise IllegalEventError(msg, status=str(state.status), event_type=event.type)


def with_wave(state: LoopState, wave: tuple[Pass, ...]) -> LoopState:
    return replace(state, current=wave[0] if wave else None, more=wave[1:])


def with_pass(state: LoopState, one: Pass) -> LoopState:
    """``state`` with the wave's pass for ``one.item`` replaced by ``one``."""
    return with_wave(state, tuple(one if p.item == one.item else p for p in state.wave))


def with_asleep(state: LoopState, asleep: bool) -> LoopState:
    """Whether a process drives the run: kept on the wave's first pass."""
    cur = state.current
    return state if cur is None or cur.asleep is asleep else replace(state, current=replace(cur, asleep=asleep))


def settle(
    before: LoopState,
    after: LoopState,
    event: Event,
    text: str,
    written: Mapping[str, object],
    summary: str,
    extra: tuple[Command, ...] = (),
) -> Transition:
    """One pass of the wave is through ``after.status`` (``after`` holds it): while others are
    not, the run stays (a PROGRESS line); when the last one is, the run moves on as the wave
    says (``leave``), with ``extra`` commands besides."""
    if pending(after):
        return Transition(after, (), line(before, event, before.status, text, written, summary, LineKind.PROGRESS))
    new, commands = leave(after)
    return move(before, new, event, text, written, summary, (*commands, *extra))


def leave(state: LoopState) -> tuple[LoopState, tuple[Command, ...]]:
    """Where a wave goes once every pass is through ``state.status``, and what that asks for."""
    here, wave = state.status, state.wave
    undecided = tuple(p for p in wave if p.verdict is None)
    if here is S.ASSIGNING and undecided:
        items = state.items
        for p in undecided:  # the attempt is spent the moment the record names RUNNING
            entry = state.item(p.item) or ItemLedger(p.item)
            items = with_item(replace(state, items=items), replace(entry, attempts=p.attempt))
        new = replace(state, status=S.RUNNING, items=items)
        return new, tuple(LaunchWorker(p.item, p.attempt, p.brief) for p in undecided)
    if here is S.RUNNING and undecided:
        new = replace(state, status=S.CHECKING)
        return new, entry_commands(new)
    if here is S.CHECKING and undecided:
        new = replace(state, status=S.AWAITING_HUMAN)
        return new, entry_commands(new)
    new = replace(state, status=S.RECORDING)
    return new, (append_command(new),)


def proposal_hash(shown: Mapping[str, object]) -> str:
    """sha256 of the canonical JSON of what a person was shown."""
    return sha256_hex(dict(shown))


def clean_stop(state: LoopState, event: KillSwitch | GateSleep, text: str) -> Transition:
    commands: tuple[Command, ...] = ()
    if state.status is S.RUNNING:
        commands = tuple(StopWorker(p.item, p.attempt) for p in pending(state))
    new = replace(state, clean_stop=True)
    cur = state.current
    if isinstance(event, GateSleep) and cur is not None:
        # No process drives the run now: a decision at the gate wakes it, and so does the
        # gate's time limit (a WakeRun not claimable before it passes: the first to pass).
        new = with_asleep(new, True)
        gates = sorted((c.timeout_at_ms, c.proposal_hash) for c in entry_commands(state)
                       if isinstance(c, RequestApproval) and c.timeout_at_ms is not None)
        if gates:
            expires, shown = gates[0]
            commands = (WakeRun(state.run_id, due_at_ms=expires, proposal_hash=shown),)
    else:  # a stopped run is not woken (its task's end, a decision)
        new = with_asleep(new, False)
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


def approval_command(state: LoopState, one: Pass | None = None) -> RequestApproval:
    cur = current(state) if one is None else one
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
