"""Hostile python agents, code callables and checks for the poison tests. Each reads the
case to play from the task's input (``brief["input"]["case"]``, or the case file in the
workspace for code steps, which get no brief)."""

from __future__ import annotations

import sys
from typing import Any

from statewright._errors import PermanentError
from statewright.executors import ExecContext

MB = 1_000_000


def _deep(levels: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def _deep_object(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def _cycle() -> Any:
    value: dict[str, Any] = {"approved": True}
    value["self"] = value
    return value


def _returned(case: str) -> Any:
    ok = {"approved": True}
    returns: dict[str, Any] = {
        "clean": lambda: {"verdict": ok, "note": "fine"},
        "lone surrogate in verdict": lambda: {"verdict": {"approved": True, "summary": "\ud800"}},
        "lone surrogate in a verdict key": lambda: {"verdict": {"approved": True, "data": {"\udfff": 1}}},
        "verdict nested 5,000 deep": lambda: {"verdict": {"approved": True, "data": _deep(5000, 1)}},
        "verdict objects nested 5,000 deep": lambda: {"verdict": {"approved": True, "data": _deep_object(5000)}},
        "verdict that contains itself": lambda: {"verdict": _cycle()},
        "NaN in verdict": lambda: {"verdict": {"approved": True, "score": float("nan")}},
        "Infinity in verdict": lambda: {"verdict": {"approved": True, "score": float("-inf")}},
        "5,000-digit integer in verdict": lambda: {"verdict": {"approved": True, "score": 10**5000}},
        "set in verdict": lambda: {"verdict": {"approved": True, "data": {1, 2}}},
        "integer key in verdict": lambda: {"verdict": {"approved": True, "data": {1: "one", "b": 2}}},
        "2 MB verdict": lambda: {"verdict": {"approved": True, "summary": "v" * (2 * MB)}},
        "NaN cost": lambda: {"verdict": ok, "cost": {"money_usd": float("nan")}},
        "Infinity tokens": lambda: {"verdict": ok, "cost": {"tokens_in": float("inf")}},
        "20 MB note": lambda: {"verdict": ok, "note": "n" * (20 * MB)},
        "lone surrogate in note": lambda: {"verdict": ok, "note": "before \ud800 after"},
        "5 MB artifact": lambda: {"verdict": ok, "artifacts": {"big.txt": "a" * (5 * MB)}},
        "1,000 artifacts": lambda: {"verdict": ok, "artifacts": {f"a{i}": "x" for i in range(1000)}},
        "lone surrogates in artifact name and text": lambda: {"verdict": ok, "artifacts": {"\ud800": "\udfff"}},
    }
    return returns[case]()


def agent(brief: dict[str, Any], ctx: ExecContext) -> Any:
    """A python agent that plays ``brief["input"]["case"]``."""
    case = brief["input"]["case"]
    if case == "raises a 5 MB message with lone surrogates":
        raise ValueError("\ud800" * 10 + "m" * (5 * MB))
    if case == "raises PermanentError with a 5 MB message":
        raise PermanentError("\udfff" + "m" * (5 * MB), reason="refused")
    if case == "calls sys.exit()":
        sys.exit(3)
    return _returned(case)


def _case(ctx: ExecContext) -> str:
    return (ctx.workspace / "case").read_text(encoding="utf-8")


def code(ctx: ExecContext) -> Any:
    """A code callable that plays the case in ``workspace/case``."""
    case = _case(ctx)
    if case == "5 MB output with lone surrogates":
        return {"ok": True, "output": "\ud800" + "o" * (5 * MB)}
    if case == "1,000 artifacts":
        return {"ok": True, "artifacts": {f"a{i}": "x" for i in range(1000)}}
    if case == "lone surrogates in artifact name and text":
        return {"ok": True, "artifacts": {"\ud800": "\udfff" * 10}}
    if case == "raises PermanentError with a 5 MB message":
        raise PermanentError("\udfff" + "m" * (5 * MB), reason="refused")
    if case == "calls sys.exit()":
        sys.exit(0)
    return True


def check(ctx: ExecContext) -> Any:
    """A wait step's check whose detail is 5 MB with a lone surrogate."""
    return {"passed": False, "detail": "\ud800" + "d" * (5 * MB)}


def done(ctx: ExecContext) -> bool:
    return True


def counted(brief: dict[str, Any], ctx: ExecContext) -> Any:
    """A clean python agent that logs each call in ``workspace/calls``."""
    with open(ctx.workspace / "calls", "a", encoding="utf-8") as fh:
        fh.write(ctx.idempotency_key + "\n")
    return {"verdict": {"approved": True}}


def failing_check(ctx: ExecContext) -> bool:
    return False
