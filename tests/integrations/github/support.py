"""Helpers for the GitHub tests: work a task until nothing is due, and the issue input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker

EXAMPLE_DIR = Path(__file__).resolve().parents[3] / "examples" / "github-review"
EXAMPLE = EXAMPLE_DIR / "review.yaml"
REPO = "octo-org/widgets"


def pr(number: int) -> int:
    """The pull request the example's scripted generator opens for issue ``number``."""
    return 1000 + number


def drain(engine: Engine) -> None:
    """Run one worker until nothing is due now (the fake clock never moves by itself)."""
    Worker(engine, lease_seconds=5).run(until_idle=True)


def issue(number: int, *, failing_reviews: int = 0, body: str = "Add a --dry-run flag") -> dict[str, Any]:
    return {"repo": REPO, "number": number, "title": f"issue {number}", "body": body, "author": "carol",
            "failing_reviews": failing_reviews}
