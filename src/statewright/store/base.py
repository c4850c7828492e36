"""The Store protocol: the one seam between the engine and durable storage.

Per task: an append-only, hash-chained event log, a state projection and an outbox of
commands, all written in ONE transaction that checks the expected version. Timers are
rows. Leases carry a fencing token so a late worker cannot report over a newer claim."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from statewright._errors import StoreUnavailableError as StoreUnavailableError  # re-export
from statewright._record import record
from statewright.store.chain import Chain, RawEvent, RawPeopleRow

if TYPE_CHECKING:
    from statewright.definition.fleet import FleetConfig
    from statewright.store.remote import RemoteRow

TASK_KIND = "task"  # the kind of stream a task is (statewright.machine.seam.StreamKind.TASK)


@record
class StoredTask:
    """A stored stream (a task, or a loop run): its projected state as of ``version``, its
    workflow and its status."""

    task_id: str
    workflow: str
    workflow_hash: str
    status: str
    version: int
    state: Mapping[str, Any]
    created_at_ms: int
    updated_at_ms: int
    kind: str = TASK_KIND  # what the stream is the history of: a task, or a loop run


@record
class Claim:
    """A command held under a lease. ``token`` is the fencing token of this claim;
    ``deliveries`` counts the times it was started, this one included (a give-back before
    starting takes its delivery back); ``failures`` the deliveries that reported a failure
    and were released to be tried again."""

    command_id: str
    task_id: str
    type: str
    body: Mapping[str, Any]
    token: int
    deliveries: int
    failures: int
    lease_expires_ms: int
    gates: tuple[str, ...] = ()  # the gates it was admitted through (store/admission.py)
    tenant: str = ""


@record
class TimerClaim:
    """A due timer a worker claimed, with the fencing token that claim holds."""

    timer_id: str
    task_id: str
    due_at_ms: int
    purpose: str
    token: int


@record
class AppendResult:
    """What an append did: the new version, whether it was a duplicate, and the command it claimed."""

    version: int
    duplicate: bool = False
    claimed: Claim | None = None


CLAIMABLE_AT_ONCE = frozenset({"RunStep", "RunCheck", "DriveRun"})  # what ``claim_for`` may claim as it inserts


@record
class NewCommand:
    """A command to insert: outbox row, or a timer row when ``due_at_ms`` and ``timer``."""

    command_id: str
    type: str
    body: Mapping[str, Any]
    available_at_ms: int
    timer: bool = False
    purpose: str = ""
    priority: int = 0  # higher is claimed first
    tenant: str = ""  # whose fair share it takes its place in
    gates: str | None = None  # JSON of its gates (store/admission.py), None: it passes none

    @property
    def chainable(self) -> bool:
        """Whether a commit may claim it at once for its worker (``claim_for``): not when a
        share or a limit must decide when it runs."""
        return self.gates is None and not self.tenant


@record
class AppendRequest:
    """One append of a batch (``Store.append_batch``): the arguments of ``Store.append``
    past version 0."""

    task_id: str
    expected_version: int
    event: Mapping[str, Any]
    state: Mapping[str, Any]
    commands: Sequence[NewCommand]
    complete: tuple[str, int] | None = None
    complete_timer: tuple[str, int] | None = None
    terminal: bool = False
    claim_for: tuple[str, int] | None = None
    encoded: Any = field(default=None, compare=False, repr=False)  # the store's own, see Store.encode
    complete_remote: str | None = None  # the remote attempt (its command id) this append ends
    # A new task's row (expected version 0): its workflow, submission key and parent task.
    workflow: str = ""
    workflow_hash: str = ""
    idem_key: str | None = None
    parent_id: str | None = None
    kind: str = TASK_KIND  # what the new stream is the history of: a task, or a loop run


@record
class Wake:
    """Claims under limits that ended, to be told with the commit of their outcomes
    (``Store.append_batch``): ``Store.wake``'s arguments."""

    gates: tuple[str, ...]
    now_ms: int
    count: int


@record
class EventRow:
    """One row of a task's event log, with its hash chain link."""

    task_id: str
    version: int
    event_id: str
    type: str
    body: Mapping[str, Any]
    at_ms: int
    prev_hash: str
    hash: str


class PeopleAction(StrEnum):
    """What one entry of the people log did (``sw_user_log.action``)."""

    BOOTSTRAP = "bootstrap"  # the first admin, on a store where no one is admin
    ADD = "add"  # a new person, or more roles for one (a removed person comes back)
    DROP_ROLES = "drop_roles"
    REMOVE = "remove"  # may no longer act; every token of theirs is revoked
    ISSUE_TOKEN = "issue_token"
    REVOKE_TOKEN = "revoke_token"


@record
class PeopleChange:
    """One change to people, roles or tokens, asked of ``Store.change_people``. ``subject``
    is the person's name (for REVOKE_TOKEN the store fills in the token's owner)."""

    action: PeopleAction
    subject: str = ""
    roles: tuple[str, ...] = ()
    token_id: str = ""
    token_hash: str = ""  # sha256 of the token; the token itself is never stored


@record
class Person:
    """A person: their name, their roles, and whether they are active."""

    name: str
    roles: tuple[str, ...]
    active: bool


@record
class TokenRow:
    """An issued token: its id, its holder, and when it was issued and revoked (never the token)."""

    token_id: str
    name: str
    issued_at_ms: int
    revoked_at_ms: int | None


@record
class PeopleLogEntry:
    """One row of the append-only people log, linked by the same chain as a task's events."""

    seq: int
    at_ms: int
    actor: str
    action: str
    subject: str
    roles: tuple[str, ...]
    token_id: str
    prev_hash: str
    hash: str


class PollingWaits:
    """How a store that cannot announce new work lets an idle worker wait: it sleeps, or
    waits on its ``wake`` event, so an interruption needs nothing (the in-memory database
    and SQLite; PostgreSQL listens instead)."""

    def wait_for_work(self, timeout_seconds: float, wake: threading.Event | None = None) -> bool:
        """Block an idle worker for up to ``timeout_seconds``, or until ``wake`` is set.
        Returns False: no work is announced, so callers keep polling."""
        if wake is not None:
            wake.wait(max(0.0, timeout_seconds))
        elif timeout_seconds > 0:
            time.sleep(timeout_seconds)
        return False

    def interrupt_waits(self) -> None:
        return None  # wait_for_work waits on its wake event itself


class Store(Protocol):
    """What the engine, its workers and the CLI need from a backend. The SQL stores (SQLite,
    PostgreSQL: store/sql.py) and the in-memory store (store/memory.py) implement it."""

    url: str
    chain: Chain  # how event rows and people log rows are linked
    announces_work: bool  # True: wait_for_work wakes on new work, so idle waits can be long

    def close(self) -> None: ...

    def schema_version(self) -> int: ...

    def ensure_schema(self, *, upgrade: bool = True) -> int:
        """Create a fresh schema, or apply pending migrations (``statewright db upgrade``)."""
        ...

    def put_definition(self, content_hash: str, name: str, version: int, body: Mapping[str, Any]) -> None: ...

    def get_definition(self, content_hash: str) -> Mapping[str, Any] | None: ...

    def definition_by_name(self, name: str) -> str | None:
        """The content hash of the highest version stored under the workflow name ``name``."""
        ...

    def append(
        self,
        task_id: str,
        expected_version: int,
        event: Mapping[str, Any],
        state: Mapping[str, Any],
        commands: Sequence[NewCommand],
        *,
        workflow: str = "",
        workflow_hash: str = "",
        idem_key: str | None = None,
        complete: tuple[str, int] | None = None,
        complete_timer: tuple[str, int] | None = None,
        terminal: bool = False,
        claim_for: tuple[str, int] | None = None,
        complete_remote: str | None = None,
        kind: str = TASK_KIND,
    ) -> AppendResult:
        """Append ``event`` at ``expected_version`` + 1 with the projection ``state`` and the
        ``commands``, in ONE transaction. At version 0 the stream is made, of ``kind``."""
        ...

    def encode(self, request: AppendRequest) -> AppendRequest:
        """The request with its JSON text made now (a worker does this before the commit, so
        the commit itself has less to do); appending it gives the same rows."""
        ...

    def append_batch(
        self, requests: Sequence[AppendRequest], *, wake: Wake | None = None
    ) -> list[AppendResult] | None:
        """All of ``requests`` in ONE transaction (one commit), or none of them: None when
        any one is refused (a version conflict, a stale lease, a duplicate event id), and
        then nothing was written; the caller appends them one by one to learn which. With
        ``wake``, what ``Store.wake`` does with it is done too: in the same transaction, or
        right after its commit (PostgreSQL), only where the batch committed."""
        ...

    def append_all(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        """All of ``requests`` in ONE transaction, in order (one task may appear more than
        once, each append expecting the version the one before it leaves): a child's terminal
        event with its parent's ChildEnded, a parent's event with the children it starts or
        cancels. When the first event is already recorded, returns its duplicate result alone
        and writes nothing; any other refusal raises as ``append`` does (VersionConflictError,
        StaleLeaseError) and writes nothing."""
        ...

    def children(self, parent_id: str) -> list[StoredTask]:
        """The tasks ``parent_id`` started, oldest first."""
        ...

    def load(self, task_id: str) -> StoredTask | None: ...

    def load_many(self, task_ids: Sequence[str]) -> dict[str, StoredTask]: ...

    def task_by_key(self, idem_key: str) -> str | None: ...

    def list_tasks(
        self, status: str | None = None, workflow: str | None = None, limit: int = 1000, *, kind: str = TASK_KIND
    ) -> list[StoredTask]:
        """Streams of ``kind`` (tasks by default), oldest first; ``workflow`` is a loop's name
        for loop runs."""
        ...

    def events(self, task_id: str, after: int = 0) -> list[EventRow]:
        """The stream's events past version ``after`` (every one by default), in order."""
        ...

    def task_ids(self) -> list[str]: ...

    def has_event(self, event_id: str) -> bool: ...

    def outbox(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """The outbox rows (of one task), due first, as plain dicts."""
        ...

    def timers(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """The timer rows (of one task), due first: timer_id, task_id, due_at_ms, purpose."""
        ...

    # --- what verify and db upgrade read and rewrite (runtime/verify.py) ------------------
    def raw_events(self, task_id: str) -> list[RawEvent]:
        """A task's event rows exactly as stored, in version order."""
        ...

    def raw_task(self, task_id: str) -> tuple[Any, ...] | None:
        """The task row as stored: task_id, workflow, workflow_hash, status, version, state
        (JSON text), created_at_ms, updated_at_ms, last_hash."""
        ...

    def logged_task_ids(self) -> list[str]:
        """Every task id with a task row or an event row."""
        ...

    def rechain(self, task_id: str, version: int, links: Sequence[tuple[str, str]]) -> bool:
        """Replace the links of events 1..``version`` while the task is still at ``version``."""
        ...

    def replace_projection(self, task_id: str, version: int, state: Mapping[str, Any]) -> bool:
        """Write ``state`` as the projection while the task is still at ``version``."""
        ...

    def claim(
        self, worker_id: str, now_ms: int, lease_ms: int, limit: int = 1, *, task_id: str | None = None
    ) -> list[Claim]:
        """Lease up to ``limit`` due commands: higher priority first, then by fair share
        across tenants (oldest first within one). A command with gates is admitted under
        the fleet's limits in the same call, or given back waiting with its reason."""
        ...

    # --- the fleet (store/admission.py) ---------------------------------------------------
    def put_fleet(self, config: FleetConfig, at_ms: int) -> None:
        """Replace the named limits and tenants, and wake what waited on a budget."""
        ...

    def fleet(self) -> FleetConfig: ...

    def wake(self, gates: Sequence[str], now_ms: int, count: int = 1) -> None:
        """Make up to ``count`` commands waiting for a slot of each of ``gates`` due now (as
        many claims under them ended: their slots freed with their leases)."""
        ...

    def record_usage(
        self, command_id: str, tenant: str, gates: Sequence[str], tokens: int, money_usd: float, at_ms: int
    ) -> None:
        """Count what an admitted command used against its token rates and tenant budget."""
        ...

    def usage(self, tenant: str, day: int) -> tuple[int, float]:
        """(tokens, money) ``tenant`` used on UTC day ``day`` (epoch days)."""
        ...

    def renew(self, command_id: str, token: int, now_ms: int, lease_ms: int) -> bool: ...

    def release(
        self, command_id: str, token: int, available_at_ms: int, *, failed: bool, error: str = "",
        started: bool = True,
    ) -> None:
        """Free the lease of ``token`` (an older token changes nothing); the command is due
        again at ``available_at_ms``. ``failed`` counts a failure; ``started=False`` (the
        command was never performed) takes its delivery back."""
        ...

    def ack(self, command_id: str, token: int, *, wake: Wake | None = None) -> None:
        """Delete the command claimed with ``token`` (an older token changes nothing): its
        claim ended with no outcome to record. With ``wake`` (the slots of claims under
        limits that ended, this one's among them), what ``Store.wake`` does with it is done
        too: in the same transaction, or right after its commit (PostgreSQL), as
        ``append_batch`` does."""
        ...

    def claim_timers(
        self, worker_id: str, now_ms: int, lease_ms: int, limit: int = 10, *, task_id: str | None = None
    ) -> list[TimerClaim]: ...

    def drop_timer(self, timer_id: str, token: int) -> None: ...

    def next_due_ms(self, *, task_id: str | None = None) -> int | None: ...

    # --- remote attempts (store/remote.py) ------------------------------------------------
    def park_remote(
        self, command_id: str, token: int, task_id: str, queue: str, body: Mapping[str, Any], now_ms: int,
        timeout_due_ms: int | None, heartbeat_ms: int,
    ) -> None: ...

    def claim_remote(self, queue: str, agent: str, token_hash: str, now_ms: int) -> RemoteRow | None: ...

    def remote_by_token(self, token_hash: str) -> RemoteRow | None: ...

    def heartbeat_remote(self, token_hash: str, now_ms: int) -> RemoteRow | None: ...

    def remote_row(self, command_id: str) -> RemoteRow | None: ...

    def remote_rows(self, queue: str | None = None) -> list[RemoteRow]: ...

    def counts_by_status(self) -> dict[str, int]:
        """How many tasks (streams of kind ``task``) stand at each status."""
        ...

    def wait_for_work(self, timeout_seconds: float, wake: threading.Event | None = None) -> bool: ...

    def interrupt_waits(self) -> None:
        """Make every ``wait_for_work`` in progress look at its ``wake`` event now (one that
        waits on the event itself needs nothing): work was handed to a waiting worker
        in-process, where no announcement reaches it."""
        ...

    # --- people (store/people.py) ----------------------------------------------------------
    def change_people(
        self, changes: Sequence[PeopleChange], *, by_token_hash: str | None, at_ms: int
    ) -> list[PeopleLogEntry]:
        """Apply ``changes`` and log each, in ONE transaction that first checks the actor:
        the active token ``by_token_hash`` of an admin, or (None) a bootstrap while no one
        is admin. Refusals raise AccessError or InputError and change nothing."""
        ...

    def token_holder(self, token_hash: str) -> tuple[str, str, tuple[str, ...]] | None:
        """(token id, name, roles) for an active token of an active person, else None."""
        ...

    def still_holds(self, name: str, token_id: str) -> tuple[str, ...] | None:
        """The roles of ``name`` while it is active and (when ``token_id``) that token of
        theirs is not revoked; None otherwise."""
        ...

    def grant_problem(self, name: str, token_id: str = "") -> str | None:
        """Why the tables' row of ``name`` (and of token ``token_id``) is not what the people
        log's rows about them give, checking each row's link; None when it is."""
        ...

    def people(self) -> list[Person]: ...

    def tokens(self) -> list[TokenRow]: ...

    def people_log(self) -> list[PeopleLogEntry]: ...

    def raw_people_log(self) -> list[RawPeopleRow]:
        """The people log's rows exactly as stored, in seq order."""
        ...

    def people_problems(self) -> list[str]:
        """What does not match the people log: a broken chain, an edited row, a person,
        role or token the log does not explain."""
        ...

    def rechain_people(self, last_hash: str, links: Sequence[tuple[str, str]]) -> bool:
        """Replace every (prev_hash, hash) of the people log with ``links`` while it still
        ends at ``last_hash``; False (nothing written) when it moved on."""
        ...
