"""Property tests of the pure loop reducer over arbitrary event sequences."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statewright._errors import IllegalEventError
from statewright.machine.loop.codec import state_from_dict, state_to_dict
from statewright.machine.loop.events import Command, Event, GoalEvaluated, LaunchWorker
from statewright.machine.loop.model import LEGAL_MOVES, LineKind, LoopConfig, LoopState, LoopStatus, RecordLine
from statewright.machine.loop.reducer import initial_state, transition

from .strategies import configs, next_event

S = LoopStatus
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Run:
    config: LoopConfig
    state: LoopState
    lines: list[RecordLine] = field(default_factory=list)
    steps: list[tuple[LoopState, Event, tuple[Command, ...], RecordLine | None]] = field(default_factory=list)


def play(data: st.DataObject, steps: int = 100) -> Run:
    config = data.draw(configs())
    rnd = data.draw(st.randoms(use_true_random=False))
    run = Run(config, initial_state("1", config))
    now = 0
    for _ in range(steps):
        if run.state.status.is_terminal:
            break  # terminals refuse everything; test_terminal_states_have_no_exits covers it
        now += 100
        event = next_event(rnd, run.state, now)
        before = run.state
        try:
            step = transition(before, event)
        except IllegalEventError:
            continue
        run.steps.append((before, event, step.commands, step.line))
        if step.line is not None:
            run.lines.append(step.line)
        run.state = step.state
    return run


@given(st.data())
@SETTINGS
def test_no_sequence_reaches_done_without_the_oracle_output_in_the_record(
    data: st.DataObject,
) -> None:
    """DONE is only ever written by GoalEvaluated, with every configured oracle's passing output."""
    run = play(data)
    for before, event, _commands, line in run.steps:
        if line is None or line.next_state is not S.DONE:
            continue
        assert before.status is S.DECIDING
        assert isinstance(event, GoalEvaluated)
        output = line.written["oracle_output"]
        assert isinstance(output, list) and output
        names = [o["name"] for o in output]
        assert names == list(run.config.oracle_names)
        assert all(o["outcome"] == "pass" for o in output)
        sent = {r.name: r.output for r in event.results}
        assert all(o["output"] == sent[o["name"]] for o in output)
    if run.state.status is S.DONE:
        assert any("oracle_output" in x.written for x in run.lines)


@given(st.data())
@SETTINGS
def test_no_sequence_launches_two_workers_for_one_attempt(data: st.DataObject) -> None:
    """LaunchWorker appears once per (item, attempt), only on ASSIGNING -> RUNNING."""
    run = play(data)
    launched: list[tuple[str, int]] = []
    for before, _event, commands, line in run.steps:
        for command in commands:
            if isinstance(command, LaunchWorker):
                assert line is not None and line.kind is LineKind.MOVE
                assert (before.status, line.next_state) == (S.ASSIGNING, S.RUNNING)
                launched.append((command.item, command.attempt))
    assert len(launched) == len(set(launched))


@given(st.data())
@SETTINGS
def test_every_line_follows_a_row_of_the_table(data: st.DataObject) -> None:
    """Moves are rows of the table; terminals never move; RUNNING never goes to DONE."""
    run = play(data)
    for line in run.lines:
        if line.state is not line.next_state:
            assert (line.state, line.next_state) in LEGAL_MOVES
        assert not line.state.is_terminal
        assert (line.state, line.next_state) != (S.RUNNING, S.DONE)
        if line.next_state is S.STUCK and line.state is not S.DECIDING:
            assert line.written["reason"] == "restarts"


@given(st.data())
@SETTINGS
def test_counters_only_grow_and_every_state_round_trips(data: st.DataObject) -> None:
    """Passes and spend never shrink, attempts never exceed the limit, and the JSON form is exact."""
    run = play(data)
    prev: LoopState | None = None
    for before, _event, _commands, _line in run.steps:
        assert state_from_dict(state_to_dict(before)) == before
        if prev is not None:
            assert before.passes >= prev.passes
            assert before.tokens_spent >= prev.tokens_spent
        assert before.passes_since_last_close <= before.passes
        assert all(i.attempts <= run.config.attempts_per_item for i in before.items)
        prev = before
    assert state_from_dict(state_to_dict(run.state)) == run.state


@given(st.data())
@SETTINGS
def test_every_event_and_command_round_trips_through_the_machine_seam(data: st.DataObject) -> None:
    """Through ``LOOP_MACHINE`` (the seam the store and verify use), every event and command a
    run makes comes back equal from its logged JSON form, event and command ids included."""
    import json

    from statewright.machine.loop import LOOP_MACHINE
    from statewright.machine.seam import StreamKind

    assert LOOP_MACHINE.kind is StreamKind.LOOP_RUN
    run = play(data, steps=40)
    for n, (_before, event, commands, _line) in enumerate(run.steps):
        with_id = replace(event, event_id=f"e{n}")
        assert LOOP_MACHINE.event_from_dict(json.loads(json.dumps(with_id.to_dict()))) == with_id
        for m, command in enumerate(commands):
            named = replace(command, command_id=f"c{n}.{m}")
            assert LOOP_MACHINE.command_from_dict(json.loads(json.dumps(named.to_dict()))) == named
