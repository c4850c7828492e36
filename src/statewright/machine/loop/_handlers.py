"""The loop reducer's handlers for one event in one working state (IDLE to RECORDING)."""

from dataclasses import replace

from statewright._errors import ApprovalError, IllegalEventError, LoopInvariantError, Refusal
from statewright._names import AGENT_ROLE, is_agent_identity, person_name_problem
from statewright._time import duration, when
from statewright.machine.loop._moves import (
    RECENT_FAILURES,
    S,
    Transition,
    append_command,
    current,
    entry_commands,
    failure_text,
    goal_command,
    in_this_process,
    line,
    move,
    pass_of,
    pending,
    proposal_hash,
    settle,
    short,
    verb,
    with_asleep,
    with_item,
    with_pass,
    with_wave,
)
from statewright.machine.loop.events import (
    ApprovalGranted,
    ApprovalRejected,
    BriefNeedsPerson,
    BriefReady,
    CheckFinished,
    FindItems,
    GateTimedOut,
    HoldCleared,
    ItemsFound,
    ItemUnparked,
    PassEnded,
    PassWaiting,
    RecordAppended,
    TriggerArrived,
    WakeRun,
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
    LoopState,
    Pass,
    Verdict,
)


def on_trigger(state: LoopState, event: TriggerArrived) -> Transition:
    cfg = state.config
    budgets = {
        str(BudgetCap.PASSES): cfg.max_passes,
        str(BudgetCap.TOKENS): cfg.max_tokens,
        str(BudgetCap.MONEY_USD): cfg.max_money_usd,
        str(BudgetCap.WALL_TIME): cfg.wall_time_ms,
    }
    carried = {
        "parked": [i.id for i in state.items if i.status is ItemStatus.PARKED],
        "closed": [i.id for i in state.items if i.status is ItemStatus.CLOSED],
    }
    new = replace(state, status=S.FINDING, started_at_ms=event.at_ms)
    written: dict[str, object] = {
        "run": state.run_id,
        "trigger": event.trigger,
        "budgets": budgets,
        "carried": carried,
    }
    return move(
        state,
        new,
        event,
        f"{event.trigger}; kill switch off",
        written,
        f"run {state.run_id} opened, budgets set",
        (FindItems(),),
    )


def on_items_found(state: LoopState, event: ItemsFound) -> Transition:
    if len(set(event.items)) != len(event.items) or any(not i for i in event.items):
        listed = list(event.items)
        msg = f"run {state.run_id}: the source listed empty or duplicate item ids: {listed}"
        raise IllegalEventError(msg, status=str(state.status), event_type=event.type)
    known = {i.id for i in state.items}
    items = state.items + tuple(ItemLedger(i) for i in event.items if i not in known)
    found = replace(state, items=items, plan=event.items)
    workable = found.workable()
    if not workable:
        new = replace(found, status=S.DECIDING)
        written: dict[str, object] = {"candidates": [], "plan": list(event.items)}
        return move(state, new, event, "no workable item", written, "empty list", (goal_command(new),))
    # The record is the memory: the item with the fewest failed passes, the earliest in the
    # plan among equals, so a failing item does not take every pass while others wait.
    failed = {i: (e.attempts - e.reopened_after if (e := found.item(i)) is not None else 0) for i in workable}
    picks = sorted(workable, key=lambda i: (failed[i], workable.index(i)))[: wave_size(state)]
    wave = tuple(Pass(item=i, attempt=(found.item(i) or ItemLedger(i)).attempts + 1) for i in picks)
    new = with_wave(replace(found, status=S.ASSIGNING), wave)
    shown = ", ".join(workable)
    noun = "item" if len(workable) == 1 else "items"
    written = {"candidates": list(workable), "pick": picks[0]}
    if len(picks) > 1:
        written["wave"] = list(picks)
    return move(
        state,
        new,
        event,
        f"{len(workable)} workable {noun}: {shown}",
        written,
        f"list [{shown}], pick {', '.join(picks)}",
        entry_commands(new),
    )


def wave_size(state: LoopState) -> int:
    """How many passes the next wave may launch: up to ``parallel``, and never more than the
    budgets have left (a pass's share of tokens and money is reserved at launch)."""
    cfg = state.config
    size = min(cfg.parallel, cfg.max_passes - state.passes)
    if cfg.max_tokens is not None and cfg.pass_tokens:
        size = min(size, (cfg.max_tokens - state.tokens_spent) // cfg.pass_tokens)
    if cfg.max_money_usd is not None and cfg.pass_money_usd:
        size = min(size, int((cfg.max_money_usd - state.money_spent_usd) // cfg.pass_money_usd))
    return max(size, 1)  # DECIDING goes again only while one more pass fits


def on_brief_ready(state: LoopState, event: BriefReady) -> Transition:
    cur = pass_of(state, event, event.item, None)
    entry = state.item(cur.item) or ItemLedger(cur.item)
    # The attempt is spent the moment the record names RUNNING: a launch follows (``leave``).
    launched = replace(cur, brief=event.brief, launched=True)
    with_failure = ", with the prior failure" if entry.last_failure else ""
    written: dict[str, object] = {
        "brief": event.brief,
        "in_flight": cur.item,
        "attempt": cur.attempt,
    }
    return settle(
        state,
        with_pass(state, launched),
        event,
        f"brief complete{with_failure}",
        written,
        f"brief, {cur.item} in flight, attempt {cur.attempt}",
    )


def on_brief_needs_person(state: LoopState, event: BriefNeedsPerson) -> Transition:
    cur = pass_of(state, event, event.item, None)
    rec = replace(cur, verdict=Verdict.NEEDS_PERSON, cause=event.reason)
    written: dict[str, object] = {"reason": event.reason, "park": cur.item}
    return settle(
        state,
        with_pass(state, rec),
        event,
        f"brief needs a person: {event.reason}",
        written,
        f"park {cur.item}: {event.reason}",
    )


def on_worker_returned(state: LoopState, event: WorkerReturned) -> Transition:
    cur = pass_of(state, event, event.item, event.attempt)
    back = replace(
        cur,
        note=event.note,
        artifacts=event.artifacts,
        receipts=event.receipts,
        tokens=cur.tokens + event.tokens,
        money_usd=cur.money_usd + event.money_usd,
    )
    over = over_pass_budget(state, back)
    if over:
        rec = replace(back, verdict=Verdict.NO_RESULT, cause=over)
        written_over: dict[str, object] = {"verdict": str(Verdict.NO_RESULT), "cause": over}
        return settle(state, with_pass(state, rec), event, f"no result: {over}", written_over,
                      f"verdict no_result, {over}")
    written: dict[str, object] = {
        "artifacts": list(event.artifacts),
        "cost": {"tokens": event.tokens, "money_usd": event.money_usd},
        "receipts": list(event.receipts),
        "note": event.note,
    }
    said = short(event.note)
    text = f"launched; returns {said!r}" if said else "launched; worker returns a result"
    return settle(
        state,
        with_pass(state, replace(back, returned=True)),
        event,
        text,
        written,
        "artifact, cost; message kept as a note" if said else "artifact, cost",
    )


def over_pass_budget(state: LoopState, spent: Pass) -> str:
    """Why a pass that came back spent more than one pass may (``budgets.per_pass``): the
    cap fired. Empty when it did not."""
    cfg = state.config
    if cfg.pass_tokens is not None and spent.tokens > cfg.pass_tokens:
        return f"cap fired: the pass spent {spent.tokens} tokens, over the {cfg.pass_tokens} one pass may"
    if cfg.pass_money_usd is not None and spent.money_usd > cfg.pass_money_usd:
        return f"cap fired: the pass spent ${spent.money_usd:g}, over the ${cfg.pass_money_usd:g} one pass may"
    return ""


def on_worker_no_result(state: LoopState, event: WorkerNoResult) -> Transition:
    cur = pass_of(state, event, event.item, event.attempt)
    rec = replace(
        cur,
        verdict=Verdict.NO_RESULT,
        cause=event.cause,
        tokens=cur.tokens + event.tokens,
        money_usd=cur.money_usd + event.money_usd,
    )
    written: dict[str, object] = {"verdict": str(Verdict.NO_RESULT), "cause": event.cause}
    return settle(
        state,
        with_pass(state, rec),
        event,
        f"no result: {event.cause}",
        written,
        f"verdict no_result, {event.cause}",
    )


def on_pass_waiting(state: LoopState, event: PassWaiting) -> Transition:
    """The pass's task waits for a person: the run stays in RUNNING, waiting on the task's
    end (never "no result", never a new launch), and the process sleeps there (a clean stop
    that excuses the next start, which waits on the same task: ``AwaitPass``)."""
    cur = pass_of(state, event, event.item, event.attempt)
    if cur.task_id and cur.task_id != event.task_id:
        msg = (f"run {state.run_id}: the pass of {cur.item!r} attempt {cur.attempt} runs as task {cur.task_id},"
               f" not {event.task_id}")
        raise IllegalEventError(msg, status=str(state.status), event_type=event.type)
    waits = with_pass(state, replace(cur, task_id=event.task_id))
    at = f" at {event.step!r}" if event.step else ""
    role = f" (role {event.role})" if event.role else ""
    text = f"task {event.task_id} waits for approval{at}{role}"
    written: dict[str, object] = {"waits_for": event.task_id, "step": event.step, "role": event.role,
                                  "resume_in": str(state.status)}
    if in_this_process(waits):  # other passes of the wave are still being worked: no sleep yet
        return Transition(waits, (), line(state, event, state.status, text, written,
                                          f"waits for task {event.task_id}", LineKind.PROGRESS))
    new = replace(with_asleep(waits, True), clean_stop=True)
    return Transition(new, (), line(state, event, state.status, text, written,
                                    f"waits for task {event.task_id}; clean stop", LineKind.CLEAN_STOP))


def on_pass_ended(state: LoopState, event: PassEnded) -> Transition:
    """The pass's task ended (its end written with it). In RUNNING, for the pass in flight, it
    is the pass's result: a completed task is checked like a worker's return, any other end is
    "no result". Anywhere else (the run gave the pass up, or ended) it is kept as a note line
    and moves nothing."""
    running = pending(state) if state.status is S.RUNNING else ()
    cur = next((p for p in running if p.item == event.item and p.attempt == event.attempt
                and p.task_id in ("", event.task_id)), None)
    if cur is None:
        written: dict[str, object] = {"task": event.task_id, "item": event.item, "attempt": event.attempt,
                                      "status": event.status}
        text = f"task {event.task_id} (item {event.item}, attempt {event.attempt}) ended {event.status}"
        return Transition(state, (), line(state, event, state.status, text, written,
                                          "kept as a note; the run had moved on", LineKind.NOTE))
    spent = replace(cur, task_id=event.task_id, tokens=cur.tokens + event.tokens,
                    money_usd=cur.money_usd + event.money_usd, authors=event.actors)
    # A run asleep on the task (no process drives it) is woken by a worker (it stays asleep
    # until that worker's start, so a stop before it keeps it stopped); a driver that waits
    # on the task carries on by itself.
    wake = _wake(state)
    over = over_pass_budget(state, spent)
    if event.succeeded and not over:
        back = replace(spent, note=f"task {event.task_id} {event.status}", artifacts=(f"task:{event.task_id}",),
                       returned=True)
        written = {"task": event.task_id, "status": event.status, "artifacts": list(back.artifacts),
                   "cost": {"tokens": event.tokens, "money_usd": event.money_usd}}
        step = settle(state, with_pass(state, back), event, f"task {event.task_id} {event.status}", written,
                      "artifact, cost", wake)
    else:
        why = f": {event.reason}" if event.reason else ""
        cause = over or f"task {event.task_id} ended {event.status}{why}"
        rec = replace(spent, verdict=Verdict.NO_RESULT, cause=cause)
        written = {"verdict": str(Verdict.NO_RESULT), "cause": cause, "task": event.task_id}
        step = settle(state, with_pass(state, rec), event, f"no result: {cause}", written,
                      f"verdict no_result, {cause}", wake)
    return _keep_asleep(state, step)


def on_checks(state: LoopState, event: CheckFinished) -> Transition:
    cur = pass_of(state, event, event.item, event.attempt)
    by_name = {r.name: r for r in event.results}
    results = tuple(
        by_name.get(n) or CheckResult(n, CheckOutcome.ERROR, "the check did not report")
        for n in state.config.check_names
    )
    text = "; ".join(_check_text(r) for r in results)
    failing = [r for r in results if not r.passed]
    if failing:
        cause = "; ".join(f"{r.name} {r.outcome}" for r in failing)
        rec = replace(cur, checks=results, verdict=Verdict.FAIL, cause=cause)
        written: dict[str, object] = {
            "verdict": str(Verdict.FAIL),
            "failing_checks": [r.name for r in failing],
            "output": {r.name: r.output for r in failing},
        }
        return settle(state, with_pass(state, rec), event, text, written, "verdict fail, the check output whole")
    evidence = [r.to_dict() for r in results]
    role = state.config.gate_role
    if role is None:
        rec = replace(cur, checks=results, verdict=Verdict.PASS)
        written = {"verdict": str(Verdict.PASS), "evidence": evidence}
        return settle(state, with_pass(state, rec), event, text, written, "verdict pass, evidence")
    shown: dict[str, object] = {
        "run": state.run_id,
        "item": cur.item,
        "attempt": cur.attempt,
        "artifacts": list(cur.artifacts),
        "receipts": list(cur.receipts),
        "checks": evidence,
    }
    gated = replace(
        cur,
        checks=results,
        shown=shown,
        proposal_hash=proposal_hash(shown),
        gate_started_at_ms=event.at_ms,
    )
    written = {
        "evidence": evidence,
        "proposal_hash": gated.proposal_hash,
        "start": event.at_ms,
        "role": role,
    }
    return settle(
        state,
        with_pass(state, gated),
        event,
        f"{text}; {role} must approve",
        written,
        f"evidence, hash {gated.proposal_hash[:12]}, start",
    )


def _wake(state: LoopState) -> tuple[WakeRun, ...]:
    """A WakeRun for a run no process drives (asleep on its pass's task or at the gate) that
    something just moved: a worker claims it and drives the run on."""
    cur = state.current
    return (WakeRun(state.run_id),) if cur is not None and cur.asleep else ()


def may_decide(state: LoopState, event: ApprovalGranted | ApprovalRejected) -> None:
    """The gate's rules for a decision, as a human step's: a person (never an agent identity
    or the system) holding the gate's role (``event.roles``: the store's, read when the act
    was made), who is not an author of the work (no act of theirs in the pass's task), before
    the gate's time limit, on the proposal shown (its hash). Raises ApprovalError (state
    unchanged) otherwise."""
    cur = gated_pass(state, event.proposal_hash)
    role = state.config.gate_role or ""

    def refuse(msg: str, refusal: Refusal = Refusal.NOT_ALLOWED) -> ApprovalError:
        return ApprovalError(f"run {state.run_id}: {msg}", refusal=refusal, status=str(state.status),
                             event_type=event.type)

    verb = "approve" if isinstance(event, ApprovalGranted) else "reject"
    problem = person_name_problem(event.actor)
    if problem is not None:
        raise refuse(problem)
    if is_agent_identity(event.roles):
        raise refuse(f"{event.actor!r} is an agent identity (role {AGENT_ROLE!r}) and may never {verb}")
    if role and role not in event.roles:
        raise refuse(f"{event.actor!r} does not hold the role {role!r} the gate needs"
                     f" (has: {', '.join(event.roles) or 'none'})")
    if event.actor in cur.authors:
        raise refuse(f"{event.actor!r} acted in task {cur.task_id}, the pass's work, and may not {verb} it"
                     " at the gate (separation of duty)")
    limit, started = state.config.gate_timeout_ms, cur.gate_started_at_ms
    if limit is not None and started is not None and event.at_ms >= started + limit:
        raise refuse(f"the gate's time limit passed at {when(started + limit)}; no decision is taken after it"
                     " (the gate times out and the item parks)", Refusal.EXPIRED)
    if event.proposal_hash != cur.proposal_hash:
        raise refuse(f"the decision is for hash {event.proposal_hash} but the proposal shown has"
                     f" {cur.proposal_hash}; a decision binds to what was shown, so decide on the current"
                     " proposal", Refusal.STALE)


def gated_pass(state: LoopState, shown_hash: str) -> Pass:
    """The pass at the gate a decision is for: the one whose proposal has ``shown_hash``; with
    one pass at the gate, that one (a stale hash is then refused by name)."""
    waiting = pending(state)
    for p in waiting:
        if p.proposal_hash == shown_hash:
            return p
    return waiting[0] if len(waiting) == 1 else current(state)


def on_approval(state: LoopState, event: ApprovalGranted) -> Transition:
    cur = gated_pass(state, event.proposal_hash)
    may_decide(state, event)
    rec = replace(cur, verdict=Verdict.PASS, decided_by=event.actor)
    written: dict[str, object] = {
        "actor": event.actor,
        "when": event.at_ms,
        "proposal_hash": cur.proposal_hash,
    }
    return _keep_asleep(state, settle(
        state,
        with_pass(state, rec),
        event,
        f"approved by {event.actor}",
        written,
        f"{event.actor}, {when(event.at_ms)}, hash {cur.proposal_hash[:12]}",
        _wake(state),
    ))


def on_denial(state: LoopState, event: ApprovalRejected) -> Transition:
    cur = gated_pass(state, event.proposal_hash)
    may_decide(state, event)
    cause = f"denied by {event.actor}: {event.reason_code}"
    rec = replace(cur, verdict=Verdict.DENIED, cause=cause, decided_by=event.actor)
    written: dict[str, object] = {
        "denial": {"actor": event.actor, "reason_code": event.reason_code},
        "park": cur.item,
    }
    return _keep_asleep(state, settle(
        state,
        with_pass(state, rec),
        event,
        f"denied by {event.actor}",
        written,
        f"denial, park {cur.item}",
        _wake(state),
    ))


def _keep_asleep(before: LoopState, step: Transition) -> Transition:
    """A person's decision arrives while the process sleeps at the gate (a clean stop): it
    moves the run, and the next start stays excused, as the sleep was."""
    if not before.clean_stop:
        return step
    return Transition(replace(step.state, clean_stop=True), step.commands, step.line)


def on_gate_timeout(state: LoopState, event: GateTimedOut) -> Transition:
    limit = state.config.gate_timeout_ms
    cur = _first_expired(state, event.at_ms) or current(state)
    started = cur.gate_started_at_ms
    if limit is None or started is None or event.at_ms < started + limit:
        msg = (
            f"run {state.run_id}: the gate has not timed out (limit"
            f" {'none' if limit is None else duration(limit / 1000)}, started {when(started) or 'never'},"
            f" now {when(event.at_ms)}); keep waiting"
        )
        raise IllegalEventError(msg, status=str(state.status), event_type=event.type)
    cause = f"no decision within {duration(limit / 1000)}"
    rec = replace(cur, verdict=Verdict.GATE_TIMEOUT, cause=cause)
    written: dict[str, object] = {"timeout": cause, "park": cur.item}
    return settle(
        state,
        with_pass(state, rec),
        event,
        "the gate's time limit passed",
        written,
        f"timeout, park {cur.item}",
    )


def _first_expired(state: LoopState, now_ms: int) -> Pass | None:
    """The pass at the gate whose time limit passed first, if one has."""
    limit = state.config.gate_timeout_ms
    if limit is None:
        return None
    expired = [p for p in pending(state) if p.gate_started_at_ms is not None and now_ms >= p.gate_started_at_ms + limit]
    return min(expired, key=lambda p: p.gate_started_at_ms or 0, default=None)


def on_record_appended(state: LoopState, event: RecordAppended) -> Transition:
    cur = current(state)
    verdict = cur.verdict
    if verdict is None:
        msg = f"run {state.run_id}: recording without a verdict for {cur.item}"
        raise LoopInvariantError(msg)
    cfg = state.config
    entry = state.item(cur.item) or ItemLedger(cur.item)
    closed = verdict is Verdict.PASS
    failure = "" if closed else failure_text(cur)
    if closed:
        entry = replace(entry, status=ItemStatus.CLOSED, last_failure="")
    elif verdict in (Verdict.FAIL, Verdict.NO_RESULT):
        exhausted = entry.attempts_left(cfg.attempts_per_item) <= 0
        status = ItemStatus.PARKED if exhausted else ItemStatus.OPEN
        entry = replace(entry, status=status, last_failure=failure)
    else:
        entry = replace(entry, status=ItemStatus.PARKED, last_failure=failure)
    worked = 1 if cur.launched else 0
    since = 0 if closed else state.passes_since_last_close + worked
    recent = () if closed else (*state.recent_failures, f"{cur.item}: {cur.cause}")
    rest = state.more
    new = replace(
        with_wave(state, rest),
        status=S.RECORDING if rest else S.DECIDING,
        items=with_item(state, entry),
        passes=state.passes + worked,
        records=state.records + 1,
        passes_since_last_close=since,
        tokens_spent=state.tokens_spent + cur.tokens,
        money_spent_usd=state.money_spent_usd + cur.money_usd,
        recent_failures=recent[-RECENT_FAILURES:],
    )
    counters = {
        "passes": new.passes,
        "since_last_close": since,
        "tokens_spent": new.tokens_spent,
        "money_spent_usd": new.money_spent_usd,
    }
    written: dict[str, object] = {
        "outcome": {
            "item": cur.item,
            "attempt": cur.attempt,
            "verdict": str(verdict),
            "item_status": str(entry.status),
        },
        "counters": counters,
        "receipt": event.receipt,
    }
    if closed:
        summary = f"{cur.item} closed, receipt {event.receipt}"
    else:
        summary = f"{cur.item} {verb(verdict)}; {entry.status}; passes {new.passes}; since last close {since}"
    if rest:  # the wave's next pass is recorded next
        return Transition(new, (append_command(new),),
                          line(state, event, S.RECORDING, "append acknowledged", written, summary, LineKind.PROGRESS))
    return move(state, new, event, "append acknowledged", written, summary, (goal_command(new),))


def on_unpark(state: LoopState, event: ItemUnparked) -> Transition:
    """A person reopens a parked item: its attempts count afresh from here (the numbers go
    on, so no pass key repeats). The run stays where it is; the line records who and why."""
    entry = state.item(event.item)
    if entry is None or entry.status is not ItemStatus.PARKED:
        how = "not in the ledger" if entry is None else str(entry.status)
        msg = f"run {state.run_id}: item {event.item!r} is not parked ({how}); only a parked item can be unparked"
        raise IllegalEventError(msg, status=str(state.status), event_type=event.type)
    if not event.actor.strip() or not event.reason.strip():
        msg = f"run {state.run_id}: an unpark names who (--as WHO) and why (--reason TEXT)"
        raise IllegalEventError(msg, status=str(state.status), event_type=event.type)
    reopened = replace(entry, status=ItemStatus.OPEN, reopened_after=entry.attempts)
    new = replace(state, items=with_item(state, reopened))
    written: dict[str, object] = {
        "unpark": event.item,
        "actor": event.actor,
        "reason": event.reason,
        "parked_because": entry.last_failure,
    }
    return Transition(
        new,
        (),
        line(state, event, state.status, f"unparked by {event.actor}: {short(event.reason)}", written,
             f"{event.item} open again, {state.config.attempts_per_item} attempts", LineKind.OPERATOR),
    )


def on_hold_cleared(state: LoopState, event: HoldCleared) -> Transition:
    """An operator lifts the hold of a STUCK run: new runs of its loop may start. The run
    stays STUCK; the line records who and why."""
    if state.status is not S.STUCK:
        msg = f"run {state.run_id} is {state.status}, not stuck; only a stuck run needs a clear"
        raise IllegalEventError(msg, status=str(state.status), event_type=event.type)
    if state.cleared_by:
        msg = f"run {state.run_id} was already cleared by {state.cleared_by}: {state.cleared_reason}"
        raise IllegalEventError(msg, status=str(state.status), event_type=event.type)
    if not event.actor.strip() or not event.reason.strip():
        msg = f"run {state.run_id}: a clear names who (--as WHO) and why (--reason TEXT)"
        raise IllegalEventError(msg, status=str(state.status), event_type=event.type)
    new = replace(state, cleared_by=event.actor.strip(), cleared_reason=event.reason.strip())
    written: dict[str, object] = {"cleared_by": new.cleared_by, "reason": new.cleared_reason}
    return Transition(
        new,
        (),
        line(state, event, state.status, f"hold cleared by {new.cleared_by}: {short(new.cleared_reason)}",
             written, "new runs may start", LineKind.OPERATOR),
    )


def _check_text(result: CheckResult) -> str:
    """``suite: fail (1 failed (test_export_empty))``: the outcome and the output's last line."""
    if result.passed:
        return f"{result.name}: pass"
    lines = [ln.strip() for ln in result.output.splitlines() if ln.strip()]
    said = [ln for ln in lines if not (ln.startswith("[") and ln.endswith("]"))]
    lines = said or lines
    tail = short(lines[-1], 50) if lines else ""
    return f"{result.name}: {result.outcome}" + (f" ({tail})" if tail else "")
