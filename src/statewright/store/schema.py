"""Versioned schema migrations, shared by both backends (plain portable SQL)."""

from __future__ import annotations

SCHEMA_VERSION = 15

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
    # Scheduling the fleet (definition/fleet.py, store/admission.py): a command's priority,
    # tenant, place in its tenant's fair queue and the gates it passes (JSON; NULL: none);
    # why it was passed over; the fleet's named limits and tenants; the slots and rate log
    # that concurrency and rate limits count; each tenant's usage per day.
    6: [
        "ALTER TABLE sw_outbox ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE sw_outbox ADD COLUMN tenant TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE sw_outbox ADD COLUMN fair BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE sw_outbox ADD COLUMN gates TEXT",
        "ALTER TABLE sw_outbox ADD COLUMN waiting TEXT",
        "ALTER TABLE sw_outbox ADD COLUMN wait_gate TEXT",
        "CREATE INDEX IF NOT EXISTS sw_outbox_order ON sw_outbox (priority DESC, fair)",
        "CREATE INDEX IF NOT EXISTS sw_outbox_tenant ON sw_outbox (tenant, fair)",
        "CREATE INDEX IF NOT EXISTS sw_outbox_waiting ON sw_outbox (wait_gate) WHERE wait_gate IS NOT NULL",
        """CREATE TABLE IF NOT EXISTS sw_limits (
            name TEXT PRIMARY KEY,
            body TEXT NOT NULL,
            updated_at_ms BIGINT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS sw_tenants (
            tenant TEXT PRIMARY KEY,
            share_step BIGINT NOT NULL,
            gating INTEGER NOT NULL,
            body TEXT NOT NULL,
            updated_at_ms BIGINT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS sw_slots (
            gate TEXT NOT NULL,
            command_id TEXT NOT NULL,
            token INTEGER NOT NULL,
            PRIMARY KEY (gate, command_id)
        )""",
        """CREATE TABLE IF NOT EXISTS sw_rate_log (
            gate TEXT NOT NULL,
            at_ms BIGINT NOT NULL,
            command_id TEXT NOT NULL,
            tokens BIGINT NOT NULL DEFAULT 0,
            PRIMARY KEY (gate, at_ms, command_id)
        )""",
        "CREATE INDEX IF NOT EXISTS sw_rate_log_command ON sw_rate_log (command_id)",
        """CREATE TABLE IF NOT EXISTS sw_usage (
            tenant TEXT NOT NULL,
            day BIGINT NOT NULL,
            tokens BIGINT NOT NULL DEFAULT 0,
            money_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
            PRIMARY KEY (tenant, day)
        )""",
    ],
    # Streams of more than one kind in the same tables: a task, or a run of an outer loop
    # (``statewright.machine.seam.StreamKind``). Every row there before is a task.
    7: [
        "ALTER TABLE sw_tasks ADD COLUMN kind TEXT NOT NULL DEFAULT 'task'",
        "CREATE INDEX IF NOT EXISTS sw_tasks_by_kind ON sw_tasks (kind, workflow)",
    ],
    # A concurrency slot is the claim's lease itself: an admitted command's outbox row keeps
    # the fencing token it was admitted with, and holds a slot of each of its gates while
    # that claim's lease is alive. A claim that ends frees its slots with no write of its own;
    # sw_slots (a row per gate and command) is gone, its live rows carried over.
    8: [
        "ALTER TABLE sw_outbox ADD COLUMN slot_token INTEGER",
        "CREATE INDEX IF NOT EXISTS sw_outbox_slots ON sw_outbox (slot_token) WHERE slot_token IS NOT NULL",
        """UPDATE sw_outbox SET slot_token = token WHERE lease_expires_ms IS NOT NULL AND EXISTS
            (SELECT 1 FROM sw_slots s WHERE s.command_id = sw_outbox.command_id AND s.token = sw_outbox.token)""",
        "DROP TABLE IF EXISTS sw_slots",
    ],
    # Authentication reads the people log's rows about one person and the seq of its first
    # keyed link: both by index, so an approval's checks do not grow with the log.
    9: [
        "CREATE INDEX IF NOT EXISTS sw_user_log_by_subject ON sw_user_log (subject, seq)",
        "CREATE INDEX IF NOT EXISTS sw_user_log_keyed ON sw_user_log (seq) WHERE hash LIKE 'hmac:%'",
    ],
    # How many rows the rate log holds at most, kept by every admission that writes it: while
    # that leaves a start rate room, its window needs no count, however many starts it holds.
    10: [
        """CREATE TABLE IF NOT EXISTS sw_rate_log_rows (
            id INTEGER PRIMARY KEY,
            at_most BIGINT NOT NULL
        )""",
        "DELETE FROM sw_rate_log_rows",
        "INSERT INTO sw_rate_log_rows (id, at_most) SELECT 1, COUNT(*) FROM sw_rate_log",
    ],
    # At most how many live slots each gate has, kept by every admission (under the gates'
    # lock, the only place a slot is taken): while that leaves a gate room, its slots need
    # no count, however many steps hold them. A gate with no row is counted.
    11: [
        """CREATE TABLE IF NOT EXISTS sw_slot_bounds (
            gate TEXT PRIMARY KEY,
            at_most BIGINT NOT NULL
        )""",
    ],
    # A claim reads only commands it may take: the free ones by their order and when they
    # are due, the leased ones by when their lease expires. Before, it walked past every
    # running step in the order index, so each claim cost more the more steps ran. The live
    # leases are where the slots are counted too: the index of slot holders is gone.
    12: [
        "DROP INDEX IF EXISTS sw_outbox_order",
        "DROP INDEX IF EXISTS sw_outbox_due",
        "DROP INDEX IF EXISTS sw_outbox_slots",
        "CREATE INDEX IF NOT EXISTS sw_outbox_free ON sw_outbox (priority DESC, fair) WHERE lease_expires_ms IS NULL",
        "CREATE INDEX IF NOT EXISTS sw_outbox_free_due ON sw_outbox (available_at_ms) WHERE lease_expires_ms IS NULL",
        "CREATE INDEX IF NOT EXISTS sw_outbox_leased ON sw_outbox (lease_expires_ms)"
        " WHERE lease_expires_ms IS NOT NULL",
        # A start is looked up by its command only where a token rate counts what it reports
        # (``metered``), and a gate's mark of what was forgotten by the gate: the rate log's
        # index by command, which every start wrote at a page of its own, is gone.
        "ALTER TABLE sw_rate_log ADD COLUMN metered INTEGER NOT NULL DEFAULT 1",
        "DROP INDEX IF EXISTS sw_rate_log_command",
        "CREATE INDEX IF NOT EXISTS sw_rate_log_metered ON sw_rate_log (command_id) WHERE metered = 1",
        "CREATE INDEX IF NOT EXISTS sw_rate_log_marks ON sw_rate_log (gate, at_ms) WHERE command_id = ''",
    ],
    # A rate log row counts ``starts``: an admission writes one row for all the starts it
    # takes under a limit with no token rate (named by the first), where it wrote one per
    # start. A start under a token rate keeps a row of its own, which its tokens are added
    # to. A row that marks what was forgotten is no start. The most the rate log holds
    # (``sw_rate_log_rows``) counts starts, not rows: counted afresh.
    13: [
        "ALTER TABLE sw_rate_log ADD COLUMN starts INTEGER NOT NULL DEFAULT 1",
        "UPDATE sw_rate_log SET starts = 0 WHERE command_id = ''",
        "UPDATE sw_rate_log_rows SET at_most = (SELECT COALESCE(SUM(starts), 0) FROM sw_rate_log) WHERE id = 1",
    ],
    # Grants (store/grants.py): the slots a worker's admission set aside for its next claims,
    # counted with the live slots until a while after they end; and the fleet config's
    # version, which every config put moves on, ending every grant taken before.
    14: [
        """CREATE TABLE IF NOT EXISTS sw_grants (
            owner TEXT NOT NULL,
            gate TEXT NOT NULL,
            amount BIGINT NOT NULL,
            expires_ms BIGINT NOT NULL,
            PRIMARY KEY (owner, gate)
        )""",
        """CREATE TABLE IF NOT EXISTS sw_fleet_version (
            id INTEGER PRIMARY KEY,
            version BIGINT NOT NULL
        )""",
        "INSERT INTO sw_fleet_version (id, version) SELECT 1, 0 WHERE NOT EXISTS (SELECT 1 FROM sw_fleet_version)",
    ],
    # The commands waiting for a slot, by when they are due: whether any command waits at
    # all is one seek, however many commands that once waited are running or due now
    # (``sw_outbox_waiting`` holds every command that ever waited, until it is done). A
    # command parked on a spent budget waits for no slot: a fleet config put wakes it.
    15: [
        "CREATE INDEX IF NOT EXISTS sw_outbox_waiters ON sw_outbox (available_at_ms)"
        " WHERE wait_gate IS NOT NULL AND wait_gate NOT LIKE 'budget:%' AND lease_expires_ms IS NULL",
    ],
}
