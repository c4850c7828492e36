"""An execution of an exported state machine, recorded in statewright's store as a task
(``statewright sfn worker --db URL``), so ``statewright log``, ``show`` and ``verify`` read it
like any task's: a hash-chained log of audited events that the reducer replays.

    at(wf, body)             -> the recorded state the message continues, or None
    record(state, event)     -> the state after ``event``, appended (no outbox commands)

The task is keyed ``sfn:EXECUTION_ARN``. Its first message submits it with the execution's
input; each message then brings the record to the step it runs: the wait between two checks
is the step's timer fired, a person's decision at a human step (which every later message
carries, in ``decisions``) is her approval or rejection, checked by the reducer against the
store's people (her roles, separation of duty), and an approval window that closed is its
timer fired. The worker records what it did: each attempt (its brief is the state's; its
verdict or result, failure and reason code, note and cost), each check, each capture.

Nothing goes into the outbox: Step Functions moves the task, no statewright worker ever
runs it. The reducer judges every outcome the state machine routes (the export is checked
against it), so the record follows the execution. A message it cannot follow (a worker that
went silent and was given up, a decision the store's rules refuse, a message for a step the
record is not at) ends the record there with one log line; the answer to Step Functions is
not changed by it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from statewright._errors import IllegalEventError, InputError, StatewrightError, VersionConflictError
from statewright.definition.model import StepKind, Workflow
from statewright.machine.events import (
    ApprovalGranted,
    ApprovalRejected,
    Event,
    TaskSubmitted,
    TimerFired,
)
from statewright.machine.state import TaskState, TaskStatus, new_task, projection
from statewright.machine.task import transition

log = logging.getLogger("statewright.sfn")
_STEPS_PER_MESSAGE = 4  # a timer, a decision, ...: what one message may bring the record past


class RecordStops(StatewrightError):
    """The record cannot follow this message; it ends where it is."""


def record_key(execution: str) -> str:
    return f"sfn:{execution}"


class Recorder:
    """Records executions in ``engine``'s store (see the module docstring)."""

    def __init__(self, engine: Any, echo: Any = None) -> None:
        self.engine = engine
        self.echo = echo
        self._stopped: set[str] = set()

    def task_of(self, execution: str) -> str | None:
        return self.engine.store.task_by_key(record_key(execution))  # type: ignore[no-any-return]

    def at(self, wf: Workflow, body: Mapping[str, Any]) -> TaskState | None:
        """The recorded state that ``body`` continues, brought up to it; None when the record
        has ended (or cannot follow: then it ends now, with one log line)."""
        execution = str(body.get("task", ""))
        if not execution or execution in self._stopped:
            return None
        try:
            state = self._state(wf, body, execution)
            for _ in range(_STEPS_PER_MESSAGE):
                event = self._catch_up(state, body)
                if event is None:
                    return state
                state = self.record(state, event)
            raise RecordStops(f"the message for step {body.get('step')!r} is more than {_STEPS_PER_MESSAGE} "
                              "events ahead of the record")
        except (RecordStops, IllegalEventError, InputError, VersionConflictError) as exc:
            self._stop(execution, str(exc))
            return None
        except Exception as exc:  # a store that fails: the record ends, the worker goes on
            from statewright.runtime.screen import describe

            self._stop(execution, describe(exc))
            return None

    def record(self, state: TaskState, event: Event) -> TaskState:
        """``event`` appended to the task's log with the state the reducer gives (and no
        outbox commands: Step Functions runs the task)."""
        new, _ = transition(state, event)
        res = self.engine.store.append(state.task_id, state.version, event.wire(), projection(new), [],
                                       terminal=new.terminal)
        if res.duplicate:
            again: TaskState = self.engine.state(state.task_id)
            return again
        return new

    def stop(self, execution: str, why: str) -> None:
        self._stop(execution, why)

    # --- the record brought to the message --------------------------------------------
    def _state(self, wf: Workflow, body: Mapping[str, Any], execution: str) -> TaskState:
        tid = self.task_of(execution)
        if tid is not None:
            return self.engine.state(tid)  # type: ignore[no-any-return]
        first = wf.steps[0]
        if body.get("step") != first.id or int(body.get("attempt", 1)) != 1 or body.get("kind") in ("halted",
                                                                                                    "ended"):
            raise RecordStops(f"its first message is for step {body.get('step')!r}, not the first step's first "
                              "attempt (the worker that had the first one kept no record)")
        from statewright.runtime.engine import new_task_id
        from statewright.runtime.inputs import task_input

        data = task_input(wf, body.get("input") if isinstance(body.get("input"), Mapping) else {})
        self.engine.register(wf)
        now = self.engine.clock.now_ms()
        tid = new_task_id(now)
        event = TaskSubmitted(event_id=f"{tid}:submitted", at_ms=now, input=data)
        new, _ = transition(new_task(tid, wf), event)
        res = self.engine.store.append(tid, 0, event.wire(), projection(new), [], workflow=wf.name,
                                       workflow_hash=wf.content_hash, idem_key=record_key(execution))
        if res.duplicate:  # another worker's first message of the same execution
            again = self.task_of(execution)
            if again is None:
                raise RecordStops("its task could not be created")
            return self.engine.state(again)  # type: ignore[no-any-return]
        log.info("execution %s is recorded as task %s", execution, tid)
        if self.echo is not None:
            import json

            self.echo(json.dumps({"kind": "recorded", "task": execution, "task_id": tid}))
        return new

    def _catch_up(self, state: TaskState, body: Mapping[str, Any]) -> Event | None:
        """The event that brings ``state`` one step nearer to ``body`` (None: it is there)."""
        kind = str(body.get("kind", ""))
        step = str(body.get("step", ""))
        attempt = int(body.get("attempt", 0) or 0)
        cur = state.current
        now = self.engine.clock.now_ms()
        if state.terminal:
            if kind in ("halted", "ended"):
                return None
            raise RecordStops(f"the record has ended ({state.status.value}) but a message for step {step!r} came")
        if cur is None:
            raise RecordStops("the record is at no step")
        here = cur.step == step and cur.attempt == attempt
        if kind in ("halted", "ended") and state.status is not TaskStatus.AWAITING_APPROVAL:
            return None  # the caller records what the end says, or stops the record
        if state.status is TaskStatus.AWAITING_APPROVAL:
            if here and kind == "human":
                return None
            return self._decision(state, body, now)
        if state.status is TaskStatus.WAITING and here and kind == "check" and cur.timer_id:
            return TimerFired(event_id=f"{cur.timer_id}:sfn", at_ms=now, timer_id=cur.timer_id)
        if here and state.status is TaskStatus.RUNNING:
            wf_step = state.workflow.step(cur.step)
            expected = {StepKind.AI: "ai", StepKind.CODE: "code", StepKind.WAIT: "check",
                        StepKind.HUMAN: "capture"}.get(wf_step.kind)  # a map step's children are tasks of their own
            if kind == expected:
                return None
        raise RecordStops(f"the record is at step {cur.step!r} attempt {cur.attempt} ({state.status.value}), "
                          f"the message at {kind} {step!r} attempt {attempt}")

    def _decision(self, state: TaskState, body: Mapping[str, Any], now: int) -> Event:
        """The decision the messages carry for the human step the record waits at."""
        cur = state.current
        if cur is None:
            raise RecordStops("the record waits at no step")
        decisions = body.get("decisions")
        got = decisions.get(cur.step) if isinstance(decisions, Mapping) else None
        if not isinstance(got, Mapping) or got.get("attempt") != cur.attempt:
            raise RecordStops(f"the message carries no decision of step {cur.step!r} attempt {cur.attempt}")
        if got.get("expired") is True:
            if not cur.timer_id:
                raise RecordStops(f"step {cur.step!r} expired on Step Functions but has no approval window here")
            return TimerFired(event_id=f"{cur.timer_id}:sfn", at_ms=now, timer_id=cur.timer_id)
        answer = got.get("answer")
        if not isinstance(answer, Mapping) or not isinstance(answer.get("actor"), str):
            raise RecordStops(f"the decision of step {cur.step!r} names no actor")
        actor = str(answer["actor"])
        person = next((p for p in self.engine.users.people() if p.name == actor and p.active), None)
        roles = person.roles if person is not None else ()
        common: dict[str, Any] = {
            "event_id": f"{state.task_id}/{cur.step}/{cur.attempt}/sfn-decision", "at_ms": now, "step": cur.step,
            "actor": actor, "roles": roles, "proposal_hash": cur.proposal_hash,
            "comment": "answered on Step Functions",
        }
        if answer.get("approved") is True:
            return ApprovalGranted(**common)
        return ApprovalRejected(**common, reason_code=str(answer.get("reason_code") or "not_approved"))

    def _stop(self, execution: str, why: str) -> None:
        if execution in self._stopped:
            return
        self._stopped.add(execution)
        tid = self.task_of(execution) if execution else None
        log.warning("execution %s: its record%s stops here: %s", execution, f" (task {tid})" if tid else "", why)
