"""Callables of the file-review example (review-files.yaml, review-one-file.yaml): a plan
that lists files, a per-file check a child task runs, and a summary of the children's results.
Put examples/ on the path to run them: PYTHONPATH=examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statewright.executors import ExecContext


def list_files(ctx: ExecContext) -> dict[str, Any]:
    """The plan: the Python files under ``input.dir`` (sorted, absolute paths), as
    ``{"files": [...]}``."""
    root = Path(str(ctx.input.get("dir", "."))).resolve()
    files = sorted(str(p) for p in root.rglob("*.py") if p.is_file())
    return {"output": {"root": str(root), "files": files[: int(ctx.input.get("limit", 50))]}}


def check_file(ctx: ExecContext) -> dict[str, Any]:
    """One child task's work: count a file's lines and TODO markers. A file that cannot be
    read fails this child, which its parent's map step counts against its tolerance."""
    path = Path(str(ctx.input["item"]))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return {"ok": False, "output": f"cannot read {path}: {exc}"}
    return {"output": {"file": str(ctx.input["item"]), "lines": len(text.splitlines()),
                       "todos": text.count("TODO")}}


def summarise(ctx: ExecContext) -> dict[str, Any]:
    """Add up the children's results, in item order (None for a child that failed)."""
    gathered = ctx.results["review-each"]
    checked = [r["check"] for r in gathered["results"] if r is not None]
    return {"output": {"files": len(checked), "lines": sum(c["lines"] for c in checked),
                       "todos": sum(c["todos"] for c in checked), "failed": gathered["failed"]}}
