"""Invariants of the task reducer over generated event sequences (see strategies.runs)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from statewright.approvals import proposal_hash
from statewright.definition import RouteKind, StepKind, Workflow
from statewright.machine.commands import RunCheck, RunStep
from statewright.machine.state import TERMINAL, Outcome, TaskState, TaskStatus, new_task
from statewright.machine.task import transition
from strategies import Run, runs, snapshot

PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def covered_by_another_loop(workflow: Workflow, index: int) -> bool:
    """True when a later step's loop_back can re-run the step at ``index``."""
    return any(
        j > index and step.on_failure.kind is RouteKind.LOOP_BACK
        and step.on_failure.target is not None
        and workflow.index_of(step.on_failure.target) <= index
        for j, step in enumerate(workflow.steps)
    )


@PROPERTY_SETTINGS
@given(runs())
def test_no_completion_without_a_passing_last_attempt_or_a_complete_route(run: Run) -> None:
    """A completed task's last attempt passed, on the last step or on a complete route."""
    last_index = len(run.workflow.steps) - 1
    for applied in run.accepted:
        state = applied.after
        if state.status not in (TaskStatus.COMPLETED, TaskStatus.COMPLETED_EARLY):
            continue
        last = state.attempts[-1]
        assert last.outcome is Outcome.PASSED
        on_last_step = run.workflow.index_of(last.step) == last_index
        if state.status is TaskStatus.COMPLETED_EARLY:
            assert last.route == "complete"
            assert not on_last_step
        else:
            assert on_last_step


@PROPERTY_SETTINGS
@given(runs())
def test_a_looping_step_stays_within_its_budget_in_every_epoch(run: Run) -> None:
    """A looping step fails at most max_attempts times per epoch, and runs at most that often
    unless a later loop re-runs it."""
    for applied in run.accepted:
        state = applied.after
        for i, step in enumerate(run.workflow.steps):
            route = step.on_failure
            if route.kind is not RouteKind.LOOP_BACK or route.max_attempts is None:
                continue
            for epoch in range(state.epoch + 1):
                mine = state.attempts_of(step.id, epoch=epoch)
                failures = [a for a in mine if a.outcome is Outcome.FAILED]
                assert len(failures) <= route.max_attempts
                if not covered_by_another_loop(run.workflow, i):
                    assert len(mine) <= route.max_attempts


def holds_current_approval(state: TaskState, human_index: int) -> bool:
    human = state.workflow.steps[human_index]
    now = proposal_hash(state, human_index)
    return any(a.step == human.id and a.proposal_hash == now for a in state.approvals)


@PROPERTY_SETTINGS
@given(runs())
def test_work_after_a_human_step_needs_an_approval_of_the_current_proposal(run: Run) -> None:
    """A RunStep or RunCheck after a human step is emitted only while the state holds an
    approval of that step whose hash is the proposal's hash now."""
    humans = [i for i, s in enumerate(run.workflow.steps) if s.kind is StepKind.HUMAN]
    for applied in run.accepted:
        for command in applied.commands:
            if not isinstance(command, RunStep | RunCheck):
                continue
            index = run.workflow.index_of(command.step)
            for h in humans:
                if h < index:
                    assert holds_current_approval(applied.after, h), (command, h)


@PROPERTY_SETTINGS
@given(runs())
def test_terminal_states_emit_no_commands_and_accept_no_work(run: Run) -> None:
    """An event that lands in a terminal state emits nothing, and from there only operator
    events on a halted task are ever accepted."""
    for applied in run.accepted:
        if applied.after.status in TERMINAL:
            assert applied.commands == ()
        if applied.before.status in TERMINAL:
            assert applied.before.status is TaskStatus.HALTED
            assert applied.event.type in ("TaskRetried", "TaskCancelled")


@PROPERTY_SETTINGS
@given(runs())
def test_replaying_the_accepted_events_rebuilds_every_state(run: Run) -> None:
    """Replaying the accepted events from new_task gives equal states and commands."""
    state = new_task(run.task_id, run.workflow)
    for applied in run.accepted:
        state, commands = transition(state, applied.event)
        assert state == applied.after
        assert snapshot(state) == applied.after_json
        assert tuple(commands) == applied.commands


@PROPERTY_SETTINGS
@given(runs())
def test_a_rejected_event_leaves_the_state_unchanged(run: Run) -> None:
    """A refused event changes nothing; an accepted one bumps the version by exactly one."""
    for applied in run.steps:
        assert snapshot(applied.before) == applied.before_json  # nobody mutated the input
        if applied.accepted:
            assert applied.after.version == applied.before.version + 1
        else:
            assert applied.after is applied.before
            assert applied.after_json == applied.before_json


@PROPERTY_SETTINGS
@given(runs())
def test_every_finished_attempt_is_recorded_once(run: Run) -> None:
    """Attempts only ever append, one per finished attempt, with unique (step, number)."""
    for applied in run.accepted:
        before, after = applied.before.attempts, applied.after.attempts
        assert after[: len(before)] == before
        assert len(after) - len(before) in (0, 1)
        keys = [(a.step, a.number) for a in after]
        assert len(keys) == len(set(keys))
