"""The loop layer's tables (prefix ``loop_``), created if missing in the statewright file."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS loop_runs (
    run_id            INTEGER PRIMARY KEY AUTOINCREMENT,
    loop              TEXT NOT NULL,
    status            TEXT NOT NULL,
    definition_path   TEXT NOT NULL,
    definition_sha256 TEXT NOT NULL,
    opened_at_ms      INTEGER NOT NULL,
    updated_at_ms     INTEGER NOT NULL,
    lines             INTEGER NOT NULL DEFAULT 0,
    state_json        TEXT NOT NULL,
    assets_json       TEXT NOT NULL DEFAULT '{}',
    stop_requested    TEXT,
    owner_pid         INTEGER,
    cleared_by        TEXT,
    cleared_reason    TEXT,
    cleared_at_ms     INTEGER
);
CREATE INDEX IF NOT EXISTS loop_runs_by_loop ON loop_runs (loop, run_id);
CREATE TABLE IF NOT EXISTS loop_lines (
    run_id        INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    state         TEXT NOT NULL,
    next_state    TEXT NOT NULL,
    kind          TEXT NOT NULL,
    event_type    TEXT NOT NULL,
    event         TEXT NOT NULL,
    summary       TEXT NOT NULL,
    written_json  TEXT NOT NULL,
    event_json    TEXT NOT NULL,
    commands_json TEXT NOT NULL,
    at_ms         INTEGER NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS loop_items (
    loop          TEXT NOT NULL,
    item_id       TEXT NOT NULL,
    status        TEXT NOT NULL DEFAULT 'open',
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_failure  TEXT NOT NULL DEFAULT '',
    reopened_after INTEGER NOT NULL DEFAULT 0,
    payload_json  TEXT NOT NULL DEFAULT '{}',
    updated_at_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (loop, item_id)
);
CREATE TABLE IF NOT EXISTS loop_passes (
    run_id      INTEGER NOT NULL,
    record_no   INTEGER NOT NULL,
    item_id     TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    verdict     TEXT NOT NULL,
    record_json TEXT NOT NULL,
    at_ms       INTEGER NOT NULL,
    PRIMARY KEY (run_id, record_no)
);
CREATE TABLE IF NOT EXISTS loop_approvals (
    run_id          INTEGER NOT NULL,
    fingerprint     TEXT NOT NULL,
    item_id         TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    role            TEXT NOT NULL,
    shown_json      TEXT NOT NULL,
    requested_at_ms INTEGER NOT NULL,
    timeout_at_ms   INTEGER,
    decision        TEXT,
    who             TEXT,
    reason          TEXT,
    decided_at_ms   INTEGER,
    PRIMARY KEY (run_id, fingerprint)
);
"""
