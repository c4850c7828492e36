"""Errors of the loop layer, all leaves of the statewright error tree.

StatewrightError
├── DefinitionError (ValueError)
│   └── LoopDefinitionError          a loop file breaks a rule
├── IllegalEventError                 (the loop reducer raises it as is)
├── InputError (ValueError)
│   └── RunHeldError                 a STUCK run holds new runs until cleared
├── ExecutorError
│   └── SourceError                  the item source is down or malformed
└── LoopInvariantError               the reducer caught itself leaving the table
"""

from __future__ import annotations

from statewright._errors import ExecutorError, InputError, LoopDefinitionError, LoopInvariantError

__all__ = ["LoopDefinitionError", "LoopInvariantError", "RunHeldError", "SourceError"]


class RunHeldError(InputError):
    """A run ended STUCK and nobody has cleared it: no new run may start."""

    def __init__(self, msg: str, *, run_id: str, loop: str) -> None:
        self.run_id = run_id
        self.loop = loop
        super().__init__(msg)


class SourceError(ExecutorError):
    """The item source could not be read. Treated as a crash: nothing is written."""
