"""The pure outer-loop reducer: ``transition(state, event) -> (state, commands, line)``.

It implements the state table of the design document as written (see
:data:`statewright.machine.loop.model.TABLE`): eight working states, four terminals, the
rule order in DECIDING, budgets spent on every worked pass, stuck detection by
passes since the last close, and ``resume()`` with its restart counting.

Rules the code keeps, so that no test has to trust a comment:

* There is no RUNNING -> DONE edge. The worker's words are a note; nothing reads them.
* ``LaunchWorker`` is emitted in one place only, on the normal entry to RUNNING.
  ``resume()`` never relaunches: a run found in RUNNING stops the worker and records
  "no result".
* A terminal state is reached only by a DECIDING rule (which needs the oracle's
  output for DONE) or by the restart limit.
* Every move writes a record line; the caller persists it before performing any command.

No I/O, no clock, no randomness: time comes from ``event.at_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from statewright._errors import IllegalEventError
from statewright.machine.loop._handlers import (
    on_approval,
    on_brief_needs_person,
    on_brief_ready,
    on_checks,
    on_denial,
    on_gate_timeout,
    on_hold_cleared,
    on_items_found,
    on_pass_ended,
    on_pass_waiting,
    on_record_appended,
    on_trigger,
    on_unpark,
    on_worker_no_result,
    on_worker_returned,
)
from statewright.machine.loop._moves import (
    S,
    Transition,
    clean_stop,
    entry_commands,
    in_this_process,
    leave,
    line,
    move,
    pending,
    proposal_hash,
    with_asleep,
    with_pass,
)
from statewright.machine.loop.events import (
    ApprovalGranted,
    ApprovalRejected,
    BriefNeedsPerson,
    BriefReady,
    CheckFinished,
    Command,
    Event,
    FindItems,
    GateSleep,
    GateTimedOut,
    GoalEvaluated,
    HoldCleared,
    ItemsFound,
    ItemUnparked,
    KillSwitch,
    PassEnded,
    PassWaiting,
    ProcessStarted,
    RecordAppended,
    StopWorker,
    TriggerArrived,
    WorkerNoResult,
    WorkerReturned,
)
from statewright.machine.loop.model import (
    BudgetCap,
    CheckOutcome,
    CheckResult,
    ItemLedger,
    ItemStatus,
    LineKind,
    LoopConfig,
    LoopState,
    LoopStatus,
    Verdict,
)

__all__ = [
    "Transition",
    "decide",
    "entry_commands",
    "initial_state",
    "proposal_hash",
    "resume",
    "spent_caps",
    "transition",
]


def initial_state(run_id: str, config: LoopConfig, ledger: tuple[ItemLedger, ...] = ()) -> LoopState:
    """An IDLE run that carries the item ledger of earlier runs (parked stays parked)."""
    return LoopState(run_id=run_id, config=config, items=ledger)


def transition(state: LoopState, event: Event) -> Transition:
    """Apply one event. Raise IllegalEventError (state unchanged) if the table forbids it."""
    if isinstance(event, ProcessStarted):
        return resume(state, event)
    if isinstance(event, ItemUnparked):  # an operator's act: legal in every state, terminals too
        return on_unpark(state, event)
    if isinstance(event, HoldCleared):
        return on_hold_cleared(state, event)
    if isinstance(event, PassEnded):  # a child's end is recorded whatever the run has done since
        return on_pass_ended(state, event)
    here = state.status
    if here.is_terminal:
        msg = (
            f"run {state.run_id} is {here}, a terminal state with no exits;"
            f" {event.type} cannot move it. Start a new run instead."
        )
        raise IllegalEventError(msg, status=str(here), event_type=event.type)
    match here, event:
        case _, KillSwitch():
            return clean_stop(state, event, f"kill switch ({event.source})")
        case S.IDLE, TriggerArrived():
            return on_trigger(state, event)
        case S.FINDING, ItemsFound():
            return on_items_found(state, event)
        case S.ASSIGNING, BriefReady():
            return on_brief_ready(state, event)
        case S.ASSIGNING, BriefNeedsPerson():
            return on_brief_needs_person(state, event)
        case S.RUNNING, WorkerReturned():
            return on_worker_returned(state, event)
        case S.RUNNING, WorkerNoResult():
            return on_worker_no_result(state, event)
        case S.RUNNING, PassWaiting():
            return on_pass_waiting(state, event)
        case S.CHECKING, CheckFinished():
            return on_checks(state, event)
        case S.AWAITING_HUMAN, ApprovalGranted():
            return on_approval(state, event)
        case S.AWAITING_HUMAN, ApprovalRejected():
            return on_denial(state, event)
        case S.AWAITING_HUMAN, GateTimedOut():
            return on_gate_timeout(state, event)
        case S.AWAITING_HUMAN, GateSleep():
            return clean_stop(state, event, "asleep at the gate")
        case S.RECORDING, RecordAppended():
            return on_record_appended(state, event)
        case S.DECIDING, GoalEvaluated():
            return decide(state, event)
    msg = f"run {state.run_id}: {event.type} is not legal in {here}; {here} accepts {', '.join(_ACCEPTS[here])}"
    raise IllegalEventError(msg, status=str(here), event_type=event.type)


_ACCEPTS: Mapping[LoopStatus, tuple[str, ...]] = {
    S.IDLE: ("TriggerArrived", "KillSwitch", "ProcessStarted"),
    S.FINDING: ("ItemsFound", "KillSwitch", "ProcessStarted"),
    S.ASSIGNING: ("BriefReady", "BriefNeedsPerson", "KillSwitch", "ProcessStarted"),
    S.RUNNING: ("WorkerReturned", "WorkerNoResult", "PassWaiting", "PassEnded", "KillSwitch", "ProcessStarted"),
    S.CHECKING: ("CheckFinished", "KillSwitch", "ProcessStarted"),
    S.AWAITING_HUMAN: (
        "ApprovalGranted",
        "ApprovalRejected",
        "GateTimedOut",
        "GateSleep",
        "KillSwitch",
        "ProcessStarted",
    ),
    S.RECORDING: ("RecordAppended", "KillSwitch", "ProcessStarted"),
    S.DECIDING: ("GoalEvaluated", "KillSwitch", "ProcessStarted"),
}


# ------------------------------------------------------------------ resume


def resume(state: LoopState, event: ProcessStarted) -> Transition:
    """The first act of every process start, applied to the newest recorded state.

    terminal -> nothing; a clean-stop line excuses one start; otherwise the state's
    restart count goes up (written before any work). Over the limit -> STUCK naming
    the state. RUNNING -> stop the worker, verdict "no result", RECORDING (never
    relaunch). CHECKING on its 2nd restart -> fail "check did not complete".
    Anything else runs its state again (AWAITING_HUMAN keeps waiting).
    """
    here = state.status
    if here.is_terminal:
        return Transition(state, (), None)
    state = with_asleep(state, False)  # a process drives the run from here
    if state.clean_stop:
        count, kind, how = state.restarts_here, LineKind.START, "start after a clean stop"
    else:
        count, kind, how = (
            state.restarts_here + 1,
            LineKind.RESTART,
            f"restart {state.restarts_here + 1}",
        )
    if here is S.IDLE:
        # Nothing happens in IDLE but waiting for a trigger: there is nothing to redo
        # and the table has no restart row for it.
        new = replace(state, clean_stop=False)
        return Transition(
            new,
            (),
            line(
                state,
                event,
                S.IDLE,
                "process started; waiting for a trigger",
                {"start": "waiting for a trigger"},
                "start line",
                LineKind.START,
            ),
        )
    text = f"process started ({how} in {here})"
    cfg = state.config
    if count > cfg.restart_limit:
        commands: tuple[Command, ...] = ()
        if here is S.RUNNING:
            commands = tuple(StopWorker(p.item, p.attempt) for p in pending(state))
        reason = f"restarts: {count} unclean starts in {here} (limit {cfg.restart_limit})"
        new = replace(state, status=S.STUCK, reason=reason, restarts_here=count, clean_stop=False)
        written: dict[str, object] = {
            "reason": "restarts",
            "state": str(here),
            "restarts": count,
            "stop_worker": bool(commands),
        }
        return move(state, new, event, text, written, f'stuck, reason "restarts", {here}', commands, kind)
    lost = in_this_process(state)  # passes whose worker died with the process
    if here is S.RUNNING and not lost:
        waits = ", ".join(p.task_id for p in pending(state))
        new = replace(state, restarts_here=count, clean_stop=False)
        written = {"restarts": count, "waits_for": waits}
        waiting = line(state, event, here, text, written, f"wait on task {waits}", kind)
        return Transition(new, entry_commands(new), waiting)
    if here is S.RUNNING:
        cause = "the process restarted while running; worker stopped, never relaunched"
        after = state
        for p in lost:
            after = with_pass(after, replace(p, verdict=Verdict.NO_RESULT, cause=cause))
        stops = tuple(StopWorker(p.item, p.attempt) for p in lost)
        written = {
            "verdict": str(Verdict.NO_RESULT),
            "cause": cause,
            "restarts": count,
        }
        if len(lost) > 1:
            written["items"] = [p.item for p in lost]
        summary = f"verdict no_result: {cause}"
        if pending(after):  # other passes of the wave wait on their tasks: so does the run
            new = replace(after, restarts_here=count, clean_stop=False)
            still = line(state, event, here, text, written, summary, kind)
            return Transition(new, (*stops, *entry_commands(new)), still)
        new, commands = leave(after)
        return move(state, new, event, text, written, summary, (*stops, *commands), kind)
    if here is S.CHECKING and count == 2:
        cause = "check did not complete"
        after = state
        for p in pending(state):
            after = with_pass(after, replace(p, verdict=Verdict.FAIL, cause=cause))
        new, commands = leave(after)
        written = {
            "verdict": str(Verdict.FAIL),
            "failing_check": cause,
            "restarts": count,
        }
        return move(state, new, event, text, written, f"verdict fail, {cause}", commands, kind)
    new = replace(state, restarts_here=count, clean_stop=False)
    written = {"restarts": count, "run_again": str(here)}
    return Transition(
        new,
        entry_commands(new),
        line(state, event, here, text, written, f"run {here} again", kind),
    )


# ------------------------------------------------------------------ decide


def decide(state: LoopState, event: GoalEvaluated) -> Transition:
    """DECIDING's rules, in order: goal -> DONE; nothing workable -> ESCALATED;
    no close in ``stuck_after`` passes -> STUCK; a cap spent -> OUT_OF_BUDGET; else go again.
    """
    cfg = state.config
    unclosed = state.unclosed() if cfg.all_items_closed else ()
    by_name = {r.name: r for r in event.results}
    if unclosed:
        oracles = tuple(
            CheckResult(n, CheckOutcome.FAIL, "not run: items are open or parked") for n in cfg.oracle_names
        )
    else:
        oracles = tuple(
            by_name.get(n) or CheckResult(n, CheckOutcome.ERROR, "did not report") for n in cfg.oracle_names
        )
    clauses: dict[str, object] = {
        "all_items_closed": not unclosed,
        "unclosed": list(unclosed),
        "oracles": {r.name: str(r.outcome) for r in oracles},
    }
    if not unclosed and oracles and all(r.passed for r in oracles):
        new = replace(state, status=S.DONE, reason="goal met")
        written: dict[str, object] = {
            "reason": "goal met",
            "oracle_output": [r.to_dict() for r in oracles],
        }
        return move(state, new, event, "goal predicate true", written, 'done, reason "goal met"')
    workable = state.workable()
    if not workable:
        parked = [i for i in state.plan if (e := state.item(i)) and e.status is ItemStatus.PARKED]
        reason = "no workable item left"
        if not unclosed:
            reason += "; every item is closed but a goal oracle fails"
        new = replace(state, status=S.ESCALATED, reason=reason)
        written = {
            "reason": reason,
            "parked": parked,
            "goal": clauses,
            "oracle_output": [r.to_dict() for r in oracles if not unclosed],
        }
        return move(
            state,
            new,
            event,
            "goal false; 0 workable",
            written,
            f"escalated, parked [{', '.join(parked)}]",
        )
    since, limit = state.passes_since_last_close, cfg.stuck_after
    if since >= limit:
        reason = f"no item closed in {since} passes (stuck after {limit})"
        new = replace(state, status=S.STUCK, reason=reason)
        written = {
            "reason": reason,
            "failing_checks": list(state.recent_failures),
        }
        return move(
            state,
            new,
            event,
            f"goal false; {len(workable)} workable; {since} >= {limit}",
            written,
            f"stuck, {reason}",
        )
    spent = spent_caps(state, event.at_ms)
    if spent:
        caps = ", ".join(spent)
        new = replace(state, status=S.OUT_OF_BUDGET, reason=f"budget spent: {caps}")
        written = {
            "reason": "budget spent",
            "caps": list(spent),
            "goal_clauses": clauses,
        }
        return move(
            state,
            new,
            event,
            f"goal false; {len(workable)} workable; {since} < {limit}; {caps} spent",
            written,
            f"out_of_budget, {caps}",
        )
    new = replace(state, status=S.FINDING)
    written = {"decision": "go again", "goal_clauses": clauses}
    return move(
        state,
        new,
        event,
        f"goal false; {len(workable)} workable; {since} < {limit}; budget left",
        written,
        '"go again"',
        (FindItems(),),
    )


def spent_caps(state: LoopState, now_ms: int) -> tuple[str, ...]:
    """The loop budgets that are spent at ``now_ms``, in a fixed order."""
    cfg = state.config
    out: list[str] = []
    if state.passes >= cfg.max_passes:
        out.append(str(BudgetCap.PASSES))
    if cfg.max_tokens is not None and _spent(state.tokens_spent, cfg.pass_tokens, cfg.max_tokens):
        out.append(str(BudgetCap.TOKENS))
    if cfg.max_money_usd is not None and _spent(state.money_spent_usd, cfg.pass_money_usd, cfg.max_money_usd):
        out.append(str(BudgetCap.MONEY_USD))
    if (
        cfg.wall_time_ms is not None
        and state.started_at_ms is not None
        and now_ms - state.started_at_ms >= cfg.wall_time_ms
    ):
        out.append(str(BudgetCap.WALL_TIME))
    return tuple(out)


def _spent(spent: float, share: float | None, cap: float) -> bool:
    """A budget is spent when nothing is left, or, with a pass's share declared
    (``budgets.per_pass``), when what is left cannot cover one more pass."""
    return spent >= cap if share is None else spent + share > cap
