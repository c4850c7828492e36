"""Scripted stand-ins for bug-triage.yaml: a decision agent and an idempotent close step.

``reproduce(brief, ctx)`` is a python agent: it runs the report's ``reproduce`` command
(if any) in the workspace; a failing command reproduces the bug. It returns the verdict
through the typed channel and keeps its own words as a note, never read as a verdict.

``close_issue(ctx)`` is a code step: it writes a receipt keyed by the idempotency key, so
a redelivered command closes the issue once and reports the same receipt."""

from __future__ import annotations

import json
import subprocess
from typing import Any


def reproduce(brief: dict[str, Any], ctx: Any) -> dict[str, Any]:
    issue = brief["input"]
    argv = issue.get("reproduce") or []
    if not argv:
        return {
            "verdict": {"outcome": "not_reproduced",
                        "summary": "the report gives no way to reproduce it"},
            "note": "Nothing to run.",
        }
    done = subprocess.run(argv, cwd=ctx.workspace, capture_output=True, text=True,
                          timeout=ctx.timeout_seconds, check=False)
    tail = (done.stdout + done.stderr)[-2000:]
    if done.returncode == 0:
        return {
            "verdict": {"outcome": "not_reproduced",
                        "summary": f"{' '.join(argv)} succeeded; the bug did not show"},
            "note": "Could not reproduce.",
        }
    notes = ctx.workspace / f"triage-{issue['issue']}.md"
    notes.write_text(f"# {issue['title']}\n\nReproduced with `{' '.join(argv)}`:\n\n{tail}\n")
    return {
        "verdict": {
            "outcome": "reproduced",
            "summary": f"{' '.join(argv)} exits {done.returncode}",
            "labels": ["bug", "reproduced"],
            "reproduction": tail,
        },
        "artifacts": {"triage_notes": str(notes)},
        "note": "Reproduced it, labelled it.",
    }


def close_issue(ctx: Any) -> dict[str, Any]:
    receipt = ctx.workspace / "closed.json"
    if receipt.exists():
        previous = json.loads(receipt.read_text())
        if previous["idempotency_key"] == ctx.idempotency_key:
            return {"ok": True, "output": "already closed", "artifacts": {"receipt": str(receipt)}}
    receipt.write_text(json.dumps({"idempotency_key": ctx.idempotency_key,
                                   "state": "closed", "reason": "not reproducible"}))
    return {"ok": True, "output": "closed as not reproducible",
            "artifacts": {"receipt": str(receipt)}}
