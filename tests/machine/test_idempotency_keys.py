"""Idempotency keys: a new attempt gets a new key, an operator's retry and a repair turn
run again under the key of the attempt they repeat, and work after an approval carries
the approved proposal's hash in its key."""

from __future__ import annotations

from hypothesis import given, settings

from statewright.definition import StepKind
from statewright.machine.commands import Command, RunCheck, RunStep
from statewright.machine.events import TaskRetried
from statewright.machine.task import KEY_HASH_DIGITS
from strategies import Driver, Run, fix_bug, runs

from .test_properties import PROPERTY_SETTINGS

KEY_SETTINGS = settings(PROPERTY_SETTINGS, max_examples=100)  # four properties over the same runs


def attempt_key(command: RunStep | RunCheck) -> str:
    """The key of the attempt a command belongs to (a check's key is ``KEY/check-N``)."""
    if isinstance(command, RunCheck):
        base, _, number = command.idempotency_key.rpartition("/check-")
        assert number == str(command.check_number), command
        return base
    return command.idempotency_key


def work(commands: tuple[Command, ...] | list[Command]) -> list[RunStep | RunCheck]:
    return [c for c in commands if isinstance(c, RunStep | RunCheck)]


@KEY_SETTINGS
@given(runs())
def test_an_operator_retry_runs_again_under_the_halted_attempts_key(run: Run) -> None:
    """A retry's command carries the key its halted step's last attempt ran under, with a
    command id no earlier command had (its report must not look like the first one's)."""
    ids: set[str] = set()
    for applied in run.accepted:
        if isinstance(applied.event, TaskRetried):
            halt = applied.before.halt
            assert halt is not None
            last = applied.before.attempts_of(halt.step)[-1]
            for command in work(applied.commands):
                assert attempt_key(command) == last.key != ""
                assert command.command_id not in ids
        ids.update(c.command_id for c in applied.commands)


@KEY_SETTINGS
@given(runs())
def test_only_a_retry_or_a_repair_reuses_a_key(run: Run) -> None:
    """Entering a step (first time, continue, loop-back) gives a key no earlier attempt had;
    a retry and a repair turn reuse the key of the attempt they repeat; every attempt
    records the key it ran under."""
    seen: set[str] = set()
    for applied in run.accepted:
        for command in work(applied.commands):
            key = attempt_key(command)
            repeated = isinstance(applied.event, TaskRetried) or (
                isinstance(command, RunStep) and command.repair_error is not None
            ) or (isinstance(command, RunCheck) and command.check_number > 1)
            assert (key in seen) is repeated, (command, applied.event)
            seen.add(key)
            current = applied.after.current
            assert current is not None and current.key == key
        for attempt in applied.after.attempts:
            kind = StepKind(attempt.kind)
            assert (attempt.key in seen) if kind is not StepKind.HUMAN else attempt.key == ""


@KEY_SETTINGS
@given(runs())
def test_a_loop_back_starts_a_new_attempt_under_a_new_key(run: Run) -> None:
    """The command a loop-back emits runs under a key none of the target's attempts had."""
    for applied in run.accepted:
        after = applied.after
        if len(after.attempts) == len(applied.before.attempts):
            continue
        if not after.attempts[-1].route.startswith("loop_back->"):
            continue
        target = after.attempts[-1].route.removeprefix("loop_back->")
        earlier = {a.key for a in applied.before.attempts_of(target)}
        for command in work(applied.commands):
            assert command.step == target
            assert attempt_key(command) not in earlier


@KEY_SETTINGS
@given(runs())
def test_work_after_an_approval_carries_the_approved_hash_in_its_key(run: Run) -> None:
    """A key after a human step ends in the first 16 hex digits of that step's latest
    approved proposal hash; a key before any human step is TASK/STEP/ATTEMPT."""
    wf = run.workflow
    humans = [i for i, s in enumerate(wf.steps) if s.kind is StepKind.HUMAN]
    for applied in run.accepted:
        for command in work(applied.commands):
            key = attempt_key(command)
            index = wf.index_of(command.step)
            before = [h for h in humans if h < index]
            if not before:
                task, step, number = key.split("/")
                assert (task, step) == (run.task_id, command.step) and int(number) >= 1
                continue
            approved = [a for a in applied.after.approvals if a.step == wf.steps[max(before)].id]
            assert approved, command
            assert key.endswith("/" + approved[-1].proposal_hash[:KEY_HASH_DIGITS])
            assert key.startswith(f"{run.task_id}/{command.step}/")


def test_the_keys_of_one_fix_bug_run_read_as_documented() -> None:
    """fix-bug: a test failure loops back (new key), an approval binds the merge's key to
    its hash, a failed merge halts, and the operator's retry runs under the same key."""
    d = Driver(fix_bug())
    (implement,) = d.submit({"issue": 1})
    assert isinstance(implement, RunStep)
    assert implement.idempotency_key == "t1/implement/1"
    (test,) = d.report()
    assert isinstance(test, RunStep) and test.idempotency_key == "t1/test/1"
    (again,) = d.report(ok=False, error="exit_status", output="1 failed")
    assert isinstance(again, RunStep)
    assert (again.command_id, again.idempotency_key) == ("t1/implement/2", "t1/implement/2")
    d.report()
    d.report()
    request = d.report(verdict={"approved": True})[0]
    commands = d.grant("carol")
    h = request.proposal_hash  # type: ignore[attr-defined]
    (ci,) = work(commands)
    assert isinstance(ci, RunCheck)
    assert ci.idempotency_key == f"t1/ci/1/{h[:16]}/check-1"
    (merge,) = d.check(True)
    assert isinstance(merge, RunStep)
    assert merge.idempotency_key == f"t1/merge/1/{h[:16]}"
    assert d.report(ok=False, error="exit_status") == []
    assert d.state.status.value == "halted"
    (retried,) = d.retry("olga", "the merge target was down")
    assert isinstance(retried, RunStep)
    assert (retried.command_id, retried.idempotency_key) == ("t1/merge/2", merge.idempotency_key)
    (repair,) = d.report(verdict=["not", "an", "object"])
    assert isinstance(repair, RunStep) and repair.repair_error
    assert (repair.command_id, repair.idempotency_key) == ("t1/merge/2/repair", merge.idempotency_key)
    d.report()
    assert [a.key for a in d.state.attempts_of("merge")] == [merge.idempotency_key] * 2
