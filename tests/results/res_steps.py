"""Code-step callables for the results tests. What they count lives in the task's workspace."""

from __future__ import annotations

import json
from typing import Any

from statewright.executors import ExecContext


def _calls(ctx: ExecContext) -> int:
    log = ctx.workspace / f"{ctx.step}.calls"
    with open(log, "a", encoding="utf-8") as f:
        f.write(ctx.idempotency_key + "\n")
    return len(log.read_text(encoding="utf-8").split())


def analyse(ctx: ExecContext) -> dict[str, Any]:
    """The result names the run: 1 the first time, 2 after a loop-back."""
    return {"output": {"iban": "DE89370400440532013000", "run": _calls(ctx), "who": ctx.input.get("supplier")}}


def consume(ctx: ExecContext) -> dict[str, Any]:
    """Writes what it was given to seen.json and tries to change it (it cannot)."""
    seen = {"input": dict(ctx.input), "results": {k: dict(v) for k, v in ctx.results.items()}}
    try:
        ctx.results["analyse"]["run"] = 99  # type: ignore[index]
        seen["changed"] = True
    except TypeError:
        seen["changed"] = False
    try:
        ctx.input["supplier"] = "someone else"  # type: ignore[index]
        seen["input_changed"] = True
    except TypeError:
        seen["input_changed"] = False
    (ctx.workspace / "seen.json").write_text(json.dumps(seen), encoding="utf-8")
    return {"ok": True, "output": {"saw_run": ctx.results["analyse"]["run"]}}


def gate(ctx: ExecContext) -> bool:
    """Fails the first time (a loop-back), passes after."""
    return _calls(ctx) > 1


def legacy(ctx: ExecContext) -> dict[str, Any]:
    """The old convention: output is text, not a result."""
    return {"ok": True, "output": "plain text"}


def nan_output(ctx: ExecContext) -> dict[str, Any]:
    return {"output": {"x": float("nan")}}


def infinite_output(ctx: ExecContext) -> dict[str, Any]:
    return {"output": {"x": float("-inf")}}


def huge_output(ctx: ExecContext) -> dict[str, Any]:
    return {"output": {"x": "y" * 300_000}}


def typed_wrong(ctx: ExecContext) -> dict[str, Any]:
    """An output whose ``iban`` is a number where the schema wants a string."""
    return {"output": {"iban": 5}}


def nothing(ctx: ExecContext) -> bool:
    """Succeeds and hands back no output."""
    return True


def brief_agent(brief: dict[str, Any], ctx: ExecContext) -> dict[str, Any]:
    """An agent that reports what its brief told it of the task's state."""
    return {"verdict": {"supplier": brief["input"]["supplier"], "iban": brief["results"]["analyse"]["iban"]}}


def big_verdict(brief: dict[str, Any], ctx: ExecContext) -> dict[str, Any]:
    return {"verdict": {"text": "v" * 5000}}


def decide(ctx: ExecContext) -> dict[str, Any]:
    """An output whose ``outcome`` is the task input's ``decision``."""
    return {"output": {"outcome": ctx.input["decision"]}}


def flaky_once(ctx: ExecContext) -> dict[str, Any]:
    """A throttled API the first time, then fine."""
    from statewright import TransientError

    if _calls(ctx) == 1:
        raise TransientError("429 too many requests")
    return {"output": {"done": True}}


def broken_agent(brief: dict[str, Any], ctx: ExecContext) -> dict[str, Any]:
    raise ValueError("the bank letter has no account number")


def conflicted(ctx: ExecContext) -> dict[str, Any]:
    """An effect whose target answers that the record changed since the proposal."""
    from statewright import ConflictError

    raise ConflictError("record R-1 is at version 5; the change was built on version 4")


def commit_fix(brief: dict[str, Any], ctx: ExecContext) -> dict[str, Any]:
    """An agent that fixes calc.py in its worktree and commits it on the branch ``work``."""
    import subprocess

    (ctx.workspace / "calc.py").write_text("def add(a, b):\n    return a + b\n", encoding="utf-8")
    git = ["git", "-c", "user.email=agent@example.invalid", "-c", "user.name=agent"]
    for args in (["checkout", "-q", "-B", "work"], ["commit", "-q", "-am", "fix add"]):
        subprocess.run([*git, *args], cwd=ctx.workspace, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ctx.workspace, check=True, capture_output=True, text=True)
    return {"verdict": {"branch": "work", "commit": head.stdout.strip()}}


def free_verdict(brief: dict[str, Any], ctx: ExecContext) -> dict[str, Any]:
    """An agent of a step without an output_schema that still gives a verdict."""
    return {"verdict": {"found": brief["input"]["supplier"], "risk": ["new account"]}}


def verdict_once(brief: dict[str, Any], ctx: ExecContext) -> dict[str, Any]:
    """A verdict the first time; after a loop-back, a turn that gives none."""
    return {"verdict": {"run": 1}} if _calls(ctx) == 1 else {"note": "nothing to add"}
