"""One table of exit statuses for every command that says how work ended: ``run`` for a task,
``loop run`` for a loop run (README: "Exit status"). The same number means the same thing
whichever ran: a script handles ``statewright`` one way."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """How the work a command ran stands when the command exits."""

    OK = 0  # a task completed; a loop run done, or stopped cleanly (it resumes on the next start)
    FAILED = 1  # the command itself failed (bad input, a refused act); one line says why
    COMPLETED_EARLY = 3  # a step's ``on_success: complete`` ended the task before its last step
    WAITING = 4  # a person decides next: a task's approval, a loop's gate, a pass's task's approval
    ENDED_SHORT = 5  # a task halted; a loop run ended escalated, stuck or out_of_budget
    CANCELLED = 6  # the task was cancelled


#: ``statewright run``'s exit status by the status the task ended in.
TASK_EXIT = {
    "completed": Exit.OK,
    "completed_early": Exit.COMPLETED_EARLY,
    "awaiting_approval": Exit.WAITING,
    "halted": Exit.ENDED_SHORT,
    "cancelled": Exit.CANCELLED,
}
