"""What writing a task's projection costs a step as its history grows.

    python bench/projection_bench.py [--output-bytes B]

A step's commit writes the task's whole projection (its state as JSON), so the text grows with
every attempt. This builds, with the reducer alone, a task that loops implement -> review
(which fails and loops back) until it has 10, 50 and 200 attempts, each with an output of
``B`` bytes (default 2,000), and times encoding the projection of the state after the newest
attempt:

- ``plain``: ``json.dumps(projection(state), separators=(",", ":"), ensure_ascii=False)``,
  all of it every step;
- ``reused``: ``projection(state).compact_json()`` as the stores call it, after the previous
  state's projection was written, so only the records that are new are encoded.

Both give the same text (checked). Prints the median microseconds of each over 200 rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from typing import Any

from statewright import WorkflowBuilder
from statewright.machine.events import AttemptReported, TaskSubmitted
from statewright.machine.state import TaskState, new_task, projection
from statewright.machine.task import transition


def workflow() -> Any:
    b = WorkflowBuilder("projection-bench")
    b.code("implement", owner="dev", run={"callable": "x:y"})
    b.code("review", owner="dev", run={"callable": "x:y"},
           on_failure={"loop_back": "implement", "max_attempts": 1000})
    return b.build()


def history(attempts: int, output_bytes: int) -> list[TaskState]:
    """The states of a task after each of its first ``attempts`` attempts."""
    wf = workflow()
    state, _ = transition(new_task("t-bench", wf), TaskSubmitted(event_id="t-bench:submitted", at_ms=1, input={}))
    states = []
    for n in range(attempts):
        assert state.current is not None
        step, attempt = state.current.step, state.current.attempt
        event = AttemptReported(
            event_id=f"t-bench/{step}/{attempt}:result", at_ms=2 + n, command_id=f"t-bench/{step}/{attempt}",
            step=step, attempt=attempt, actor=f"code:{step}", ok=step == "implement",
            output="o" * output_bytes, cost={"tokens_in": 1200, "tokens_out": 300, "money_usd": 0.004},
        )
        state, _ = transition(state, event)
        states.append(state)
    return states


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-bytes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)
    plain = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M UTC}, {platform.machine()}, {os.cpu_count()} cores,"
          f" Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}")
    print(f"{'attempts':>8} {'state KB':>9} {'plain us':>9} {'reused us':>10}")
    for attempts in (10, 50, 200):
        states = history(attempts, args.output_bytes)
        before, last = states[-2], states[-1]
        text = plain(projection(last))
        projection(before).compact_json()  # the previous step wrote its records
        assert projection(last).compact_json() == text
        full, reused = [], []
        for _ in range(args.rounds):
            started = time.perf_counter()
            plain(projection(last))
            full.append(time.perf_counter() - started)
            started = time.perf_counter()
            projection(last).compact_json()
            reused.append(time.perf_counter() - started)
        print(f"{attempts:>8} {len(text.encode()) / 1024:>9.1f} {statistics.median(full) * 1e6:>9.0f}"
              f" {statistics.median(reused) * 1e6:>10.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
