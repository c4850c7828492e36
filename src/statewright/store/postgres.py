"""The scale-out backend: PostgreSQL through psycopg 3 and a psycopg_pool connection pool.

Many worker processes on many machines share one database. They claim outbox rows with
``FOR UPDATE SKIP LOCKED`` and sleep on ``LISTEN statewright_work`` while idle; every
transaction that leaves claimable work sends ``pg_notify('statewright_work', <schema>)``.

    postgresql://user@host:5432/db                  tables in the user's current schema
    postgresql://user@host:5432/db?schema=tenant_a  tables in schema tenant_a (created)

Driver errors are classified here and nowhere else: a unique violation or a deadlock is a
lost race (VersionConflictError inside ``append``); a refused or dropped connection is
StoreUnavailableError. psycopg is the ``[postgres]`` extra, imported when a store opens."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from statewright._crash import crash_point
from statewright._errors import InputError, NotAStatewrightDatabaseError, StoreError, VersionConflictError
from statewright.store.base import (
    CLAIMABLE_AT_ONCE,
    TASK_KIND,
    AppendRequest,
    AppendResult,
    Claim,
    NewCommand,
    StoreUnavailableError,
    Wake,
)
from statewright.store.fleet_sql import claim_of, fair_params, in_claim_order, is_gated, with_gates
from statewright.store.sql import _NEXT_COMMAND_SQL, _RELEASE_SQL, SqlStore, _Encoded, _release_params

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

CHANNEL = "statewright_work"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,45}$")
_SCHEMA_LOCK_KEY = int.from_bytes(hashlib.sha256(b"statewright.schema").digest()[:8], "big", signed=True)
_PEOPLE_LOCK_KEY = int.from_bytes(hashlib.sha256(b"statewright.people").digest()[:8], "big", signed=True)
_GATES_LOCK_KEY = int.from_bytes(hashlib.sha256(b"statewright.gates").digest()[:8], "big", signed=True)
_CONFIG_LOCK_KEY = int.from_bytes(hashlib.sha256(b"statewright.fleet-config").digest()[:8], "big", signed=True)
_LISTEN_SLICE_SECONDS = 0.1  # how often the listener thread looks at its stop flag


def _driver() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError:
        msg = (
            "PostgreSQL needs the psycopg driver, which is not installed; "
            "run: pip install 'statewright[postgres]'"
        )
        raise StoreError(msg) from None
    return psycopg, psycopg_pool


def redact(url: str) -> str:
    """The URL with its password replaced by ``***``, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def split_url(url: str) -> tuple[str, str | None]:
    """``(libpq conninfo, schema)``: statewright's own ``schema`` parameter is taken out of
    the query string because libpq rejects parameters it does not know."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    rest = [(k, v) for k, v in query if k != "schema"]
    if not schemas:
        return url, None
    schema = schemas[-1]
    if not _SCHEMA_NAME.match(schema):
        msg = (
            f"{redact(url)}: schema {schema!r} is not a plain lower-case identifier of at most "
            "46 characters (letters, digits, underscore; not starting with a digit)"
        )
        raise StoreError(msg)
    return urlunsplit(parts._replace(query=urlencode(rest))), schema


class PostgresStore(SqlStore):
    """``url`` is the URL with any password replaced by ``***`` (it shows up in messages);
    the store connects with the URL it was given."""

    skip_locked = " FOR UPDATE SKIP LOCKED"
    announces_work = True
    _gated_seen = False  # the last claim met commands under gates
    _claim_holds = False  # the plain claim is a statement of its own, before any admission
    # The picked ids as an array, looked up by the primary key: a plan that holds for any
    # parameters, so the prepared claim is planned once. With IN and a bound LIMIT, a claim
    # under fair shares got a new plan at every call, each reading the indexes' dead entries.
    _picked = "command_id = ANY(ARRAY({}))"
    _version_sql = "(SELECT sw_config_version())"
    _greatest = "GREATEST"

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 16,
        connect_timeout_seconds: float = 5.0,
        pool_timeout_seconds: float = 10.0,
    ) -> None:
        driver, pool_module = _driver()
        self._psycopg = driver
        self.url = redact(url)
        self._conninfo, self._schema = split_url(url)
        self._connect_timeout = max(2, int(connect_timeout_seconds))
        self._local = threading.local()
        self._sql_cache: dict[str, str] = {}
        # (version, last_hash) per task as this store last wrote or read it: the one-statement
        # append needs the previous hash before it writes; a stale entry is refused by the
        # statement's own check, and the shared append then gives the answer.
        self._last_hash: dict[str, tuple[int, str, str]] = {}
        self._fast_sql: dict[tuple[Any, ...], str] = {}
        # LISTEN side: one connection and one thread per store, shared by its callers.
        self._cond = threading.Condition()
        self._generation = 0
        self._listener: threading.Thread | None = None
        self._listen_conn: psycopg.Connection[Any] | None = None
        self._listen_error: str | None = None
        self._listen_stop = threading.Event()
        self._listen_schema = ""
        self._closed = False
        self._probe()  # an unreachable server is one line at once, not the pool's retries
        self._pool: ConnectionPool[Any] = pool_module.ConnectionPool(
            self._conninfo,
            min_size=min_size,
            max_size=max(min_size, max_size),
            kwargs={"autocommit": True, "connect_timeout": self._connect_timeout},
            configure=self._configure,
            open=False,
            timeout=pool_timeout_seconds,
            name="statewright",
            num_workers=1,
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout_seconds)
            self.ensure_schema()
        except BaseException as exc:
            self._pool.close()
            if isinstance(exc, pool_module.PoolTimeout):
                raise StoreUnavailableError(self._why_unreachable()) from None
            raise

    # --- connections -------------------------------------------------------------------
    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        if self._schema is not None:
            from psycopg import sql

            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self._schema)))

    def _probe(self) -> None:
        try:
            conn = self._psycopg.connect(self._conninfo, connect_timeout=self._connect_timeout)
        except self._psycopg.Error as exc:
            raise StoreUnavailableError(self._unreachable(" ".join(str(exc).split()))) from None
        conn.close()

    def _unreachable(self, reason: str) -> str:
        return (
            f"cannot connect to PostgreSQL at {self.url}: {reason}; check that the server runs "
            "and the URL (user, host, port, database) is right"
        )

    def _why_unreachable(self) -> str:
        """Connect once outside the pool to learn the driver's reason, for the message."""
        try:
            conn = self._psycopg.connect(self._conninfo, connect_timeout=self._connect_timeout)
        except self._psycopg.Error as exc:
            reason = " ".join(str(exc).split())
        else:
            conn.close()
            reason = "no connection became available in time"
        return self._unreachable(reason)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop_listener()
        self._pool.close()

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        active = getattr(self._local, "cur", None)
        if active is not None:  # nested: join the caller's transaction, as SQLite does
            with active.connection.cursor() as cur:
                yield cur
            return
        with self._classified(), self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            self._local.cur = cur
            try:
                yield cur
            finally:
                self._local.cur = None

    @contextmanager
    def _stmt(self) -> Iterator[Any]:
        """Reads and single-statement writes run in autocommit: each statement is its own
        transaction, which saves the BEGIN and COMMIT round trips."""
        active = getattr(self._local, "cur", None)
        if active is not None:
            with active.connection.cursor() as cur:
                yield cur
            return
        with self._classified(), self._pool.connection() as conn, conn.cursor() as cur:
            yield cur

    @contextmanager
    def _one_trip(self, conn: Any, after: tuple[str, tuple[Any, ...]] | None = None) -> Iterator[None]:
        """A transaction sent as one pipeline with its BEGIN and COMMIT, and ``after`` (a
        statement and its parameters) on its own after the COMMIT, skipped where the
        transaction failed: its statements go in as few round trips as the results it waits
        for (one, when it waits for none).
        psycopg's ``transaction()`` inside a pipeline waits for its BEGIN on its own, and
        around one sends BEGIN and COMMIT each as a round trip of its own (row locks taken
        in the pipeline are held across it). An error rolls it back, through psycopg, which
        then forgets the statements it took for prepared in the aborted pipeline, and is
        raised again."""
        failed: BaseException | None = None
        try:
            with conn.pipeline():
                try:
                    # Not prepared: after an error they are skipped, as prepared ones would be.
                    conn.execute("BEGIN", prepare=False)
                    yield
                    conn.execute("COMMIT", prepare=False)
                    if after is not None:
                        conn.execute(*after)
                except BaseException as exc:  # the pipeline's end reports it aborted: rolled back below
                    failed = exc
        except self._psycopg.Error as exc:  # an error the pipeline's end (its sync) brought back
            failed = failed or exc
        if failed is not None:
            with suppress(self._psycopg.Error):
                conn.rollback()
            raise failed

    @contextmanager
    def _classified(self) -> Iterator[None]:
        """The one place driver errors about the connection become statewright errors."""
        errors = self._psycopg
        try:
            yield
        except errors.errors.TransactionRollback:
            raise  # a lost race; append classifies it with _is_unique_violation
        except (errors.OperationalError, errors.InterfaceError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            msg = (
                f"PostgreSQL at {self.url} is unavailable ({reason}); "
                "stop claiming work: held leases expire and other workers take over"
            )
            raise StoreUnavailableError(msg) from None

    def _x(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """PostgreSQL text cannot hold a NUL character, so a value with one (a task id or a
        filter given by a caller) is refused as input before it is sent, as one line."""
        for p in params:
            if isinstance(p, str) and "\x00" in p:
                raise InputError(f"{p[:60]!r} holds a NUL character (\\u0000), which PostgreSQL text cannot hold")
        return super()._x(cur, sql, params)

    def _sql(self, sql: str) -> str:
        out = self._sql_cache.get(sql)
        if out is None:
            out = sql.replace("%", "%%").replace("?", "%s")
            self._sql_cache[sql] = out
        return out

    def _is_unique_violation(self, exc: BaseException) -> bool:
        """A lost race: a duplicate key, or a deadlock / serialization failure (both mean
        another writer got there first; the remedy is the same: reload and retry)."""
        errors = self._psycopg.errors
        return isinstance(exc, errors.UniqueViolation | errors.TransactionRollback)

    def _tables(self, cur: Any) -> set[str]:
        rows = cur.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
        ).fetchall()
        return {str(r[0]) for r in rows}

    # --- schema ------------------------------------------------------------------------
    def ensure_schema(self, *, upgrade: bool = True) -> int:
        """The shared migrations, one process at a time (an advisory lock), in the URL's
        ``schema`` when it names one (created if missing)."""
        try:
            with self._tx() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
                if self._schema is not None:
                    from psycopg import sql

                    cur.execute(
                        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._schema))
                    )
                version = super().ensure_schema(upgrade=upgrade)
                for name, (create, body) in (("sw_due_commands", self._due_function()),
                                             ("sw_wake", self._wake_function()),
                                             ("sw_ack", self._ack_procedure()),
                                             ("sw_config_version", self._version_function())):
                    found = cur.execute("SELECT prosrc FROM pg_proc WHERE proname = %s"
                                        " AND pronamespace = current_schema()::regnamespace", (name,)).fetchone()
                    if found is None or found[0] != body:
                        cur.execute(create)
                return version
        except NotAStatewrightDatabaseError as exc:
            where = f"schema {self._schema!r}" if self._schema else "the current schema"
            msg = (
                f"{exc.args[0].split('; point --db')[0]} in {where}; use another database, "
                "or give statewright a schema of its own: add ?schema=statewright to the URL"
            )
            raise NotAStatewrightDatabaseError(msg) from None

    # --- races the shared SQL cannot see on SQLite ---------------------------------------
    def _lock_people_txn(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_PEOPLE_LOCK_KEY,))

    def _claim_scope(self) -> AbstractContextManager[Any]:
        return nullcontext()

    def _claim_where(self, cur: Any, now_ms: int, limit: int, task_id: str | None) -> tuple[str, tuple[Any, ...]]:
        """The due rows, picked by ``sw_due_commands`` (``_due_function``) where the claim
        is not for one task: evaluated once, before the rows are looked up by id."""
        if task_id is not None:
            return super()._claim_where(cur, now_ms, limit, task_id)
        return "command_id = ANY((SELECT sw_due_commands(?, ?))::TEXT[])", (now_ms, limit)

    def _due_function(self) -> tuple[str, str]:
        """The function that picks a claim's due commands (``_due_sql``), and its body. Its
        plan reads the free commands in their order, by ``sw_outbox_free``, for as many as
        it takes, whatever the statistics say: where they say few commands are free (a new
        table, or one last analyzed while every command was leased), the planner would
        rather read every free one and sort them, a claim that grows with the queue. A
        function keeps planner settings for one query alone; set in a transaction of the
        claim's own, they took a claim of 8 from about 600 to about 900 us."""
        settings = "SET enable_seqscan = off SET enable_bitmapscan = off SET plan_cache_mode = force_generic_plan"
        # The body names the settings too, so that a function made with others is made again.
        body = f"/* {settings} */ BEGIN RETURN ARRAY({self._due_sql('', 'p_limit').replace('?', 'p_now')}); END"
        return (
            "CREATE OR REPLACE FUNCTION sw_due_commands(p_now BIGINT, p_limit INTEGER) RETURNS TEXT[]"
            f" LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT {settings} AS $fn${body}$fn$",
            body,
        )

    def _wake_function(self) -> tuple[str, str]:
        """The wake as one statement (``wake``): when no admission holds the gates' lock,
        it is taken, and a read finds whether any command waits for ``p_gates``; only then
        are the first ``p_count`` waiters made due, and announced. When an admission holds
        the lock, the wake waits for it, so that what that admission gives back to wait is
        seen. Each statement of a VOLATILE function reads what was committed when it
        starts, so the read and the update come after the lock, in one round trip."""
        waiting = "wait_gate = ANY(p_gates) AND lease_expires_ms IS NULL AND available_at_ms > p_now"
        body = (
            "DECLARE woken INTEGER; BEGIN"
            f" IF pg_try_advisory_xact_lock({_GATES_LOCK_KEY}) THEN"
            f" IF NOT EXISTS (SELECT 1 FROM sw_outbox WHERE {waiting}) THEN RETURN 0; END IF;"
            f" ELSE PERFORM pg_advisory_xact_lock({_GATES_LOCK_KEY}); END IF;"
            " UPDATE sw_outbox SET available_at_ms = p_now WHERE " + self._picked.format(
                f"SELECT command_id FROM sw_outbox WHERE {waiting} ORDER BY priority DESC, fair LIMIT p_count") + ";"
            " GET DIAGNOSTICS woken = ROW_COUNT;"
            " IF woken > 0 THEN PERFORM pg_notify(p_channel, current_schema()); END IF;"
            " RETURN woken; END"
        )
        settings = "SET plan_cache_mode = force_generic_plan"  # planned once: a plan of its own took longer
        body = f"/* {settings} */ {body}"
        return (
            "CREATE OR REPLACE FUNCTION sw_wake(p_gates TEXT[], p_now BIGINT, p_count INTEGER, p_channel TEXT)"
            f" RETURNS INTEGER LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT {settings}"
            f" AS $fn${body}$fn$",
            body,
        )

    def _ack_procedure(self) -> tuple[str, str]:
        """The ack that carries a wake, as one statement (``ack``): the delete, its COMMIT,
        then ``sw_wake`` in a transaction of its own. One round trip, as the pipeline of
        BEGIN, the delete, COMMIT and the wake was, with none of their statements sent on
        their own. A procedure that commits may not pin its search_path (``SET``), so it
        names what it uses through the connection's, as every statement the store sends does."""
        body = ("BEGIN DELETE FROM sw_outbox WHERE command_id = p_command_id AND token = p_token; COMMIT;"
                " PERFORM sw_wake(p_gates, p_now, p_count, p_channel); END")
        return (
            "CREATE OR REPLACE PROCEDURE sw_ack(p_command_id TEXT, p_token INTEGER, p_gates TEXT[], p_now BIGINT,"
            f" p_count INTEGER, p_channel TEXT) LANGUAGE plpgsql AS $fn${body}$fn$",
            body,
        )

    def _version_function(self) -> tuple[str, str]:
        """The fleet config's version as a claim reads it (``_version_sql``): after a
        shared hold of the config's lock, which a config put takes last and alone
        (``_lock_config_txn``). A put cannot commit between this read and the claim's
        commit, so a claim that read the version before a put commits before it, and its
        slots are seen by every admission after the put."""
        body = (f"BEGIN PERFORM pg_advisory_xact_lock_shared({_CONFIG_LOCK_KEY});"
                " RETURN (SELECT version FROM sw_fleet_version WHERE id = 1); END")
        return (
            "CREATE OR REPLACE FUNCTION sw_config_version() RETURNS BIGINT LANGUAGE plpgsql VOLATILE"
            f" SET search_path FROM CURRENT AS $fn${body}$fn$",
            body,
        )

    def _claim_round(
        self, worker_id: str, now_ms: int, lease_ms: int, limit: int, task_id: str | None
    ) -> tuple[list[Claim], int, bool]:
        """While claims meet commands under gates, a claim is admitted in its own transaction:
        BEGIN, the gates' lock, the claim and the admission's reads go in one round trip, the
        writes and COMMIT in another. A claim that meets none makes the next one the single
        statement of its own again, as does a grant that may admit it (store/grants.py): the
        claim is then one statement that holds its rows' slots, and only what the grant
        cannot admit goes through an admission."""
        grant = self._grant
        if (not self._gated_seen or getattr(self._local, "cur", None) is not None
                or (grant is not None and grant.live(now_ms))):
            out = super()._claim_round(worker_id, now_ms, lease_ms, limit, task_id)
            self._gated_seen = out[2]
            return out
        with self._classified(), self._pool.connection() as conn, self._one_trip(conn), conn.cursor() as cur:
            self._local.cur = cur
            try:
                self._lock_gates_txn(cur)
                claim_cur = self._claim_query(self._cursor(cur), worker_id, now_ms, lease_ms, limit, task_id,
                                              holds=True)
                reads = self._admission_reads(cur, None, now_ms, limit)
                rows = in_claim_order(claim_cur.fetchall())
                gated = [r for r in rows if is_gated(r)]
                admitted = self._admit_txn(cur, with_gates(gated), now_ms, reads, True) if gated else []
            finally:
                self._local.cur = None
        self._gated_seen = bool(gated)
        return [claim_of(r) for r in rows if not is_gated(r)] + admitted, len(rows), bool(gated)

    def _admit(self, rows: list[Any], now_ms: int, held: bool) -> list[Claim]:
        """The shared admission in pipeline mode: BEGIN, the gates' lock and the reads go in
        one round trip, the writes and COMMIT in another (each read's result is waited for
        only where it is used)."""
        if getattr(self._local, "cur", None) is not None:
            return super()._admit(rows, now_ms, held)
        with self._classified(), self._pool.connection() as conn, self._one_trip(conn), conn.cursor() as cur:
            self._local.cur = cur
            try:
                return super()._admit(rows, now_ms, held)
            finally:
                self._local.cur = None

    def wake(self, gates: Sequence[str], now_ms: int, count: int = 1) -> None:
        """The wake as one statement (``sw_wake``, ``_wake_function``): one round trip,
        which writes only when a command waits for one of ``gates``. An admission that
        counted the slot of a claim that ended took the gates' lock before that end: if
        the lock is free after it, that admission has committed, and the read after the
        lock sees what it gave back to wait."""
        if getattr(self._local, "cur", None) is not None:
            super().wake(gates, now_ms, count)
            return
        with self._classified(), self._pool.connection() as conn:
            conn.execute(*self._wake_statement(gates, now_ms, count))

    def ack(self, command_id: str, token: int, *, wake: Wake | None = None) -> None:
        """With ``wake``, one statement (``sw_ack``, ``_ack_procedure``): the delete is
        committed, then the wake runs in a transaction of its own, so the gates' lock is
        never held through the commit's flush (``append_batch`` says why that is as safe)."""
        if wake is None or getattr(self._local, "cur", None) is not None:
            super().ack(command_id, token, wake=wake)
            return
        with self._classified(), self._pool.connection() as conn:
            conn.execute("CALL sw_ack(%s, %s, %s, %s, %s, %s)",
                         (command_id, token, *self._wake_params(wake.gates, wake.now_ms, wake.count)))

    def _wake_statement(self, gates: Sequence[str], now_ms: int, count: int) -> tuple[str, tuple[Any, ...]]:
        return "SELECT sw_wake(%s, %s, %s, %s)", self._wake_params(gates, now_ms, count)

    def _wake_params(self, gates: Sequence[str], now_ms: int, count: int) -> tuple[Any, ...]:
        """``sw_wake``'s parameters: up to ``count`` waiters of each of ``gates`` are made due."""
        return list(gates), now_ms, count * len(gates), CHANNEL

    def _insert_rows(self, cur: Any, head: str, one: str, tail: str, rows: list[tuple[Any, ...]]) -> None:
        """All of ``rows`` in one multi-row INSERT: in a pipeline, one statement costs far
        less than one per row."""
        self._x(cur, f"{head} {', '.join([one] * len(rows))}{tail}", tuple(v for r in rows for v in r))

    def claim_plans(self) -> tuple[int, int]:
        """How the claim statement was planned on the connection the pool hands out (on a
        store of one connection, every claim it made): generic plans (made once, reused) and
        custom plans (made again for that call), as ``pg_prepared_statements`` counts them."""
        with self._classified(), self._pool.connection() as conn:
            row = conn.execute(
                "SELECT COALESCE(SUM(generic_plans), 0), COALESCE(SUM(custom_plans), 0) FROM pg_prepared_statements"
                " WHERE statement LIKE 'UPDATE sw_outbox SET lease_owner%'").fetchone()
        return int(row[0]), int(row[1])

    def _lock_gates_txn(self, cur: Any) -> None:
        """Admissions run one at a time: each one's counts include every slot admitted
        before it (each statement after the lock sees what committed before)."""
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_GATES_LOCK_KEY,))

    def _lock_config_txn(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_CONFIG_LOCK_KEY,))

    def put_definition(self, content_hash: str, name: str, version: int, body: Mapping[str, Any]) -> None:
        try:
            super().put_definition(content_hash, name, version, body)
        except self._psycopg.errors.UniqueViolation:
            return  # stored by a concurrent writer; same hash, same content

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
        """The shared append. Under READ COMMITTED two writers of the *same* event id (or
        idempotency key) can pass the duplicate check together; the loser then sees a
        conflict, and is told it is a duplicate, exactly as SQLite's serialized writers are.

        Past version 0 the append is first tried as ONE statement (``_append_one``): one round
        trip, its own transaction. Whenever that statement is refused (a stale version or
        hash, a wrong fencing token, a unique violation, a lost race) nothing was written and
        the shared append runs, which gives the refusal or the duplicate exactly as before."""
        if expected_version > 0 and getattr(self._local, "cur", None) is None and complete_remote is None:
            try:
                with self._classified():
                    done = self._append_one(AppendRequest(
                        task_id, expected_version, event, state, commands, complete=complete,
                        complete_timer=complete_timer, terminal=terminal, claim_for=claim_for,
                    ))
            except self._psycopg.Error:
                done = None
            if done is not None:
                return done
            self._last_hash.pop(task_id, None)
        try:
            return super().append(
                task_id, expected_version, event, state, commands,
                workflow=workflow, workflow_hash=workflow_hash, idem_key=idem_key,
                complete=complete, complete_timer=complete_timer, terminal=terminal,
                claim_for=claim_for, complete_remote=complete_remote, kind=kind,
            )
        except VersionConflictError:
            event_id = str(event["event_id"])
            with self._tx() as cur:
                row = self._x(
                    cur, "SELECT version FROM sw_events WHERE event_id = ?", (event_id,)
                ).fetchone()
                if row is None and expected_version == 0 and idem_key is not None:
                    row = self._x(
                        cur, "SELECT version FROM sw_tasks WHERE idem_key = ?", (idem_key,)
                    ).fetchone()
            if row is not None:
                return AppendResult(version=int(row[0]), duplicate=True)
            raise

    def _append_one(self, req: AppendRequest) -> AppendResult | None:
        """The shared append past version 0 as one statement of data-modifying CTEs, run in
        autocommit (its own transaction: one round trip, no BEGIN/COMMIT). Returns None when
        the previous hash is not at ``expected_version`` (the shared append then reports the
        conflict or the duplicate); raises psycopg errors when refused."""
        with self._pool.connection() as conn:
            one = self._one_statement(conn, req)
            if one is None:
                return None
            sql, params, result, h = one
            crash_point("in_append_txn")  # nothing is sent yet: a crash here leaves nothing written
            conn.execute(sql, params)
        self._remember(req.task_id, result.version, h, str(req.state.get("status", "")))
        return result

    def append_batch(
        self, requests: Sequence[AppendRequest], *, wake: Wake | None = None
    ) -> list[AppendResult] | None:
        """Every request as its one statement (``_one_statement``) in ONE transaction, and
        ``wake`` as its one statement right after that transaction's COMMIT, all sent as one
        pipeline: one round trip and one commit for the batch. The wake runs only where the
        batch committed, and holds the gates' lock for its own statement alone, never through
        the commit's flush, which every admission and every other worker's wake would wait
        for. After the commit is as safe as within it (``wake`` says why). Any refusal rolls
        the whole batch back and returns None."""
        if getattr(self._local, "cur", None) is not None or any(r.complete_remote for r in requests):
            return super().append_batch(requests, wake=wake)  # closing a remote attempt: the shared SQL
        errors = self._psycopg.errors
        refused = (errors.DataError, errors.IntegrityError, errors.TransactionRollback)
        with self._classified(), self._pool.connection() as conn:
            prepared = []
            for r in requests:
                one = self._one_statement(conn, r)
                if one is None:
                    return None
                prepared.append(one)
            crash_point("in_append_txn")  # nothing is sent yet: a crash here leaves nothing written
            try:
                after = self._wake_statement(wake.gates, wake.now_ms, wake.count) if wake is not None else None
                with self._one_trip(conn, after):
                    for sql, params, _, _ in prepared:
                        conn.execute(sql, params)
            except refused:
                return None
        for r, (_, _, result, h) in zip(requests, prepared, strict=True):
            self._remember(r.task_id, result.version, h, str(r.state.get("status", "")))
        return [result for _, _, result, _ in prepared]

    def _one_statement(
        self, conn: Any, req: AppendRequest
    ) -> tuple[str, list[Any], AppendResult, str] | None:
        """The statement of data-modifying CTEs that writes one append past version 0: the
        projection (only at ``expected_version`` and the previous hash the event is chained
        to), the event, the completed command or timer (only with its fencing token), the
        terminal clean-up, the new commands. When any of those checks fails the statement
        divides by zero, so all of it is rolled back. Returns the statement, its parameters,
        the result and the event's hash; None when the task is not at ``expected_version``."""
        task_id, expected_version, event, state = req.task_id, req.expected_version, req.event, req.state
        complete, complete_timer, terminal, claim_for = req.complete, req.complete_timer, req.terminal, req.claim_for
        encoded = _Encoded.of(req)
        body = encoded.body
        version = expected_version + 1
        known = self._last_hash.get(task_id)
        if known is not None and known[0] == expected_version:
            prev = known[1]
        else:
            row = conn.execute("SELECT version, last_hash FROM sw_tasks WHERE task_id = %s", (task_id,)).fetchone()
            if row is None or int(row[0]) != expected_version:
                return None
            prev = str(row[1])
        at_ms = int(event["at_ms"])
        event_id, event_type = str(event["event_id"]), str(event["type"])
        h = self.chain.link(task_id, version, event_id, event_type, at_ms, prev, body)
        params: list[Any] = [
            str(state.get("status", "")), version, encoded.state_json, h, at_ms,
            task_id, expected_version, prev,
            task_id, version, event_id, event_type, body, at_ms, prev, h,
        ]
        if complete is not None:
            params += complete
        if complete_timer is not None:
            params += complete_timer
        if terminal:
            params.append(task_id)
            if complete is not None:
                params.append(complete[0])
            params.append(task_id)
            if complete_timer is not None:
                params.append(complete_timer[0])
        claimed: Claim | None = None
        n_timers = n_outbox = 0
        for c in req.commands:
            if c.timer:
                n_timers += 1
                params += (c.command_id, task_id, c.available_at_ms, c.purpose)
        for c, body_json in zip(req.commands, encoded.command_bodies, strict=True):
            if c.timer:
                continue
            n_outbox += 1
            if claim_for is not None and claimed is None and c.type in CLAIMABLE_AT_ONCE and c.chainable:
                worker_id, lease_expires_ms = claim_for
                params += (c.command_id, task_id, c.type, body_json, c.available_at_ms,
                           worker_id, lease_expires_ms, 1, 1, c.priority, c.tenant, c.gates,
                           *fair_params(c))
                claimed = Claim(
                    command_id=c.command_id, task_id=task_id, type=c.type, body=json.loads(body_json),
                    token=1, deliveries=1, failures=0, lease_expires_ms=int(lease_expires_ms),
                )
            else:
                params += (c.command_id, task_id, c.type, body_json, c.available_at_ms, None, None, 0, 0,
                           c.priority, c.tenant, c.gates, *fair_params(c))
        notify = any(c.timer or claimed is None or c.command_id != claimed.command_id for c in req.commands)
        if notify:
            params.append(CHANNEL)
        shape = (complete is not None, complete_timer is not None, terminal, n_timers, n_outbox, notify)
        sql = self._fast_sql.get(shape)
        if sql is None:
            sql = self._fast_sql[shape] = _one_statement_append(*shape, fair=self._sql(self._fair_sql()))
        return sql, params, AppendResult(version=version, claimed=claimed), h

    def release(
        self, command_id: str, token: int, available_at_ms: int, *, failed: bool, error: str = "",
        started: bool = True,
    ) -> None:
        """The shared release (the update, then NOTIFY, in one transaction) as one statement:
        one round trip instead of BEGIN, UPDATE, NOTIFY, COMMIT."""
        if getattr(self._local, "cur", None) is not None:
            super().release(command_id, token, available_at_ms, failed=failed, error=error, started=started)
            return
        with self._stmt() as cur:
            cur.execute(
                f"WITH r AS ({self._sql(_RELEASE_SQL)}) SELECT pg_notify(%s, current_schema())",
                (*_release_params(command_id, token, available_at_ms, failed, error, started), CHANNEL),
            )

    def next_due_ms(self, *, task_id: str | None = None) -> int | None:
        """The shared two MIN queries as one statement (one round trip)."""
        if task_id is not None:
            return super().next_due_ms(task_id=task_id)
        with self._stmt() as cur:
            row = cur.execute(
                f"SELECT LEAST(({_NEXT_COMMAND_SQL.format('')}), (SELECT MIN(CASE WHEN"
                " lease_expires_ms IS NULL THEN due_at_ms ELSE lease_expires_ms END) FROM sw_timers))"
            ).fetchone()
        return int(row[0]) if row is not None and row[0] is not None else None

    # --- LISTEN / NOTIFY ---------------------------------------------------------------
    def _work_added_txn(self, cur: Any) -> None:
        cur.execute("SELECT pg_notify(%s, current_schema())", (CHANNEL,))

    def wait_for_work(self, timeout_seconds: float, wake: threading.Event | None = None) -> bool:
        """Wait until another transaction announces work, ``timeout_seconds`` pass, ``wake``
        is set or the store is closed. Returns True at once when work was announced since this
        thread's previous call (so an announcement made while the caller was claiming is not
        lost); False otherwise."""
        self._ensure_listener()
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        seen = getattr(self._local, "seen", 0)
        with self._cond:
            while True:
                if self._closed:
                    return False
                if self._listen_error is not None:
                    error = self._listen_error
                    self._listen_error = None
                    self._listener = None
                    raise StoreUnavailableError(error)
                if self._generation != seen:
                    self._local.seen = self._generation
                    return True
                if wake is not None and wake.is_set():
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.05) if wake is not None else remaining)

    def interrupt_waits(self) -> None:
        """The waits above look at ``wake`` only when the condition is notified (or every
        50 ms, for a ``wake`` set where the store cannot be told, as a signal handler does)."""
        with self._cond:
            self._cond.notify_all()

    def _ensure_listener(self) -> None:
        with self._cond:
            if self._listener is not None or self._listen_error is not None or self._closed:
                return
            errors = self._psycopg
            try:
                conn = errors.connect(self._conninfo, autocommit=True, connect_timeout=self._connect_timeout)
            except errors.Error as exc:
                reason = " ".join(str(exc).split())
                msg = f"PostgreSQL at {self.url} is unavailable for LISTEN ({reason})"
                raise StoreUnavailableError(msg) from None
            try:
                self._configure(conn)
                row = conn.execute("SELECT current_schema()").fetchone()
                conn.execute(f"LISTEN {CHANNEL}")
            except errors.Error as exc:
                conn.close()
                reason = " ".join(str(exc).split())
                msg = f"PostgreSQL at {self.url} refused LISTEN {CHANNEL} ({reason})"
                raise StoreUnavailableError(msg) from None
            self._listen_schema = str(row[0]) if row and row[0] is not None else ""
            self._listen_conn = conn
            self._listen_stop.clear()
            # Work announced before LISTEN took effect was not heard: report "maybe work" once.
            self._generation += 1
            self._listener = threading.Thread(
                target=self._listen, args=(conn,), name="statewright-listen", daemon=True
            )
            self._listener.start()

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        try:
            while not self._listen_stop.is_set():
                for note in conn.notifies(timeout=_LISTEN_SLICE_SECONDS):
                    if note.payload == self._listen_schema:  # other schemas share the channel
                        with self._cond:
                            self._generation += 1
                            self._cond.notify_all()
        except self._psycopg.Error as exc:
            if not self._listen_stop.is_set():
                reason = " ".join(str(exc).split()) or type(exc).__name__
                with self._cond:
                    self._listen_error = (
                        f"PostgreSQL at {self.url}: the LISTEN connection was lost "
                        f"({reason}); stop claiming work: held leases expire and other "
                        "workers take over"
                    )
                    self._cond.notify_all()
        finally:
            conn.close()

    def _stop_listener(self) -> None:
        with self._cond:
            thread, self._listener = self._listener, None
            self._listen_stop.set()
            self._cond.notify_all()
        if thread is not None:
            thread.join()
        self._listen_conn = None


def _one_statement_append(
    complete: bool, complete_timer: bool, terminal: bool, n_timers: int, n_outbox: int, notify: bool, *, fair: str
) -> str:
    """The SQL of ``PostgresStore._append_one`` for one shape of append. All parts see the
    same snapshot, so the terminal clean-up leaves out the completed command and timer (which
    their own fencing-token deletes take) and cannot see the rows inserted beside it."""
    ctes = [
        "u AS (UPDATE sw_tasks SET status = %s, version = %s, state = %s, last_hash = %s,"
        " updated_at_ms = %s WHERE task_id = %s AND version = %s AND last_hash = %s RETURNING 1)",
        "e AS (INSERT INTO sw_events (task_id, version, event_id, type, body, at_ms, prev_hash, hash)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s))",
    ]
    checks = ["(SELECT count(*) FROM u)"]
    if complete:
        ctes.append("c AS (DELETE FROM sw_outbox WHERE command_id = %s AND token = %s RETURNING 1)")
        checks.append("(SELECT count(*) FROM c)")
    if complete_timer:
        ctes.append("ct AS (DELETE FROM sw_timers WHERE timer_id = %s AND token = %s RETURNING 1)")
        checks.append("(SELECT count(*) FROM ct)")
    if terminal:
        but_command = " AND command_id <> %s" if complete else ""
        but_timer = " AND timer_id <> %s" if complete_timer else ""
        ctes.append(f"xo AS (DELETE FROM sw_outbox WHERE task_id = %s AND type <> 'Notify'{but_command})")
        ctes.append(f"xt AS (DELETE FROM sw_timers WHERE task_id = %s{but_timer})")
    if n_timers:
        ctes.append(
            "ti AS (INSERT INTO sw_timers (timer_id, task_id, due_at_ms, purpose) VALUES "
            + ", ".join(["(%s, %s, %s, %s)"] * n_timers) + ")"
        )
    if n_outbox:
        ctes.append(
            "o AS (INSERT INTO sw_outbox (command_id, task_id, type, body, available_at_ms, lease_owner,"
            " lease_expires_ms, token, deliveries, priority, tenant, gates, fair) VALUES "
            + ", ".join([f"(%s, %s, %s, %s, %s, %s::text, %s::bigint, %s, %s, %s, %s, %s::text, {fair})"] * n_outbox)
            + ")"
        )
    select = "SELECT 1 / (" + " * ".join(checks) + ")"
    if notify:
        select += ", pg_notify(%s, current_schema())"
    return "WITH " + ", ".join(ctes) + " " + select
