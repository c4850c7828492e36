"""The one seam every machine stands behind: a task, a loop run.

    machine.kind                                  the kind of stream its runs are in the store
    machine.transition(state, event)   -> Transition(state, commands, line)
    machine.state_to_dict(state) / machine.state_from_dict(data)
    machine.event_from_dict(data) / machine.command_from_dict(data)

Events and commands are frozen :class:`Record` s with a stable ``type`` written to the log;
every event carries an ``event_id`` (its append is idempotent) and the time it happened
(``at_ms``), every command a ``command_id``. One codec (``machine._records``) turns a record
into plain JSON types. Nothing here, nor in any machine, does I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar

from statewright._record import record
from statewright.machine._records import record_dict

StateT = TypeVar("StateT")
EventT = TypeVar("EventT", contravariant=True)
CommandT = TypeVar("CommandT")
LineT = TypeVar("LineT")


class StreamKind(StrEnum):
    """What a stream of events in the store is the history of."""

    TASK = "task"
    LOOP_RUN = "loop_run"


#: A loop run's stream id is this and its number: ``loop-run-1``. Here, not in the loop's
#: codec, so that the task runtime tells a run's id from a task's without loading the loop.
RUN_STREAM_PREFIX = "loop-run-"

#: The types of the commands a loop run's stream puts in the outbox (``WakeRun``,
#: ``DriveRun``): a worker hands them to their handlers, never to a task's executor.
LOOP_RUN_COMMANDS = frozenset({"WakeRun", "DriveRun"})


@record
class Record:
    """An event or a command: a frozen record with a stable ``type`` name."""

    type: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON types, with its ``type`` first."""
        return {"type": self.type, **record_dict(self)}


class Transition(NamedTuple, Generic[StateT, CommandT, LineT]):
    """What a transition gives: the new state, the commands to perform once it is stored, and
    (for a machine that keeps a human-readable record, the loop) the record line."""

    state: StateT
    commands: tuple[CommandT, ...]
    line: LineT


class Machine(Protocol[StateT, EventT, CommandT]):
    """A pure reducer and the codecs of its records, named by the kind of stream it drives."""

    kind: StreamKind

    def transition(self, state: StateT, event: EventT) -> Transition[StateT, CommandT, Any]: ...

    def state_to_dict(self, state: StateT) -> dict[str, Any]: ...

    def state_from_dict(self, data: Mapping[str, Any]) -> StateT: ...

    def event_from_dict(self, data: Mapping[str, Any]) -> Any: ...

    def command_from_dict(self, data: Mapping[str, Any]) -> CommandT: ...
