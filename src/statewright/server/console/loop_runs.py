"""The web console's one door to the outer loop's runs (/runs, /runs/{id}): every read of a
loop run the pages make goes through these functions (and the one act, ``unpark``), over the loop package's public
reads (``LoopStore.runs``, ``run``, ``lines`` and ``run_dict``). Where the loop keeps its runs
can change behind them without a page changing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statewright._errors import InputError
from statewright._time import when


@contextlib.contextmanager
def _opened(loop_db: str | None) -> Iterator[Any]:
    from statewright.loop.store import LoopStore

    if loop_db is None or not Path(loop_db).is_file():
        yield None
        return
    store = LoopStore.open(loop_db)
    try:
        yield store
    finally:
        store.close()


def _budgets(run: Any) -> list[dict[str, Any]]:
    """Each budget the loop set: how much is spent of how much (for a bar)."""
    s = run.state
    cfg = s.config
    out = [{"name": "passes", "spent": s.passes, "limit": cfg.max_passes, "unit": ""}]
    if cfg.max_tokens is not None:
        out.append({"name": "tokens", "spent": s.tokens_spent, "limit": cfg.max_tokens, "unit": ""})
    if cfg.max_money_usd is not None:
        out.append({"name": "money", "spent": round(s.money_spent_usd, 4), "limit": cfg.max_money_usd, "unit": "USD"})
    out.append({"name": "passes since an item closed", "spent": s.passes_since_last_close,
                "limit": cfg.stuck_after, "unit": ""})
    for b in out:
        b["left"] = max(0, b["limit"] - b["spent"])
    return out


def _summary(run: Any) -> dict[str, Any]:
    from statewright.loop.store import run_dict

    d = run_dict(run, running=False)
    terminal = run.status.is_terminal
    return d | {"terminal": terminal, "opened": when(run.opened_at_ms), "updated": when(run.updated_at_ms),
                "budgets": _budgets(run)}


def loop_runs(loop_db: str | None, *, limit: int = 50) -> list[dict[str, Any]]:
    """The newest runs, newest first, each as ``run_dict`` with its budgets."""
    with _opened(loop_db) as store:
        return [] if store is None else [_summary(r) for r in store.runs(limit=limit)]


def loop_run(loop_db: str | None, run_id: str) -> dict[str, Any] | None:
    """One run with its record (pass by pass) and its parked items; None when there is none."""
    from statewright.loop.store import line_dict

    if not run_id.isdigit() or len(run_id) > 18:
        return None
    with _opened(loop_db) as store:
        if store is None:
            return None
        try:
            run = store.run(run_id)
        except InputError:
            return None
        lines = [line_dict(x) | {"at": when(x.at_ms)} for x in store.lines(run.run_id)]
        items = [{"id": i.id, "status": str(i.status), "attempts": i.attempts, "last_failure": i.last_failure}
                 for i in run.state.items]
    return _summary(run) | {"lines": lines, "items": items,
                            "parked": [i for i in items if i["status"] == "parked"]}


def unpark(loop_db: str | None, run_id: str, item: str, *, actor: str, reason: str, at_ms: int) -> None:
    """Reopen a parked item of the run (``loop unpark``): an audited line of the run."""
    from statewright.loop.runner import unpark_item

    with _opened(loop_db) as store:
        if store is None:
            raise InputError("no loop runs are recorded here")
        unpark_item(store, run_id, item, actor=actor, reason=reason, at_ms=at_ms)
