"""The loop layer: an outer loop over a backlog, run as an explicit state machine.

    find -> assign -> run -> check -> (approve) -> record -> decide

The pure core (``statewright.machine.loop``) is :func:`transition` / :func:`resume` over
:class:`LoopState`; the :class:`LoopRunner` performs its commands against a
:class:`LoopStore` (loop runs as streams of the store: memory, SQLite or PostgreSQL) and a
:class:`PassRunner`. The click group lives in ``statewright.loop.cli`` (``loop``).
"""

from statewright.loop.definition import LoopDefinition, load_loop, parse_loop
from statewright.loop.errors import LoopDefinitionError, RunHeldError, SourceError
from statewright.loop.passes import (
    CommandPassRunner,
    EnginePassRunner,
    PassResult,
    PassRunner,
    PassStatus,
)
from statewright.loop.runner import LoopRunner, RunOutcome
from statewright.loop.simulate import SimInputs, exact, monte_carlo
from statewright.loop.sources import WorkItem
from statewright.loop.store import LoopStore
from statewright.machine.loop.model import (
    TABLE,
    CheckOutcome,
    CheckResult,
    ItemLedger,
    ItemStatus,
    LoopConfig,
    LoopState,
    LoopStatus,
    RecordLine,
    Verdict,
)
from statewright.machine.loop.reducer import Transition, initial_state, resume, transition

__all__ = [
    "TABLE",
    "CheckOutcome",
    "CheckResult",
    "CommandPassRunner",
    "EnginePassRunner",
    "ItemLedger",
    "ItemStatus",
    "LoopConfig",
    "LoopDefinition",
    "LoopDefinitionError",
    "LoopRunner",
    "LoopState",
    "LoopStatus",
    "LoopStore",
    "PassResult",
    "PassRunner",
    "PassStatus",
    "RecordLine",
    "RunHeldError",
    "RunOutcome",
    "SimInputs",
    "SourceError",
    "Transition",
    "Verdict",
    "WorkItem",
    "exact",
    "initial_state",
    "load_loop",
    "monte_carlo",
    "parse_loop",
    "resume",
    "transition",
]
