"""Claim throughput with the fleet's limits and shares on, against off, on SQLite and
PostgreSQL.

    .venv/bin/python bench/fleet_bench.py                 # SQLite, and PostgreSQL at --url
    .venv/bin/python bench/fleet_bench.py --quick         # small sizes, few rounds
    .venv/bin/python bench/fleet_bench.py --no-postgres
    .venv/bin/python bench/fleet_bench.py --processes 4  # and (4): four worker processes

Two workloads, each run with the fleet OFF (no tenants, no limits: the one-statement claim)
and ON (every task of one of four tenants with weights, a tenant concurrency, the workflow's
concurrency and the step's named limit with a concurrency and a rate, so every claim is
ordered by fair share and admitted under five gates):

  (1) worker: one in-process ``Worker(concurrency=4)`` drains N one-step tasks (a python
      callable that returns at once); tasks per second, submit excluded. This is what a
      worker claims in practice (batches of claims, one outcome commit per batch).
  (2) claim loop: ``store.claim(limit=8)`` then ``ack`` of each, the last one (ON) carrying
      the wake of the claims under limits that ended, as a worker's commit of outcomes
      does, until C commands are gone (``--commands``, 5,000: a round of 1,000 took about
      0.1 s on SQLite, and one checkpoint of its WAL or one slow flush of the disk, 5 to
      25 ms, swung its figure by as much); commands per second. The claim path alone,
      without performing anything.

  (3) claim loop, paired: (2) OFF, SHARES and ON on three stores at once, one batch of each
      in turn, so that the machine's own swings (a slow disk flush on PostgreSQL) fall on
      all; the ratios are the medians of each round's. SHARES is ON's four weighted tenants
      with no limit: the fair order alone. Also printed: where a batch's time went, the
      claim, the first 7 acks and the last (ON, with the wake), in microseconds per batch
      over all rounds.
  (4) with ``--processes P``: P worker processes (each as in (1)) drain the N one-step
      tasks from one database, each claim admitted across all of them; tasks per second
      from when every process has its store open.

Each round runs OFF and ON, each on a database of its own (removed after it, with its steps'
workspaces), OFF first in one round and ON first in the next. Each fill is written out to
the disk before its drain is timed (``settle``). The figures are medians over rounds, and (1),
(2) and (4) also print each round's ON/OFF and their median.
bench/README.md has a run."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package

LIMIT = "model-api"
TENANTS = ("t1", "t2", "t3", "t4")


def fleet_on(limits: bool = True) -> Any:
    """ON's config; without ``limits``, the tenants' weights alone (SHARES)."""
    from statewright.definition.fleet import FleetConfig, NamedLimit, TenantShare, parse_rate

    if not limits:
        return FleetConfig(tenants={t: TenantShare(t, weight=i + 1) for i, t in enumerate(TENANTS)})
    return FleetConfig(
        limits={LIMIT: NamedLimit(LIMIT, concurrency=10_000, rate=parse_rate("100000000/min"))},
        tenants={t: TenantShare(t, weight=i + 1, concurrency=10_000) for i, t in enumerate(TENANTS)},
    )


def workflow(on: bool | str) -> Any:
    from statewright.definition.loader import workflow_from_dict

    step: dict[str, Any] = {"id": "s1", "kind": "code", "owner": "bench", "run": {"callable": "bench_steps:noop"}}
    top: dict[str, Any] = {}
    if on is True:
        step |= {"concurrency": 10_000, "limits": [LIMIT]}
        top = {"concurrency": 10_000}
    return workflow_from_dict({"workflow": f"fleet-{mode_name(on)}", "steps": [step], **top})


def mode_name(on: bool | str) -> str:
    """OFF (False), ON (True), or SHARES ("shares": the tenants' weighted shares, no limit)."""
    return on if isinstance(on, str) else "on" if on else "off"


def open_engine(url: str) -> Any:
    """An engine on the store at ``url``, its steps' workspaces in ``workspaces(url)``."""
    from statewright import Engine
    from statewright.store import open_store

    return Engine(open_store(url), workspace_root=workspaces(url))


def workspaces(url: str) -> Path:
    """The folder of the steps' workspaces of the database at ``url``, one per database, so
    that no round makes its workspaces in a folder that earlier rounds filled (``cleanup``
    removes it with the database)."""
    name = url.rpartition("schema=")[2] if "schema=" in url else url.rpartition("/")[2].partition("?")[0]
    return Path(tempfile.gettempdir()) / "sw-fleet-bench-ws" / name.replace(".", "-")


def cleanup_sqlite(url: str) -> None:
    """Remove the SQLite database at ``url`` (its WAL and shared memory too) and its
    workspaces, so that no round's disk writes back what earlier rounds left behind."""
    import shutil

    db = Path(url.removeprefix("sqlite:///").partition("?")[0])
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        path.unlink(missing_ok=True)
    shutil.rmtree(workspaces(url), ignore_errors=True)


def fill(url: str, on: bool | str, n: int) -> Any:
    engine = open_engine(url)
    if on:
        engine.store.put_fleet(fleet_on(limits=on is True), engine.clock.now_ms())
    wf = workflow(on)
    for i in range(n):
        engine.submit(wf, {"n": i}, tenant=TENANTS[i % len(TENANTS)] if on else None)
    settle(url)
    return engine


def settle(url: str) -> None:
    """Write the fill out before anything is timed: SQLite's WAL checkpointed into the
    database and the file system synced; PostgreSQL checkpointed. Else the disk writes the
    fill back while the drain after it is timed, and a round of one mode pays for it where
    one of the other did not. A PostgreSQL role that may not checkpoint leaves it to the
    server's own checkpoints."""
    if url.startswith("sqlite:"):
        import sqlite3

        with closing(sqlite3.connect(url.removeprefix("sqlite:///").partition("?")[0])) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        os.sync()
        return
    import psycopg

    from statewright.store.postgres import split_url

    with psycopg.connect(split_url(url)[0], autocommit=True) as pg, suppress(psycopg.errors.InsufficientPrivilege):
        pg.execute("CHECKPOINT")


def worker_round(url: str, on: bool, n: int) -> float:
    from statewright.runtime.worker import Worker

    engine = fill(url, on, n)
    try:
        started = time.perf_counter()
        stats = Worker(engine, concurrency=4).run(until_idle=True)
        spent = time.perf_counter() - started
    finally:
        engine.close()
    if stats.commands < n:
        raise RuntimeError(f"the worker performed {stats.commands} commands, expected {n}")
    return n / spent


def _process_worker(url: str, ready: Any, done: Any) -> None:
    """One worker process of ``processes_round``: opens the store, waits for the start, drains."""
    from statewright.runtime.worker import Worker

    engine = open_engine(url)
    try:
        ready.wait()
        done.put(Worker(engine, concurrency=4).run(until_idle=True).commands)
    finally:
        engine.close()


def processes_round(url: str, on: bool, n: int, processes: int) -> float:
    """``processes`` worker processes (each ``Worker(concurrency=4)``) on one database drain
    ``n`` one-step tasks: tasks per second, from when every process has its store open."""
    import multiprocessing

    fill(url, on, n).close()
    ctx = multiprocessing.get_context("fork")
    ready, done = ctx.Barrier(processes + 1), ctx.Queue()
    workers = [ctx.Process(target=_process_worker, args=(url, ready, done)) for _ in range(processes)]
    for w in workers:
        w.start()
    ready.wait()
    started = time.perf_counter()
    for w in workers:
        w.join()
    spent = time.perf_counter() - started
    performed = sum(done.get(timeout=10) for _ in workers)
    if performed < n:
        raise RuntimeError(f"the workers performed {performed} commands, expected {n}")
    return n / spent


def claim_round(url: str, on: bool, n: int) -> float:
    engine = fill(url, on, n)
    try:
        done = 0
        started = time.perf_counter()
        while done < n:
            got = claim_batch(engine)
            if not got:
                raise RuntimeError(f"claimed {done} of {n}, then nothing")
            done += got
        spent = time.perf_counter() - started
    finally:
        engine.close()
    return n / spent


def claim_batch(engine: Any, parts: dict[str, float] | None = None) -> int:
    """One claim of up to 8 commands and the ack of each; ON, the last ack carries the wake
    of the claims under limits that ended, as a worker's commit of outcomes does (once per
    commit, in the same write). How many it claimed. With ``parts``, the seconds the claim,
    the acks before the last and the last ack took are added to it."""
    from statewright.store.base import Wake

    store = engine.store
    started = time.perf_counter()
    claims = store.claim("bench", engine.clock.now_ms(), 60_000, 8)
    claimed = time.perf_counter()
    for c in claims[:-1]:
        store.ack(c.command_id, c.token)
    acked = time.perf_counter()
    if claims:
        gated = [c for c in claims if c.gates]
        gates = tuple(sorted({g for c in gated for g in c.gates}))
        store.ack(claims[-1].command_id, claims[-1].token,
                  wake=Wake(gates, engine.clock.now_ms(), len(gated)) if gated else None)
    ended = time.perf_counter()
    if parts is not None:
        for part, spent in (("claim", claimed - started), ("ack", acked - claimed), ("last ack", ended - acked)):
            parts[part] = parts.get(part, 0.0) + spent
    return len(claims)


def claim_paired(
    new_url: Any, cleanup: Any, n: int, running: int = 0, queued: int = 0,
    modes: tuple[bool | str, ...] = (False, True), parts: dict[bool | str, dict[str, float]] | None = None,
) -> tuple[float, ...]:
    """The claim loop OFF and ON (``modes``: and SHARES, with "shares") on stores side by
    side, one batch of each in turn, so that what the machine does meanwhile (a slow disk
    flush, another process) falls on all: commands per second of each, in the order of
    ``modes``. With ``running``, each store first leases that many commands for an hour, as
    steps that run all along; with ``queued``, that many more commands wait behind the ones
    drained, as a backlog does. With ``parts``, each mode's seconds in the claims and the acks
    (``claim_batch``) are added to ``parts[mode]``."""
    urls = {on: new_url() for on in modes}
    engines = {on: fill(urls[on], on, running + n + queued) for on in modes}
    spent, done = dict.fromkeys(modes, 0.0), dict.fromkeys(modes, 0)
    try:
        for engine in engines.values():
            held = 0
            while held < running:
                got = engine.store.claim("running", engine.clock.now_ms(), 3_600_000, min(64, running - held))
                if not got:
                    raise RuntimeError(f"leased {held} of {running}, then nothing")
                held += len(got)
        while min(done.values()) < n:
            for on in modes:
                started = time.perf_counter()
                got = claim_batch(engines[on], parts.setdefault(on, {}) if parts is not None else None)
                spent[on] += time.perf_counter() - started
                if not got and done[on] < n:
                    raise RuntimeError(f"claimed {done[on]} of {n}, then nothing")
                done[on] += got
    finally:
        for on in modes:
            engines[on].close()
            cleanup(urls[on])
    return tuple(done[on] / spent[on] for on in modes)


def sqlite_url(tmp: Path) -> str:
    return f"sqlite:///{tmp / f'fleet-{uuid.uuid4().hex[:8]}.db'}?synchronous=NORMAL"


def pg_url(base: str) -> str:
    schema = f"fleet_bench_{uuid.uuid4().hex[:8]}"
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def drop_pg_schema(url: str) -> None:
    import shutil

    import psycopg

    from statewright.store.postgres import split_url

    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    shutil.rmtree(workspaces(url), ignore_errors=True)


def measure(
    name: str, new_url: Any, cleanup: Any, n: int, rounds: int, processes: int = 0, commands: int = 0,
) -> list[str]:
    """The lines of (1) to (4): ``n`` tasks a round for the workers, ``commands`` (or ``n``)
    for the claim loops."""
    commands = commands or n
    lines = [in_rounds(name, "(1) worker, tasks/s", worker_round, new_url, cleanup, n, rounds),
             in_rounds(name, "(2) claim loop, commands/s", claim_round, new_url, cleanup, commands, rounds)]
    modes: tuple[bool | str, ...] = (False, "shares", True)
    paired: dict[bool | str, list[float]] = {on: [] for on in modes}
    parts: dict[bool | str, dict[str, float]] = {}
    for _ in range(rounds):
        for on, got in zip(modes, claim_paired(new_url, cleanup, commands, modes=modes, parts=parts), strict=True):
            paired[on].append(got)
    ratios = {on: [b / a for a, b in zip(paired[False], paired[on], strict=True)] for on in modes}
    batches = rounds * -(-commands // 8)
    per_batch = "; ".join(f"{mode_name(on)} " + ", ".join(f"{part} {spent / batches * 1e6:,.0f}"
                                                          for part, spent in parts[on].items() if spent)
                          for on in modes)
    line = (f"{name:<10} {'(3) claim loop, paired':<28} off {statistics.median(paired[False]):>8,.0f}   "
            f"on {statistics.median(paired[True]):>8,.0f}   on/off {statistics.median(ratios[True]):5.2f}   "
            f"round ratios {[round(r, 2) for r in ratios[True]]}   shares {statistics.median(paired['shares']):,.0f},"
            f" shares/off {statistics.median(ratios['shares']):.2f}   us per batch of 8: {per_batch}")
    print(line, flush=True)
    lines.append(line)
    if processes:
        lines.append(in_rounds(name, f"(4) {processes} worker processes, tasks/s",
                               lambda url, on, n: processes_round(url, on, n, processes), new_url, cleanup, n, rounds))
    return lines


def in_rounds(name: str, label: str, fn: Any, new_url: Any, cleanup: Any, n: int, rounds: int) -> str:
    """``fn(url, on, n)`` OFF and ON on a fresh database each, ``rounds`` times, OFF first in
    one round and ON first in the next, so that neither mode always runs after the other:
    the line printed."""
    figures: dict[bool, list[float]] = {False: [], True: []}
    for i in range(rounds):
        for on in (False, True) if i % 2 == 0 else (True, False):
            url = new_url()
            try:
                figures[on].append(fn(url, on, n))
            finally:
                cleanup(url)
    off, on_ = statistics.median(figures[False]), statistics.median(figures[True])
    ratios = [b / a for a, b in zip(figures[False], figures[True], strict=True)]
    line = (f"{name:<10} {label:<28} off {off:>8,.0f}   on {on_:>8,.0f}   on/off {on_ / off:5.2f}   "
            f"rounds off {[round(f) for f in figures[False]]} on {[round(f) for f in figures[True]]}"
            f"   round ratios {[round(r, 2) for r in ratios]}, median {statistics.median(ratios):.2f}")
    print(line, flush=True)
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--processes", type=int, default=0, help="also (4): this many worker processes on one database")
    parser.add_argument("--commands", type=int, default=None, help="commands a round of the claim loops (2) and (3)")
    args = parser.parse_args()
    n = args.tasks or (200 if args.quick else 1000)
    commands = args.commands or (1000 if args.quick else 5000)
    rounds = args.rounds or (2 if args.quick else 5)
    print(f"fleet_bench: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()}-core "
          f"{platform.machine()}, Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}; "
          f"{n} one-step tasks per round of (1) and (4), {commands} of (2) and (3), {rounds} rounds, medians",
          flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="sw-fleet-bench-"))
    measure("sqlite", lambda: sqlite_url(tmp), cleanup_sqlite, n, rounds, args.processes, commands)
    if not args.no_postgres:
        measure("postgres", lambda: pg_url(args.url), drop_pg_schema, n, rounds, args.processes, commands)
    tmp.rmdir()
    print(f"load at the end {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
