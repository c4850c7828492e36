"""``/metrics``: the store's tasks in the Prometheus text format (0.0.4), read at each scrape.

    statewright_tasks{status}                              tasks in each status (exact)
    statewright_tasks_by_age{status,age}                   not-ended tasks by time since their last change
    statewright_task_oldest_age_seconds{status}            the longest a not-ended task has stood still
    statewright_approval_waiting_seconds                   tasks waiting for an approval now, by wait (histogram)
    statewright_approval_queue_seconds                     approvals and rejections given, by wait (histogram)
    statewright_step_seconds{kind}                         finished attempts of ai/code/wait steps (histogram)
    statewright_attempts_total{kind,outcome}               attempts recorded
    statewright_failures_total{reason}                     failed attempts by reason code

The histograms and counters walk the stored projection of every task (``scan_limit`` of
them, newest first), so a scrape costs a read of those rows."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from statewright.machine.state import TaskStatus
from statewright.store.base import StoredTask

_ENDED = {TaskStatus.COMPLETED.value, TaskStatus.COMPLETED_EARLY.value, TaskStatus.CANCELLED.value}
_AGES = ((60, "under_1m"), (3600, "1m_to_1h"), (86400, "1h_to_1d"), (math.inf, "over_1d"))
_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 7 * 86400)


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(_BUCKETS)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.sum += seconds
        self.count += 1
        for i, bound in enumerate(_BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(labels.items())) + "}"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, **labels: str) -> None:
        self.lines.append(f"{name}{_labels(labels)} {_num(value)}")

    def histogram(self, name: str, hist: _Histogram, **labels: str) -> None:
        for bound, n in zip(_BUCKETS, hist.counts, strict=True):
            self.sample(f"{name}_bucket", n, **labels, le=_num(bound))
        self.sample(f"{name}_bucket", hist.count, **labels, le="+Inf")
        self.sample(f"{name}_sum", hist.sum, **labels)
        self.sample(f"{name}_count", hist.count, **labels)


def render(counts: Mapping[str, int], tasks: Iterable[StoredTask], now_ms: int) -> str:
    """The metrics text for ``counts`` (tasks by status) and the rows of ``tasks``."""
    ages: Counter[tuple[str, str]] = Counter()
    oldest: dict[str, float] = {}
    waiting, queue = _Histogram(), _Histogram()
    steps: defaultdict[str, _Histogram] = defaultdict(_Histogram)
    attempts: Counter[tuple[str, str]] = Counter()
    failures: Counter[str] = Counter()
    for t in tasks:
        age = max(0.0, (now_ms - t.updated_at_ms) / 1000)
        if t.status not in _ENDED:
            ages[(t.status, next(label for bound, label in _AGES if age < bound))] += 1
            oldest[t.status] = max(oldest.get(t.status, 0.0), age)
        cur = t.state.get("current") or {}
        if t.status == TaskStatus.AWAITING_APPROVAL.value and isinstance(cur, dict):
            waiting.observe(max(0.0, (now_ms - int(cur.get("started_at_ms") or t.updated_at_ms)) / 1000))
        for a in _attempts(t.state.get("attempts")):
            kind, outcome = str(a.get("kind", "")), str(a.get("outcome", ""))
            attempts[(kind, outcome)] += 1
            if outcome != "passed":
                failures[str(a.get("reason") or "unknown")] += 1
            took = max(0.0, (int(a.get("ended_at_ms") or 0) - int(a.get("started_at_ms") or 0)) / 1000)
            if kind == "human":
                if not str(a.get("actor", "")).startswith("timer:"):
                    queue.observe(took)
            else:
                steps[kind].observe(took)
    out = _Text()
    out.family("statewright_tasks", "gauge", "Tasks in each status.")
    for status in TaskStatus:
        out.sample("statewright_tasks", counts.get(status.value, 0), status=status.value)
    out.family("statewright_tasks_by_age", "gauge", "Tasks that have not ended, by time since their last change.")
    for (name, label), n in sorted(ages.items()):
        out.sample("statewright_tasks_by_age", n, status=name, age=label)
    out.family("statewright_task_oldest_age_seconds", "gauge",
               "The longest a task in this status has gone without a change.")
    for name, seconds in sorted(oldest.items()):
        out.sample("statewright_task_oldest_age_seconds", round(seconds, 3), status=name)
    out.family("statewright_approval_waiting_seconds", "histogram",
               "Tasks waiting for an approval now, by how long they have waited.")
    out.histogram("statewright_approval_waiting_seconds", waiting)
    out.family("statewright_approval_queue_seconds", "histogram",
               "Approvals and rejections given, by how long the task waited for them.")
    out.histogram("statewright_approval_queue_seconds", queue)
    out.family("statewright_step_seconds", "histogram", "Finished attempts of ai, code and wait steps, by duration.")
    for kind, hist in sorted(steps.items()):
        out.histogram("statewright_step_seconds", hist, kind=kind)
    out.family("statewright_attempts_total", "counter", "Step attempts recorded, by step kind and outcome.")
    for (kind, outcome), n in sorted(attempts.items()):
        out.sample("statewright_attempts_total", n, kind=kind, outcome=outcome)
    out.family("statewright_failures_total", "counter", "Failed step attempts, by reason code.")
    for reason, n in sorted(failures.items()):
        out.sample("statewright_failures_total", n, reason=reason)
    return "\n".join(out.lines) + "\n"


def _attempts(value: object) -> Sequence[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [a for a in value if isinstance(a, Mapping)]
