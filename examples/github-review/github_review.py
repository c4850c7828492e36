"""Scripted stand-ins for review.yaml's agents (no model): a validator, a generator that
also fixes (and names the pull request it opened: a real one would open it with the GitHub
API, from a worktree of the repository given as input ``checkout``), and a reviewer that requests changes ``input.failing_reviews`` times (or as often as
the issue's body asks with "needs N fixes").

Each is a python agent ``(brief, ctx) -> {"verdict": ..., "note": ...}``; the verdict goes
through the step's output schema, the note is kept and never read as a verdict."""

from __future__ import annotations

from typing import Any

PULL_OFFSET = 1000  # the scripted generator "opens" pull request 1000 + the issue's number


def validate(brief: dict[str, Any], ctx: Any) -> dict[str, Any]:
    issue = brief["input"]
    if not str(issue.get("body", "")).strip():
        return {"verdict": {"approved": False, "must_fix": ["say what to build"],
                            "summary": "the issue has no description"}}
    return {"verdict": {"approved": True, "summary": f"#{issue['number']} says what to build"}}


def generate(brief: dict[str, Any], ctx: Any) -> dict[str, Any]:
    issue = brief["input"]
    fixed = [item for prior in brief.get("prior_attempts", []) for item in prior.get("must_fix", [])]
    branch = f"statewright/{issue['number']}"
    summary = f"implements #{issue['number']}" + (f", fixing: {'; '.join(fixed)}" if fixed else "")
    pull = PULL_OFFSET + int(issue["number"])  # the pull request it opened on its first attempt, pushed to later
    return {"verdict": {"summary": summary, "branch": branch, "pull_request": pull, "fixed": fixed},
            "note": f"attempt {brief['attempt']} pushed to {branch}"}


def review(brief: dict[str, Any], ctx: Any) -> dict[str, Any]:
    issue = brief["input"]
    failing = int(issue.get("failing_reviews") or _fixes_asked(str(issue.get("body", ""))))
    if brief["attempt"] <= failing:
        return {"verdict": {"approved": False, "must_fix": [f"review {brief['attempt']}: handle the empty case"],
                            "summary": "changes requested"}}
    return {"verdict": {"approved": True, "summary": "looks right"}}


def _fixes_asked(body: str) -> int:
    words = body.split()
    for i, word in enumerate(words[1:-1], start=1):
        if words[i - 1] == "needs" and word.isdigit() and words[i + 1].startswith("fix"):
            return int(word)
    return 0
