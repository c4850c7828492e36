"""Code-step callables for the notification tests."""

from __future__ import annotations

from statewright.executors import ExecContext


def ok(ctx: ExecContext) -> bool:
    return True


def fail(ctx: ExecContext) -> bool:
    return False
