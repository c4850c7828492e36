"""The statewright error tree.

    StatewrightError
    ├── DefinitionError (ValueError)        a workflow or loop file breaks a rule
    │   └── LoopDefinitionError             a loop file breaks a rule
    ├── IllegalEventError                   the reducer refuses an event; state unchanged
    │   └── ApprovalError                   the approver may not act (role, duty, hash, expiry);
    │                                       its ``refusal`` says which kind of no it is
    ├── StoreError
    │   ├── VersionConflictError            a stale expected version lost the race
    │   ├── StaleLeaseError                 a report carries an old fencing token
    │   ├── StoreUnavailableError           the database cannot be reached; stop claiming
    │   ├── NotAStatewrightDatabaseError    the file is not a statewright database
    │   └── SchemaVersionError              the database is from a newer statewright
    ├── TaskNotFoundError (LookupError)
    ├── InputError (ValueError)             bad task input or bad CLI input
    │   ├── TaskStateError                  the act does not apply to the task as it stands now
    │   └── KeyReusedError                  an idempotency key already names other work
    ├── WorkerStoppedError                  a worker could not go on; its leases were released
    ├── TaskTokenError                      a remote agent's task token is not open (reported, late, unknown)
    ├── AccessError                         a person could not be identified, or may not act
    │   ├── AuthenticationError             no token, or one that is unknown or revoked
    │   └── PermissionDeniedError           the token's person lacks the role, or is not --as
    ├── LoopInvariantError                  the loop reducer caught itself leaving its table
    └── ExecutorError
        ├── TransientError                  retryable: timeout, throttle, connection
        └── PermanentError                  not retryable: a poisoned command
"""

from __future__ import annotations

from enum import StrEnum


class StatewrightError(Exception):
    """Root of every error statewright raises on purpose."""


class DefinitionError(StatewrightError, ValueError):
    """A workflow or loop definition breaks a rule. Carries every problem found."""

    def __init__(self, problems: list[str], source: str = "<definition>") -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__("\n".join(f"{source}: {p}" for p in self.problems))


class LoopDefinitionError(DefinitionError):
    """A loop file (or dict) breaks a rule. Every problem names the field."""


class LoopInvariantError(StatewrightError):
    """The loop reducer was about to make a move the state table does not allow."""


class IllegalEventError(StatewrightError):
    """The reducer refused an event; the state is unchanged."""

    def __init__(self, msg: str, *, status: str = "", event_type: str = "") -> None:
        self.status = status
        self.event_type = event_type
        super().__init__(msg)


class StoreError(StatewrightError):
    """A storage backend could not do what was asked."""


class VersionConflictError(StoreError):
    """Another writer appended first: the expected version is stale."""

    def __init__(self, task_id: str, expected: int, actual: int) -> None:
        self.task_id = task_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"task {task_id}: expected version {expected}, found {actual}; reload and retry"
        )


class StaleLeaseError(StoreError):
    """A report carries a fencing token older than the command's current claim."""

    def __init__(self, command_id: str, token: int, current: int) -> None:
        self.command_id = command_id
        self.token = token
        self.current = current
        super().__init__(
            f"command {command_id}: fencing token {token} is stale (current {current})"
        )


class StoreUnavailableError(StoreError):
    """The database cannot be reached (connection refused or lost mid-call). A worker that
    gets it stops claiming; the leases it holds expire and other workers take over."""


class NotAStatewrightDatabaseError(StoreError):
    """The database file exists but was not made by statewright."""


class SchemaVersionError(StoreError):
    """The database schema is newer than this statewright, or needs an upgrade."""


class TaskNotFoundError(StatewrightError, LookupError):
    """No task has that id."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"no task with id {task_id!r}; list tasks with 'statewright tasks'")


class InputError(StatewrightError, ValueError):
    """Bad input: malformed JSON, input that fails the schema, a bad option."""


class TaskStateError(InputError):
    """The act does not apply to the task as it stands (retrying a task that is not halted,
    cancelling one that ended). Nothing changed."""


class KeyReusedError(InputError):
    """A submit's idempotency key already names a task of other input or another workflow:
    a repeat must be the same submission."""

    def __init__(self, msg: str, *, key: str, task_id: str) -> None:
        self.key = key
        self.task_id = task_id
        super().__init__(msg)


class WorkerStoppedError(StatewrightError):
    """A worker could not go on (an outcome, and even its failure, could not be recorded);
    it released its leases and stopped."""


class TaskTokenError(StatewrightError):
    """A remote agent reported or sent a heartbeat with a task token that is not open: the
    attempt was reported already, its deadline passed, or the token was never given out.
    Nothing changed (HTTP 409)."""


class AccessError(StatewrightError):
    """A person could not be identified, or may not do what was asked. Nothing changed."""


class AuthenticationError(AccessError):
    """No token was given, or the token is unknown, revoked, or its person was removed."""


class PermissionDeniedError(AccessError):
    """The token's person lacks the role the act needs, or is not the person ``--as`` names."""


class Refusal(StrEnum):
    """Why an approval or rejection was refused: the person may not (``not_allowed``: an
    agent, the wrong role or scope, separation of duty), the hash is not the current
    proposal's or the task waits at another step (``stale``), the window closed
    (``expired``), or nothing waits for an approval (``not_waiting``)."""

    NOT_ALLOWED = "not_allowed"
    STALE = "stale"
    EXPIRED = "expired"
    NOT_WAITING = "not_waiting"


class ApprovalError(IllegalEventError):
    """The approver may not act on this step (role, separation of duty, hash, expiry)."""

    def __init__(self, msg: str, *, refusal: Refusal = Refusal.NOT_ALLOWED, status: str = "",
                 event_type: str = "") -> None:
        self.refusal = refusal
        super().__init__(msg, status=status, event_type=event_type)


class ExecutorError(StatewrightError):
    """An executor could not perform a command."""

    def __init__(self, msg: str, *, reason: str = "error") -> None:
        self.reason = reason
        super().__init__(msg)


class TransientError(ExecutorError):
    """A retryable failure: timeout, throttling, a dropped connection."""


class PermanentError(ExecutorError):
    """A failure that retrying cannot fix."""


class ConflictError(PermanentError):
    """An effect's target refused the write: the record changed since the proposal was built
    (the expected version the step sent is not the record's). Not retried: the step fails
    with ``conflict``, and the workflow's ``on_conflict`` route takes the task back to
    analysis or review for a new proposal and a new approval."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg, reason=CONFLICT)


CONFLICT = "conflict"
