"""What only the PostgreSQL backend has: LISTEN/NOTIFY wake-ups, lost connections classified
as StoreUnavailableError, schemas in the URL, and migrations serialized across processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from statewright._errors import NotAStatewrightDatabaseError, StoreError
from statewright.definition.fleet import FleetConfig, TenantShare
from statewright.definition.loader import workflow_from_dict
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.store import NewCommand, open_store
from statewright.store.base import StoreUnavailableError, Wake
from statewright.store.postgres import PostgresStore, redact, split_url
from statewright.store.schema import SCHEMA_VERSION

from .backends import fresh_pg_schema, pg_server, raw_sql
from .test_conformance import LEASE_MS, T0, batch_step, run_step, step, submit

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_pg_schema() as (url, _name):
        yield url


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresStore]:
    s = PostgresStore(pg_url, min_size=1, max_size=1)
    yield s
    s.close()


def _terminate(pid: int) -> None:
    with psycopg.connect(pg_server(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _prime(store: PostgresStore) -> None:
    """Start the listener and swallow its one "maybe work" so the next wait really waits."""
    assert store.wait_for_work(0.0) is True


def _waiter(store: PostgresStore, timeout_seconds: float) -> tuple[threading.Thread, list[tuple[bool, float]]]:
    out: list[tuple[bool, float]] = []

    def wait() -> None:
        started = time.monotonic()
        out.append((store.wait_for_work(timeout_seconds), time.monotonic() - started))

    t = threading.Thread(target=wait)
    t.start()
    return t, out


def test_new_work_wakes_an_idle_waiter_at_once(pg: PostgresStore, pg_url: str) -> None:
    """A command appended on another connection wakes a worker blocked in wait_for_work."""
    _prime(pg)
    other = open_store(pg_url)
    try:
        t, out = _waiter(pg, 10.0)
        submit(other, "t1", [run_step("c1")])
        t.join()
    finally:
        other.close()
    [(woken, _)] = out
    assert woken is True


def test_work_announced_before_the_wait_is_not_lost(pg: PostgresStore, pg_url: str) -> None:
    """An announcement that arrives while the worker is busy claiming makes the next wait return at once."""
    _prime(pg)
    other = open_store(pg_url)
    try:
        submit(other, "t1", [run_step("c1")])
        t, out = _waiter(pg, 10.0)  # started after the NOTIFY was sent
        t.join()
    finally:
        other.close()
    assert out[0][0] is True


def test_release_announces_work_and_other_schemas_do_not(pg: PostgresStore, pg_url: str) -> None:
    """Releasing a command wakes waiters; appends in another schema (same channel) do not."""
    submit(pg, "t1", [run_step("c1")])
    [c] = pg.claim("w1", T0, LEASE_MS)
    _prime(pg)
    with fresh_pg_schema() as (elsewhere_url, _):
        elsewhere = open_store(elsewhere_url)
        try:
            submit(elsewhere, "t9", [run_step("c9")])
        finally:
            elsewhere.close()
    assert pg.wait_for_work(0.2) is False
    pg.release("c1", c.token, T0 + 1000, failed=True, error="throttled")
    assert pg.wait_for_work(10.0) is True


def test_a_command_claimed_in_the_same_transaction_is_not_announced(pg: PostgresStore, pg_url: str) -> None:
    """claim_for takes the next command for its worker, so nobody else is woken for it."""
    submit(pg, "t1", [run_step("c1")])
    [c] = pg.claim("w1", T0, LEASE_MS)
    _prime(pg)
    res = step(pg, "t1", 1, "c1:result", [run_step("c2")], complete=("c1", c.token), claim_for=("w1", T0 + LEASE_MS))
    assert res.claimed is not None
    assert pg.wait_for_work(0.2) is False


def test_a_lost_connection_raises_store_unavailable_then_recovers(pg: PostgresStore) -> None:
    """A dropped pooled connection surfaces as StoreUnavailableError (a StoreError); the next call reconnects."""
    submit(pg, "t1")
    with pg._pool.connection() as conn:
        pid = conn.info.backend_pid
    _terminate(pid)
    with pytest.raises(StoreUnavailableError, match=r"unavailable.*stop claiming"):
        pg.claim("w1", T0, LEASE_MS)
    assert isinstance(StoreUnavailableError("x"), StoreError)
    assert pg.task_ids() == ["t1"]


def test_a_lost_listen_connection_raises_store_unavailable(pg: PostgresStore) -> None:
    """When the LISTEN connection dies, wait_for_work says so instead of sleeping forever."""
    _prime(pg)
    conn = pg._listen_conn
    assert conn is not None
    _terminate(conn.info.backend_pid)
    with pytest.raises(StoreUnavailableError, match="LISTEN connection was lost"):
        pg.wait_for_work(10.0)
    assert pg.wait_for_work(0.0) is True  # listens again, on a new connection


def test_an_unreachable_server_is_a_clear_error() -> None:
    """Opening a store on a server that does not answer names the URL (password hidden) and the reason."""
    with pytest.raises(StoreUnavailableError) as info:
        PostgresStore("postgresql://sw:secret@127.0.0.1:1/test", connect_timeout_seconds=2)
    msg = str(info.value)
    assert "127.0.0.1:1" in msg and "secret" not in msg and "Connection refused" in msg


def test_schema_names_are_checked_and_passwords_redacted() -> None:
    """A schema that is not a plain identifier is refused before anything connects."""
    with pytest.raises(StoreError, match="not a plain lower-case identifier"):
        PostgresStore("postgresql://u:pw@127.0.0.1:1/test?schema=bad;drop")
    assert redact("postgresql://u:pw@h:5/db") == "postgresql://u:***@h:5/db"
    assert split_url("postgresql://h/db?sslmode=disable&schema=s1") == ("postgresql://h/db?sslmode=disable", "s1")


def test_a_foreign_schema_is_refused_with_a_postgres_hint(pg_url: str) -> None:
    """Someone else's tables in the target schema: refuse, and say how to give statewright its own."""
    schema = split_url(pg_url)[1]
    raw_sql(pg_url, f'CREATE SCHEMA "{schema}"')
    raw_sql(pg_url, "CREATE TABLE orders (id INTEGER)")
    with pytest.raises(NotAStatewrightDatabaseError, match=r"orders.*\?schema="):
        open_store(pg_url)


def test_many_processes_opening_a_fresh_database_migrate_it_once(pg_url: str) -> None:
    """Stores opened at once on an empty schema serialize their migrations (advisory lock)."""
    barrier = threading.Barrier(6)
    opened: list[PostgresStore] = []
    failures: list[BaseException] = []

    def open_one() -> None:
        barrier.wait()
        try:
            opened.append(PostgresStore(pg_url))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert failures == []
        assert {s.schema_version() for s in opened} == {SCHEMA_VERSION}
        assert raw_sql(pg_url, "SELECT COUNT(*) FROM sw_meta") == [(2,)]
    finally:
        for s in opened:
            s.close()


def test_the_same_definition_stored_at_once_is_kept_once(pg_url: str) -> None:
    """Concurrent put_definition of one hash does not fail on the unique key."""
    stores = [PostgresStore(pg_url) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    failures: list[BaseException] = []

    def put(s: PostgresStore) -> None:
        barrier.wait()
        try:
            s.put_definition("h1", "wf", 1, {"workflow": "wf"})
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=put, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert failures == []
        assert stores[0].get_definition("h1") == {"workflow": "wf"}
    finally:
        for s in stores:
            s.close()


def test_placeholders_and_percent_signs_are_translated(pg: PostgresStore) -> None:
    """``?`` becomes ``%s`` and a literal ``%`` survives the driver's formatting."""
    assert pg._sql("SELECT ? WHERE 'a%' LIKE ?") == "SELECT %s WHERE 'a%%' LIKE %s"
    with pg._tx() as cur:
        row = pg._x(cur, "SELECT ? || '%'", ("5",)).fetchone()
    assert row == ("5%",)


def test_timers_wake_waiters_too(pg: PostgresStore, pg_url: str) -> None:
    """A new timer row is announced: an idle worker must recompute when it next has work."""
    _prime(pg)
    other = open_store(pg_url)
    try:
        submit(other, "t1", [NewCommand("tm1", "TimerFired", {}, T0 + 60_000, timer=True, purpose="wait")])
    finally:
        other.close()
    assert pg.wait_for_work(10.0) is True


def test_the_url_shown_hides_the_password(pg_url: str) -> None:
    """``store.url`` (used in every message) never carries the password the store connects with."""
    user, _, rest = pg_url.partition("@")
    with_password = f"{user}:hunter2@{rest}"  # trust auth ignores it; the URL still carries it
    s = PostgresStore(with_password)
    try:
        assert "hunter2" not in s.url and ":***@" in s.url
        assert s.schema_version() == SCHEMA_VERSION
    finally:
        s.close()


def test_closing_the_store_ends_a_wait(pg: PostgresStore) -> None:
    """A worker thread blocked in wait_for_work returns False when its store is closed."""
    _prime(pg)
    out: list[tuple[bool, float]] = []

    def wait() -> None:
        pg.wait_for_work(0.0)  # this thread's first call may report "maybe work"
        started = time.monotonic()
        out.append((pg.wait_for_work(30.0), time.monotonic() - started))

    t = threading.Thread(target=wait)
    t.start()
    pg.close()  # before or while the thread waits: either way the wait ends
    t.join(timeout=10)
    assert not t.is_alive()
    assert out[0][0] is False and out[0][1] < 10


def test_a_nul_character_in_a_lookup_is_refused_as_input(pg: PostgresStore) -> None:
    """PostgreSQL text cannot hold NUL: a task id or a filter with one is a clear input
    error (the API answers 422), never the driver's DataError (a server error)."""
    from statewright._errors import InputError

    for call in (lambda: pg.list_tasks(workflow="w\x00"), lambda: pg.load("t-\x00")):
        with pytest.raises(InputError, match="NUL character"):
            call()
    assert pg.list_tasks(workflow="w") == []


def test_a_claim_under_gates_is_planned_once_not_at_every_claim(pg_url: str, tmp_path: Path) -> None:
    """The claim is a prepared statement whose one plan holds for any parameters: after the
    first few claims, PostgreSQL runs it on its generic plan instead of planning every claim
    again (``pg_prepared_statements`` counts both; with ``IN`` and a bound LIMIT, every claim
    under gates was planned anew)."""
    store = PostgresStore(pg_url, min_size=1, max_size=1)  # one connection: its statements are these
    clock = FakeClock(T0)
    engine = Engine(store, clock=clock, workspace_root=tmp_path / "ws")
    try:
        store.put_fleet(FleetConfig(tenants={t: TenantShare(t, weight=i + 1, concurrency=100)
                                             for i, t in enumerate(("a", "b"))}), clock.now_ms())
        wf = workflow_from_dict({"workflow": "planned", "concurrency": 100, "steps": [
            {"id": "s1", "kind": "code", "owner": "t", "concurrency": 100, "run": {"callable": "x:y"}}]})
        for i in range(1000):  # at a few hundred, the old statement still got a generic plan
            engine.submit(wf, {"n": i}, tenant=("a", "b")[i % 2])
        for _ in range(30):
            claims = store.claim("w1", clock.now_ms(), LEASE_MS, 8)
            assert claims and all(c.gates for c in claims)
            for c in claims:
                store.ack(c.command_id, c.token)
        generic, custom = store.claim_plans()
    finally:
        engine.close()
    # psycopg prepares a statement at its sixth run; PostgreSQL makes five custom plans first.
    assert generic + custom >= 20 and custom <= 5


def test_a_wake_while_an_admission_holds_the_gates_lock_waits_for_it_and_wakes_its_waiter(
    pg: PostgresStore, pg_url: str
) -> None:
    """A wake first reads whether anything waits, and skips its write when nothing does. An
    admission under way may be giving a command back to wait for the very slot that just
    freed: the wake then waits for its lock, and wakes what it gave back."""
    submit(pg, "t1", [NewCommand("c1", "run_step", {}, T0)])
    gate = "step:wf/s1"
    import psycopg as driver

    from statewright.store.postgres import _GATES_LOCK_KEY

    conninfo, schema = split_url(pg_url)
    with driver.connect(conninfo) as admission:  # an admission that has not committed yet
        admission.execute(f'SET search_path TO "{schema}"')
        admission.execute("SELECT pg_advisory_xact_lock(%s)", (_GATES_LOCK_KEY,))
        admission.execute("UPDATE sw_outbox SET available_at_ms = %s, wait_gate = %s WHERE command_id = 'c1'",
                          (T0 + 60_000, gate))
        woke = threading.Thread(target=pg.wake, args=([gate], T0 + 1))
        woke.start()
        deadline = time.monotonic() + 10
        while not raw_sql(pg_url, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"):
            assert time.monotonic() < deadline, "the wake did not wait for the admission's lock"
            time.sleep(0.005)
        admission.commit()
    woke.join(10)
    assert not woke.is_alive()
    assert [r["available_at_ms"] for r in pg.outbox()] == [T0 + 1]  # woken
    pg.wake([gate], T0 + 2)  # nothing waits now: no write
    assert [r["available_at_ms"] for r in pg.outbox()] == [T0 + 1]
    assert not raw_sql(pg_url, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory'")  # no lock left held


@pytest.mark.parametrize("ending", ["outcome", "ack"])
def test_an_outcome_commit_is_committed_before_its_wake_waits_for_an_admission(
    pg: PostgresStore, pg_url: str, ending: str
) -> None:
    """A worker's outcome commit (or an ack, where a claim ends with no outcome) carries the
    wake of the claims that ended, run after its COMMIT in the same round trip (the ack's,
    inside the one statement ``sw_ack``): the gates' lock is never held through that
    commit's flush. An admission under way holds the
    lock: the outcomes are committed while the wake waits for it, and then the wake makes
    due what the admission gave back."""
    gate = "step:wf/s1"
    submit(pg, "t1", [run_step("t1/a/1")])
    submit(pg, "t2", [NewCommand("c2", "run_step", {}, T0)])
    [claim] = pg.claim("w1", T0, LEASE_MS, 1, task_id="t1")
    conninfo, schema = split_url(pg_url)
    from statewright.store.postgres import _GATES_LOCK_KEY

    with psycopg.connect(conninfo) as admission:  # gives c2 back to wait, not committed yet
        admission.execute(f'SET search_path TO "{schema}"')
        admission.execute("SELECT pg_advisory_xact_lock(%s)", (_GATES_LOCK_KEY,))
        admission.execute("UPDATE sw_outbox SET available_at_ms = %s, wait_gate = %s WHERE command_id = 'c2'",
                          (T0 + 60_000, gate))
        request = batch_step("t1", 1, "t1:r1", complete=("t1/a/1", claim.token))
        results: list[Any] = []
        wake = Wake((gate,), T0 + 1, 1)

        def end() -> None:
            if ending == "outcome":
                results.append(pg.append_batch([request], wake=wake))
            else:
                pg.ack(claim.command_id, claim.token, wake=wake)

        outcome = threading.Thread(target=end)
        outcome.start()
        deadline = time.monotonic() + 10
        while not raw_sql(pg_url, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"):
            assert time.monotonic() < deadline, "the wake did not wait for the admission's lock"
            time.sleep(0.005)
        # the outcome is committed while its wake waits
        version = 2 if ending == "outcome" else 1
        assert raw_sql(pg_url, "SELECT version FROM sw_tasks WHERE task_id = 't1'") == [(version,)]
        assert raw_sql(pg_url, "SELECT command_id FROM sw_outbox WHERE task_id = 't1'") == []
        admission.commit()
    outcome.join(10)
    assert not outcome.is_alive()
    if ending == "outcome":
        assert results and results[0] is not None and [r.version for r in results[0]] == [2]
    assert [r["available_at_ms"] for r in pg.outbox("t2")] == [T0 + 1]  # woken
    assert not raw_sql(pg_url, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory'")  # no lock left held


def test_a_database_made_before_the_ack_procedure_has_it_once_opened(pg: PostgresStore, pg_url: str) -> None:
    """``sw_ack`` (an ack that carries a wake) is made when a store opens a database that
    lacks it, and the ack then ends the claim and wakes its waiter."""
    gate = "step:wf/s1"
    submit(pg, "t1", [run_step("t1/a/1")])
    submit(pg, "t2", [NewCommand("c2", "run_step", {}, T0)])
    [claim] = pg.claim("w1", T0, LEASE_MS, 1, task_id="t1")
    raw_sql(pg_url, "UPDATE sw_outbox SET available_at_ms = ?, wait_gate = ? WHERE command_id = 'c2'",
            (T0 + 60_000, gate))
    raw_sql(pg_url, "DROP PROCEDURE sw_ack")
    reopened = PostgresStore(pg_url, min_size=1, max_size=1)
    try:
        reopened.ack(claim.command_id, claim.token, wake=Wake((gate,), T0 + 1, 1))
    finally:
        reopened.close()
    assert pg.outbox("t1") == []
    assert [r["available_at_ms"] for r in pg.outbox("t2")] == [T0 + 1]  # woken
    assert not raw_sql(pg_url, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory'")  # no lock left held


def test_a_refused_outcome_commit_sends_no_wake(pg: PostgresStore, pg_url: str) -> None:
    """The wake after an outcome commit runs only where the batch committed: a refused batch
    (here, a stale fencing token) writes nothing, and wakes nothing."""
    gate = "step:wf/s1"
    submit(pg, "t1", [run_step("t1/a/1")])
    submit(pg, "t2", [NewCommand("c2", "run_step", {}, T0)])
    [claim] = pg.claim("w1", T0, LEASE_MS, 1, task_id="t1")
    raw_sql(pg_url, f"UPDATE sw_outbox SET available_at_ms = {T0 + 60_000}, wait_gate = '{gate}'"
                    " WHERE command_id = 'c2'")
    request = batch_step("t1", 1, "t1:r1", complete=("t1/a/1", claim.token + 1))
    assert pg.append_batch([request], wake=Wake((gate,), T0 + 1, 1)) is None
    assert [r["available_at_ms"] for r in pg.outbox("t2")] == [T0 + 60_000]  # still waiting
    loaded = pg.load("t1")
    assert loaded is not None and loaded.version == 1


def test_a_fleet_put_waits_for_a_claim_that_read_the_version_before_it(pg: PostgresStore, pg_url: str) -> None:
    """A claim admitted from a grant reads the config's version in its own statement. A put
    must not commit between that read and the claim's commit: an admission after the put
    would count neither the grant (the put deletes it) nor the claim's slots (not yet
    committed). The read holds the config's lock shared; the put takes it last, and waits."""
    conninfo, schema = split_url(pg_url)
    with psycopg.connect(conninfo) as claim:  # a claim that read the version, not yet committed
        claim.execute(f'SET search_path TO "{schema}"')
        assert claim.execute("SELECT sw_config_version()").fetchone() == (0,)
        put = threading.Thread(target=pg.put_fleet, args=(FleetConfig(tenants={"t": TenantShare("t")}), T0))
        put.start()
        deadline = time.monotonic() + 10
        while not raw_sql(pg_url, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"):
            assert time.monotonic() < deadline, "the put did not wait for the claim"
            time.sleep(0.005)
        assert raw_sql(pg_url, "SELECT version FROM sw_fleet_version") == [(0,)]  # not committed yet
        claim.commit()
    put.join(10)
    assert not put.is_alive()
    assert raw_sql(pg_url, "SELECT version FROM sw_fleet_version") == [(1,)]
    with psycopg.connect(conninfo, autocommit=True) as after:
        after.execute(f'SET search_path TO "{schema}"')
        assert after.execute("SELECT sw_config_version()").fetchone() == (1,)
