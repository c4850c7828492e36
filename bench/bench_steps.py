"""The step callables the benchmark's workflows run (``run: {callable: "bench_steps:..."}``).

This module is imported by name, so the benchmark puts ``bench/`` on ``sys.path`` in every
process that runs a worker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def noop(ctx: Any) -> bool:
    """A trivial code step: all of its cost is the engine's."""
    return True


def stamp(ctx: Any) -> bool:
    """Record when the step started (epoch seconds) in the task's workspace."""
    started = time.time()
    (ctx.workspace / "started_at").write_text(repr(started), encoding="utf-8")
    return True


def child_end(ctx: Any) -> bool:
    """A map child's step: record when it ended (epoch seconds) in the folder its item names."""
    item = ctx.input["item"]
    ended = time.time()
    (Path(item["out"]) / f"child-{ctx.input['index']}.end").write_text(repr(ended), encoding="utf-8")
    return True


def next_after_map(ctx: Any) -> bool:
    """The parent's step after its map step: record when it started in the parent's out folder."""
    started = time.time()
    (Path(ctx.input["out"]) / "next.start").write_text(repr(started), encoding="utf-8")
    return True
def never(ctx: Any) -> bool:
    """A check that never passes (console_bench.py: a long wait, a long loop-back)."""
    return False


def agree(brief: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """An ai step's agent that approves at once, saying which attempt it was."""
    return {"verdict": {"approved": True, "summary": f"attempt {brief['attempt']}"}, "note": "done"}


def pass_end(ctx: Any) -> bool:
    """A loop pass's step: record when it ended (epoch seconds) in the folder its item names."""
    item = ctx.input["item"]
    ended = time.time()
    (Path(item["out"]) / f"pass-{item['id']}-{ctx.input['attempt']}.end").write_text(repr(ended), encoding="utf-8")
    return True
