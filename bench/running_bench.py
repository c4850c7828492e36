"""Claim throughput with the fleet's limits and shares on, against off, while many steps
are running: each holds a slot of every gate it passes (its claim's lease) for the whole
run, as an agent's step of minutes does.

    .venv/bin/python bench/running_bench.py                  # SQLite, and PostgreSQL at --url
    .venv/bin/python bench/running_bench.py --running 0 500 2000 --tasks 1000 --rounds 3
    .venv/bin/python bench/running_bench.py --no-postgres
    .venv/bin/python bench/running_bench.py --running 0 2000 --queued 10000   # behind a backlog
    .venv/bin/python bench/running_bench.py --running 0 --shares   # and the shares alone

For each number of running steps, OFF and ON stores (as in fleet_bench.py: ON has four
weighted tenants with a concurrency, the workflow's concurrency and the step's named limit
with a concurrency and a rate, five gates a claim) first lease that many commands for an
hour; then fleet_bench.py's claim loop (claim 8, ack each, the last with ON's wake) drains
the next ``--tasks`` commands, one batch OFF and one ON in turn, so that the machine's swings fall on
both. With ``--queued``, that many more commands wait behind them all along, as a backlog
does. With ``--shares``, a third store, SHARES, has the four tenants' weighted shares alone
(no concurrency, no limit: claimed by fair share, admitted by nothing), drained in turn
with the other two: what fair shares cost, apart from admission. Printed: commands per
second OFF and ON (and SHARES), medians over rounds, and the median of the rounds' ON/OFF
(and SHARES/OFF) ratios. bench/README.md has a run."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package

from fleet_bench import claim_paired, drop_pg_schema, pg_url, sqlite_url


def measure(
    name: str, new_url: Any, cleanup: Any, running: list[int], n: int, rounds: int, queued: int, shares: bool
) -> None:
    modes: tuple[bool | str, ...] = (False, "shares", True) if shares else (False, True)
    for r in running:
        rates: dict[bool | str, list[float]] = {m: [] for m in modes}
        for _ in range(rounds):
            for m, rate in zip(modes, claim_paired(new_url, cleanup, n, running=r, queued=queued, modes=modes),
                               strict=True):
                rates[m].append(rate)
        ratios = [b / a for a, b in zip(rates[False], rates[True], strict=True)]
        also = ""
        if shares:
            of_off = [b / a for a, b in zip(rates[False], rates["shares"], strict=True)]
            also = (f"   shares {statistics.median(rates['shares']):>7,.0f}   shares/off"
                    f" {statistics.median(of_off):5.2f} {[round(x, 2) for x in of_off]}")
        print(f"{name:<9} {r:>6,} running   off {statistics.median(rates[False]):>7,.0f}"
              f"   on {statistics.median(rates[True]):>7,.0f}   on/off {statistics.median(ratios):5.2f}"
              f"   round ratios {[round(x, 2) for x in ratios]}{also}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--running", type=int, nargs="+", default=[0, 500, 2000])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--queued", type=int, default=0, help="commands that stay queued behind those drained")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shares", action="store_true",
                        help="also SHARES: the four tenants' weighted shares alone, no limit, so no admission")
    args = parser.parse_args()
    print(f"running_bench: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()}-core "
          f"{platform.machine()}, Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}; "
          f"claim loop of {args.tasks} commands per round, {args.queued} more queued, {args.rounds} rounds,"
          " commands/s medians", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="sw-running-bench-"))
    measure("sqlite", lambda: sqlite_url(tmp), lambda url: None, args.running, args.tasks, args.rounds,
            args.queued, args.shares)
    if not args.no_postgres:
        measure("postgres", lambda: pg_url(args.url), drop_pg_schema, args.running, args.tasks, args.rounds,
                args.queued, args.shares)
    print(f"load at the end {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
