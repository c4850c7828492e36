"""The hash chain's formats and keys, on every backend: every write path links rows in the
store's format (keyed with STATEWRIGHT_CHAIN_KEY), legacy chains keep verifying, and
``statewright db upgrade`` rewrites a chain that verifies in the current format (keying it
when a key is set) and leaves a damaged one alone."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

from statewright.cli import cli
from statewright.machine.events import AttemptReported
from statewright.runtime.engine import Engine
from statewright.runtime.verify import OLDER_PROJECTION, verify_task
from statewright.store import AppendRequest, open_store
from statewright.store.base import Store
from statewright.store.chain import (
    GENESIS_HASH,
    KEY_ENV,
    Chain,
    RawEvent,
    RawPeopleRow,
    chain_from_env,
    key_id,
    legacy_link,
    link_format,
)

from .backends import SQL_BACKENDS, raw_sql
from .test_conformance import T0, event, step, submit
from .test_tamper import WF, Tasks, build, rows

KEY = b"operators-key-kept-off-the-db-host"


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=True)


def broken(store: Store, task_id: str, chain: Chain) -> list[int]:
    """Versions whose link does not verify under ``chain``."""
    bad, prev = [], GENESIS_HASH
    for r in store.raw_events(task_id):
        if r.prev_hash != prev or chain.recompute(r) != r.hash:
            bad.append(int(r.version))
        prev = r.hash
    return bad


def test_every_write_path_links_rows_with_the_stores_key(opener: Callable[[], Store]) -> None:
    """The first append, a later one (PostgreSQL: its one-statement form) and a group commit
    all write HMAC links under the key; they verify with it and not without it."""
    store = opener()
    store.chain = Chain(KEY)
    for tid in ("t1", "t2"):
        submit(store, tid)
        step(store, tid, 1, f"{tid}:e2")
    done = store.append_batch([
        AppendRequest(tid, 2, event(f"{tid}:e3", T0 + 3), {"status": "running", "n": 3}, [])
        for tid in ("t1", "t2")
    ])
    assert done is not None
    again = opener()  # another connection, with the key: no memory of the last links
    again.chain = Chain(KEY)
    step(again, "t1", 3, "t1:e4")
    for tid, n in (("t1", 4), ("t2", 3)):
        links = [r.hash for r in store.raw_events(tid)]
        assert len(links) == n
        assert {link_format(h).key_id for h in links} == {key_id(KEY)}
        assert broken(store, tid, Chain(KEY)) == []
        assert broken(store, tid, Chain(b"some-other-key-of-16+")) == list(range(1, n + 1))


def test_an_append_after_a_rechain_links_to_the_new_last_link(opener: Callable[[], Store]) -> None:
    """A store that remembers a task's last link from before ``rechain`` does not chain to it."""
    store, other = opener(), opener()
    submit(store, "t1")
    step(store, "t1", 1, "e2")
    links, prev = [], GENESIS_HASH
    for r in other.raw_events("t1"):
        h = Chain(KEY).link(r.task_id, r.version, r.event_id, r.type, r.at_ms, prev, r.body)
        links.append((prev, h))
        prev = h
    assert other.rechain("t1", 2, links)
    assert not other.rechain("t1", 1, links[:1])  # the task is not at version 1
    step(store, "t1", 2, "e3")  # store still remembers the old link of version 2
    assert [r.prev_hash for r in store.raw_events("t1")][2] == links[1][1]


def test_a_bad_key_is_one_clear_error(backend: str, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key shorter than 16 bytes is refused before anything is opened."""
    monkeypatch.setenv(KEY_ENV, "short")
    result = run("verify", "--db", store_url)
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {KEY_ENV} is 5 bytes long; a chain key needs at least 16 "
        "(make one with: python -c 'import secrets; print(secrets.token_hex(32))')"
    ]
    assert chain_from_env({KEY_ENV: ""}) == Chain()
    assert "hush-hush" not in repr(chain_from_env({KEY_ENV: "hush-hush-0123456789"}))  # nor does repr


def keyed_tasks(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Tasks:
    monkeypatch.setenv(KEY_ENV, KEY.decode())
    return build(store_url)


def test_a_keyed_chain_without_the_key_cannot_be_verified(
    backend: str, store_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the key verify says so per task and fails; with another key it names the
    key ids; with the key it passes."""
    tasks = keyed_tasks(store_url, monkeypatch)
    assert run("verify", "--db", store_url).exit_code == 0
    monkeypatch.delenv(KEY_ENV)
    result = run("verify", "--db", store_url)
    assert result.exit_code == 1
    for tid in (tasks.bad, tasks.good):
        assert f"{tid}: the chain is keyed (key id {key_id(KEY)}); set {KEY_ENV} to check its links" in result.stdout
    monkeypatch.setenv(KEY_ENV, "another-key-entirely")
    result = run("verify", "--db", store_url)
    assert result.exit_code == 1
    assert f"keyed with key id {key_id(KEY)}, not the key given (key id {key_id(b'another-key-entirely')})" \
        in result.stdout


def make_legacy(t: Tasks, task_id: str) -> None:
    """Rewrite a task's chain in format 1, as a database from before format 2 holds it."""
    prev = GENESIS_HASH
    for r in rows(t, task_id):
        h = legacy_link(prev, r.version, r.body)
        raw_sql(t.url, "UPDATE sw_events SET prev_hash = ?, hash = ? WHERE task_id = ? AND version = ?",
                (prev, h, task_id, r.version))
        prev = h
    raw_sql(t.url, "UPDATE sw_tasks SET last_hash = ? WHERE task_id = ?", (prev, task_id))


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_legacy_chains_verify_and_db_upgrade_rewrites_them(
    backend: str, store_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A format-1 chain verifies as it is (its unhashed columns are checked against the body);
    db upgrade rewrites it in format 2; a later append continues the new chain."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    tasks = build(store_url)
    make_legacy(tasks, tasks.bad)
    assert run("verify", "--db", store_url).exit_code == 0
    raw_sql(store_url, "UPDATE sw_events SET at_ms = at_ms + 1 WHERE task_id = ? AND version = 2", (tasks.bad,))
    result = run("verify", "--db", store_url)
    assert result.exit_code == 1 and f"{tasks.bad}: event version 2: column at_ms is" in result.stdout
    raw_sql(store_url, "UPDATE sw_events SET at_ms = at_ms - 1 WHERE task_id = ? AND version = 2", (tasks.bad,))

    upgraded = run("db", "upgrade", "--db", store_url)
    assert upgraded.exit_code == 0, upgraded.output
    assert "1 task chains rewritten in the current format (Chain(unkeyed))" in upgraded.stdout
    store = open_store(store_url)
    try:
        assert {link_format(r.hash).name for r in store.raw_events(tasks.bad)} == {"sha256"}
    finally:
        store.close()
    assert run("verify", "--db", store_url).exit_code == 0


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_db_upgrade_with_a_key_keys_sound_chains_and_leaves_damaged_ones(
    backend: str, store_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unkeyed chains written before the key was set: verify with the key flags them as not
    keyed; db upgrade keys the sound one and leaves the edited one (exit 1, named), so an
    upgrade never blesses a damaged history."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    tasks = build(store_url)
    make_legacy(tasks, tasks.good)
    raw_sql(store_url, "UPDATE sw_events SET body = replace(body, 'code:b', 'code:x') WHERE task_id = ?",
            (tasks.bad,))
    monkeypatch.setenv(KEY_ENV, KEY.decode())
    before = run("verify", "--db", store_url)
    assert f"{tasks.good}: the chain is not keyed (its last link is legacy sha256)" in before.stdout

    upgraded = run("db", "upgrade", "--db", store_url)
    assert upgraded.exit_code == 1
    assert f"1 task chains rewritten in the current format (Chain(key id {key_id(KEY)}))" in upgraded.stdout
    assert f"{tasks.bad}: left as it is: hash chain broken at event version 3" in upgraded.stderr
    after = run("verify", "--db", store_url)
    assert after.exit_code == 1
    assert tasks.good not in after.stdout and f"{tasks.bad}: hash chain broken at event version 3" in after.stdout


def test_verify_reads_a_task_again_when_a_worker_appends_meanwhile(
    store_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An append that lands between reading the task row and its events is no finding:
    verify reads again until the task row held still."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    engine = Engine(open_store(store_url))
    try:
        tid = engine.submit(WF, {"workspace": "."})
        real = engine.store.raw_events
        pending = [f"{tid}/{s}/1" for s in ("a", "b", "c")]

        def append_then_raw_events(task_id: str) -> list[RawEvent]:
            if pending:  # a worker commits the next step's outcome just before this read
                cid = pending.pop(0)
                engine.apply(tid, AttemptReported(
                    event_id=f"{cid}:result", at_ms=engine.clock.now_ms(), command_id=cid,
                    step=cid.split("/")[1], attempt=1, actor="code:x", ok=True,
                ))
            return real(task_id)

        monkeypatch.setattr(engine.store, "raw_events", append_then_raw_events)
        assert verify_task(engine, tid) == []
        assert pending == []
    finally:
        engine.close()


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_projection_from_an_older_statewright_is_named_and_upgraded(
    store_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A projection written before attempts recorded their idempotency key lacks only those
    fields: verify says so (and what to run), db upgrade writes the replayed projection, and
    verify passes. A projection that lacks a field and has another changed is no such case."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    tasks = build(store_url)
    [(text,)] = raw_sql(store_url, "SELECT state FROM sw_tasks WHERE task_id = ?", (tasks.bad,))
    older = json.loads(text)
    for attempt in older["attempts"]:
        del attempt["key"]
    raw_sql(store_url, "UPDATE sw_tasks SET state = ? WHERE task_id = ?", (json.dumps(older), tasks.bad))
    older["attempts"][0]["actor"] = "code:forged"
    raw_sql(store_url, "UPDATE sw_tasks SET state = ? WHERE task_id = ?", (json.dumps(older), tasks.good))

    before = run("verify", "--db", store_url)
    assert f"{tasks.bad}: {OLDER_PROJECTION}" in before.stdout
    assert f"{tasks.good}: replayed state differs from the stored projection" in before.stdout
    upgraded = run("db", "upgrade", "--db", store_url)
    assert upgraded.exit_code == 1
    assert "1 task projections rewritten with the fields this statewright records" in upgraded.stdout
    assert f"{tasks.good}: left as it is: replayed state differs" in upgraded.stderr
    after = run("verify", "--db", store_url)
    assert tasks.bad not in after.stdout and "verified 2 tasks: 1 differ" in after.stdout


EVENT_ROW = ("t-1", 3, "ev-1", "AttemptReported", 1_700_000_000_000, "sha256:" + "a" * 64, '{"x":"é"}')


def test_event_links_are_what_earlier_releases_wrote() -> None:
    """The links of format 2 are byte for byte those stored before the people log shared the
    chain (so existing databases keep verifying)."""
    assert Chain().link(*EVENT_ROW) == "sha256:17371f68f97001abcdc803158c69b5a6d2e234c1b51846abcf5e67581d5e51a9"
    assert Chain(b"k" * 20).link(*EVENT_ROW) == (
        "hmac:ad3bcedb:385f7ecdf4ce6775f2affa27ebae8b7c3185d1a79e3e5e435af15ce8471997b6")


@pytest.mark.parametrize("chain", [Chain(), Chain(KEY)], ids=["unkeyed", "keyed"])
def test_a_people_link_covers_every_column_of_its_row(chain: Chain) -> None:
    """Changing any column of a people log row (or its previous link, or its body) changes
    its link; a people row's link is never the link of an event row with the same values."""
    row = RawPeopleRow(4, 1_700_000_000_000, "root", "add", "alice", '{"roles":["maintainer"]}', "sha256:" + "b" * 64,
                       "")
    link = chain.people_link(*row[:5], row.prev_hash, row.body)
    assert chain.recompute(row._replace(hash=link)) == link
    for column, value in (("seq", 5), ("at_ms", 1), ("actor", "alice"), ("action", "remove"), ("subject", "bob"),
                          ("body", '{"roles":["admin"]}'), ("prev_hash", "sha256:" + "c" * 64)):
        assert chain.recompute(row._replace(hash=link, **{column: value})) != link, column
    assert link != chain.link("4", 1_700_000_000_000, "root", "add", 0, row.prev_hash, row.body)
    assert legacy_link(GENESIS_HASH, 1, "{}") == chain.recompute(RawPeopleRow(
        1, 0, "", "", "", "{}", GENESIS_HASH, legacy_link(GENESIS_HASH, 1, "{}")))
