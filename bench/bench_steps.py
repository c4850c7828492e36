"""The step callables the benchmark's workflows run (``run: {callable: "bench_steps:..."}``).

This module is imported by name, so the benchmark puts ``bench/`` on ``sys.path`` in every
process that runs a worker."""

from __future__ import annotations

import time
from typing import Any


def noop(ctx: Any) -> bool:
    """A trivial code step: all of its cost is the engine's."""
    return True


def stamp(ctx: Any) -> bool:
    """Record when the step started (epoch seconds) in the task's workspace."""
    started = time.time()
    (ctx.workspace / "started_at").write_text(repr(started), encoding="utf-8")
    return True


def never(ctx: Any) -> bool:
    """A check that never passes (console_bench.py: a long wait, a long loop-back)."""
    return False


def agree(brief: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """An ai step's agent that approves at once, saying which attempt it was."""
    return {"verdict": {"approved": True, "summary": f"attempt {brief['attempt']}"}, "note": "done"}
