"""A claim under a start rate whose window already holds many starts, on PostgreSQL.

    .venv/bin/python bench/rate_window_bench.py --starts 40000

Fills a database with the fleet ON (fleet_bench.py's config: a rate far above what is
reached), writes ``--starts`` rate log rows inside the current window of the step's named
limit, as a busy fleet would have, and times each ``claim(limit=8)`` (and the ack of what it
claimed) until ``--tasks`` commands are gone: the median and 90th percentile of a claim.
Where the rate has room, the admission should not count the window's rows one by one.
bench/README.md has a run."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package

import fleet_bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--starts", type=int, default=40_000)
    parser.add_argument("--tasks", type=int, default=400)
    args = parser.parse_args()
    import psycopg

    from statewright.store.postgres import split_url

    url = fleet_bench.pg_url(args.url)
    engine = fleet_bench.fill(url, True, args.tasks)
    try:
        now = engine.clock.now_ms()
        conninfo, schema = split_url(url)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"SET search_path = {schema}")
            conn.execute("INSERT INTO sw_rate_log (gate, at_ms, command_id, tokens) SELECT %s, %s - (g %% 50000),"
                         " 'earlier-' || g, 0 FROM generate_series(1, %s) g",
                         (f"limit:{fleet_bench.LIMIT}", now, args.starts))
            kept = conn.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s"
                                " AND table_name = 'sw_rate_log_rows'", (schema,)).fetchone()
            if kept and kept[0]:  # the rows written here count toward the most the rate log holds
                conn.execute("UPDATE sw_rate_log_rows SET at_most = at_most + %s", (args.starts,))
            conn.execute("VACUUM ANALYZE sw_rate_log")
        times = []
        done = 0
        while done < args.tasks:
            started = time.perf_counter()
            claims = engine.store.claim("bench", engine.clock.now_ms(), 60_000, 8)
            for c in claims:
                engine.store.ack(c.command_id, c.token)
            times.append(time.perf_counter() - started)
            if not claims:
                raise RuntimeError(f"claimed {done} of {args.tasks}, then nothing")
            done += len(claims)
    finally:
        engine.close()
        fleet_bench.drop_pg_schema(url)
    times.sort()
    print(f"rate_window_bench: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()}-core "
          f"{platform.machine()}, Python {platform.python_version()}; {args.starts:,} starts in the window; "
          f"a claim of 8 and its acks: median {times[len(times) // 2] * 1e6:,.0f} us, "
          f"p90 {times[int(len(times) * 0.9)] * 1e6:,.0f} us over {len(times)} claims", flush=True)


if __name__ == "__main__":
    main()
