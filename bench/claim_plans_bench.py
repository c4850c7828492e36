"""How PostgreSQL plans the claim: the claim loop of ``fleet_bench.py`` (a claim of 8, the
ack of each, and, ON, the wake), OFF and ON, on a store of one connection, so that
``pg_prepared_statements`` shows every plan its claim statement got: generic (planned once)
or custom (planned again at that call).

    .venv/bin/python bench/claim_plans_bench.py [--url URL] [--tasks N]

Prints, for OFF and ON, the claim call's median and p90 (us, per claim of up to 8) and the
claim statement's generic and custom plans. bench/README.md has a run."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package

import fleet_bench


def run(url: str, on: bool, n: int) -> str:
    from statewright import Engine
    from statewright.store.postgres import PostgresStore

    fleet_bench.fill(url, on, n).close()
    store = PostgresStore(url, min_size=1, max_size=1)
    engine = Engine(store, workspace_root=Path(tempfile.gettempdir()) / "sw-claim-plans-ws")
    spent: list[float] = []
    try:
        done = 0
        while done < n:
            started = time.perf_counter()
            claims = store.claim("bench", engine.clock.now_ms(), 60_000, 8)
            spent.append(time.perf_counter() - started)
            if not claims:
                raise RuntimeError(f"claimed {done} of {n}, then nothing")
            for c in claims:
                store.ack(c.command_id, c.token)
            gates = sorted({g for c in claims for g in c.gates})
            if gates:
                store.wake(gates, engine.clock.now_ms(), len(claims))
            done += len(claims)
        generic, custom = store.claim_plans()
    finally:
        engine.close()
    spent.sort()
    return (f"{'on ' if on else 'off'}  claim call median {statistics.median(spent) * 1e6:7,.0f} us, "
            f"p90 {spent[int(len(spent) * 0.9)] * 1e6:7,.0f} us over {len(spent)} claims; "
            f"claim statement plans: {generic} generic, {custom} custom")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--tasks", type=int, default=1000)
    args = parser.parse_args()
    print(f"claim_plans_bench: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()}-core "
          f"{platform.machine()}, Python {platform.python_version()}; {args.tasks} one-step tasks", flush=True)
    for on in (False, True):
        url = fleet_bench.pg_url(args.url)
        try:
            print(run(url, on, args.tasks), flush=True)
        finally:
            fleet_bench.drop_pg_schema(url)


if __name__ == "__main__":
    main()
