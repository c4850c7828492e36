"""Task ids start with the submit time, so tasks submitted together sit together in the
store's indexes (a commit of several tasks' steps writes few pages)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine, new_task_id

from .support import code, workflow


def test_ids_sort_by_submit_time_and_differ_within_one_millisecond() -> None:
    times = [0, 1, 999, 1_700_000_000_000, 1_700_000_000_001, 2**43]
    ids = [new_task_id(t) for t in times]
    assert all(re.fullmatch(r"t-[0-9a-f]{19}", i) for i in ids)
    assert ids == sorted(ids)
    same = {new_task_id(1_700_000_000_000) for _ in range(200)}
    assert len(same) == 200 and all(i.startswith("t-18bcfe56800") for i in same)


def test_a_generated_id_that_is_taken_is_drawn_again(
    open_engine: Callable[..., Engine], clock: FakeClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two submits in one millisecond that draw the same random part: the second draws again."""
    engine = open_engine(clock=clock)
    wf = workflow("one", code("a", "record"))
    draws = iter(["t-00000000000aaaaaaaa", "t-00000000000aaaaaaaa", "t-00000000000bbbbbbbb"])
    monkeypatch.setattr("statewright.runtime.engine.new_task_id", lambda now_ms: next(draws))
    assert engine.submit(wf, {}) == "t-00000000000aaaaaaaa"
    assert engine.submit(wf, {}, key="order-7") == "t-00000000000bbbbbbbb"
    assert engine.store.task_by_key("order-7") == "t-00000000000bbbbbbbb"
    assert engine.submit(wf, {}, key="order-7") == "t-00000000000bbbbbbbb"  # the key's task, no new draw


def test_submit_names_tasks_in_submit_order(open_engine: Callable[..., Engine], clock: FakeClock) -> None:
    engine = open_engine(clock=clock)
    wf = workflow("one", code("a", "record"))
    ids = []
    for _ in range(5):
        ids.append(engine.submit(wf, {}))
        clock.advance(1)
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert engine.store.task_ids() == ids
