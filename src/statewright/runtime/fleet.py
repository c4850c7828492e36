"""Why a task is not running: what ``statewright tasks`` and the HTTP API show beside a task
whose step is queued. Read from the outbox: a step held under a lease runs; one that was
passed over says why (a concurrency slot, a rate limit, a spent budget: store/admission.py);
one that is due waits its turn (commands of a higher priority, or ahead of it in the fair
share across tenants); one due later waits for its retry's backoff."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from statewright._time import when
from statewright.store import Store

_STEP_COMMANDS = ("RunStep", "RunCheck", "CaptureArtifacts")


def waiting_reasons(rows: Iterable[Mapping[str, Any]], now_ms: int) -> dict[str, str]:
    """Task id -> why its queued step is not running, from the outbox ``rows``
    (``Store.outbox()``); a task whose step runs under a lease is not listed."""
    steps = [r for r in rows if r["type"] in _STEP_COMMANDS]
    due = [r for r in steps if _free(r, now_ms) and int(r["available_at_ms"]) <= now_ms]
    out: dict[str, str] = {}
    for r in steps:
        if not _free(r, now_ms):
            continue
        tid = str(r["task_id"])
        if int(r["available_at_ms"]) > now_ms:
            out[tid] = str(r.get("waiting") or f"a retry's backoff: due again {when(int(r['available_at_ms']))}")
            continue
        prio, fair = int(r.get("priority", 0)), int(r.get("fair", 0))
        higher = sum(1 for o in due if int(o.get("priority", 0)) > prio)
        share = sum(1 for o in due if int(o.get("priority", 0)) == prio and int(o.get("fair", 0)) < fair)
        parts = []
        if higher:
            parts.append(f"{higher} of a higher priority")
        if share:
            parts.append(f"{share} ahead in the fair share of priority {prio}")
        out[tid] = "queued: " + (" and ".join(parts) + " claimed first" if parts else "next to be claimed")
    return out


def _free(r: Mapping[str, Any], now_ms: int) -> bool:
    lease = r.get("lease_expires_ms")
    return r.get("lease_owner") is None or lease is None or int(lease) <= now_ms


def with_waiting(listed: list[dict[str, Any]], store: Store, now_ms: int) -> list[dict[str, Any]]:
    """``task_row`` rows with ``waiting`` (why a running task's step is not running now, or
    None), shown as the ``why`` of a running task."""
    for t in listed:
        t["waiting"] = None
    if not any(t["status"] == "running" for t in listed):
        return listed
    reasons = waiting_reasons(store.outbox(), now_ms)
    for t in listed:
        t["waiting"] = reasons.get(t["task_id"]) if t["status"] == "running" else None
        if t["waiting"] and not t["why"]:
            t["why"] = t["waiting"]
    return listed


__all__ = ["waiting_reasons", "with_waiting"]
