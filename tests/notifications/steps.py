"""Code-step callables for the notification tests."""

from __future__ import annotations

from statewright.executors import ExecContext


def ok(ctx: ExecContext) -> bool:
    return True


def fail(ctx: ExecContext) -> bool:
    return False


def never(ctx: ExecContext) -> bool:
    """A wait step's check that never passes."""
    return False


def fail_loudly(ctx: ExecContext) -> dict[str, object]:
    """Fails with output a Slack reader must not take for markup."""
    return {"ok": False, "output": "<!channel> pay <https://evil.example|here> & now"}
