"""The outer loop's pure machine: the state table of seed 001, behind the machine seam.

    transition(state, event) -> Transition(state, commands, line)     (reducer.py)
    LoopState, LoopConfig, ItemLedger, LoopStatus, TABLE               (model.py)
    events and commands, each a Record with a stable type              (events.py)
    JSON forms of state, events, commands and record lines             (codec.py)

``LOOP_MACHINE`` names it for the store and ``verify``: streams of kind ``loop_run``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statewright.machine.loop import codec, events, reducer
from statewright.machine.loop.events import Command, Event, RunOpened
from statewright.machine.loop.model import LoopState, RecordLine
from statewright.machine.seam import StreamKind, Transition


class LoopMachine:
    """The loop reducer and its codecs behind ``statewright.machine.seam.Machine``."""

    kind = StreamKind.LOOP_RUN

    def opened(self, event: RunOpened) -> LoopState:
        """The state a run's stream starts from: what its first event recorded."""
        return codec.state_from_dict(event.state)

    def transition(self, state: LoopState, event: Event) -> Transition[LoopState, Command, RecordLine | None]:
        return reducer.transition(state, event)

    def state_to_dict(self, state: LoopState) -> dict[str, Any]:
        return codec.state_to_dict(state)

    def state_from_dict(self, data: Mapping[str, Any]) -> LoopState:
        return codec.state_from_dict(data)

    def event_from_dict(self, data: Mapping[str, Any]) -> Event:
        return events.event_from_dict(data)

    def command_from_dict(self, data: Mapping[str, Any]) -> Command:
        return events.command_from_dict(data)


LOOP_MACHINE = LoopMachine()

__all__ = ["LOOP_MACHINE", "LoopMachine"]
