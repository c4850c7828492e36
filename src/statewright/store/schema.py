"""Versioned schema migrations, shared by both backends (plain portable SQL)."""

from __future__ import annotations

SCHEMA_VERSION = 5

MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE IF NOT EXISTS sw_definitions (
            hash TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            version INTEGER NOT NULL,
            body TEXT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS sw_tasks (
            task_id TEXT PRIMARY KEY,
            workflow TEXT NOT NULL,
            workflow_hash TEXT NOT NULL,
            status TEXT NOT NULL,
            version INTEGER NOT NULL,
            state TEXT NOT NULL,
            idem_key TEXT UNIQUE,
            last_hash TEXT NOT NULL,
            created_at_ms BIGINT NOT NULL,
            updated_at_ms BIGINT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS sw_tasks_status ON sw_tasks (status, updated_at_ms)",
        """CREATE TABLE IF NOT EXISTS sw_events (
            task_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            event_id TEXT NOT NULL UNIQUE,
            type TEXT NOT NULL,
            body TEXT NOT NULL,
            at_ms BIGINT NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL,
            PRIMARY KEY (task_id, version)
        )""",
        """CREATE TABLE IF NOT EXISTS sw_outbox (
            command_id TEXT PRIMARY KEY,
            task_id TEXT NOT NULL,
            type TEXT NOT NULL,
            body TEXT NOT NULL,
            available_at_ms BIGINT NOT NULL,
            lease_owner TEXT,
            lease_expires_ms BIGINT,
            token INTEGER NOT NULL DEFAULT 0,
            deliveries INTEGER NOT NULL DEFAULT 0,
            failures INTEGER NOT NULL DEFAULT 0,
            last_error TEXT
        )""",
        "CREATE INDEX IF NOT EXISTS sw_outbox_due ON sw_outbox (available_at_ms)",
        "CREATE INDEX IF NOT EXISTS sw_outbox_task ON sw_outbox (task_id)",
        """CREATE TABLE IF NOT EXISTS sw_timers (
            timer_id TEXT PRIMARY KEY,
            task_id TEXT NOT NULL,
            due_at_ms BIGINT NOT NULL,
            purpose TEXT NOT NULL,
            lease_owner TEXT,
            lease_expires_ms BIGINT,
            token INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX IF NOT EXISTS sw_timers_due ON sw_timers (due_at_ms)",
        "CREATE INDEX IF NOT EXISTS sw_timers_task ON sw_timers (task_id)",
    ],
    # Listing by status needs no time in the index: an index on (status, updated_at_ms) was
    # rewritten by every step (each append moves updated_at_ms), one on status alone only
    # when the status changes (on PostgreSQL the update can then stay on its heap page).
    2: [
        "DROP INDEX IF EXISTS sw_tasks_status",
        "CREATE INDEX IF NOT EXISTS sw_tasks_by_status ON sw_tasks (status)",
    ],
    # People, roles and tokens (hashed), changed only by an admin; every change is a row of
    # sw_user_log, hash-chained, and the two tables are what replaying that log gives.
    3: [
        """CREATE TABLE IF NOT EXISTS sw_users (
            name TEXT PRIMARY KEY,
            roles TEXT NOT NULL,
            active INTEGER NOT NULL,
            updated_at_ms BIGINT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS sw_tokens (
            token_id TEXT PRIMARY KEY,
            token_hash TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            issued_at_ms BIGINT NOT NULL,
            revoked_at_ms BIGINT
        )""",
        "CREATE INDEX IF NOT EXISTS sw_tokens_by_name ON sw_tokens (name)",
        """CREATE TABLE IF NOT EXISTS sw_user_log (
            seq INTEGER PRIMARY KEY,
            at_ms BIGINT NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            subject TEXT NOT NULL,
            body TEXT NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL
        )""",
    ],
    # Remote attempts: parked on a queue until a remote agent claims them (store/remote.py).
    # The task token is kept only as its sha256.
    4: [
        """CREATE TABLE IF NOT EXISTS sw_remote (
            command_id TEXT PRIMARY KEY,
            task_id TEXT NOT NULL,
            queue TEXT NOT NULL,
            body TEXT NOT NULL,
            parked_at_ms BIGINT NOT NULL,
            heartbeat_ms BIGINT NOT NULL,
            agent TEXT,
            token_hash TEXT UNIQUE,
            claimed_at_ms BIGINT
        )""",
        "CREATE INDEX IF NOT EXISTS sw_remote_by_queue ON sw_remote (queue, parked_at_ms)",
    ],
    # Child tasks: the task that started one (a map step's item, a loop's pass). Its end is
    # appended to the parent's stream in the same transaction as its own terminal event.
    5: [
        "ALTER TABLE sw_tasks ADD COLUMN parent_id TEXT",
        "CREATE INDEX IF NOT EXISTS sw_tasks_by_parent ON sw_tasks (parent_id)",
    ],
}
