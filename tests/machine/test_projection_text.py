"""A step writes its task's whole projection, but encodes only the records that are new: the
text ``Projection.compact_json()`` makes is the text the plain encoder makes, always."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings

from statewright._canonical import compact_json
from statewright.machine.state import Projection, projection
from strategies import Run, runs


def plain(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_the_projection_writes_the_text_the_plain_encoder_writes(run: Run) -> None:
    """Every state a generated run passes through, in order (so the text of records written
    by earlier steps is reused), and again in reverse."""
    states = [s.after for s in run.steps]
    for state in [*states, *reversed(states)]:
        p = projection(state)
        assert isinstance(p, Projection)
        assert p.compact_json() == plain(p) == compact_json(p)


@given(runs())
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_changed_projection_is_written_as_it_is(run: Run) -> None:
    """A list the projection did not make (here: one record replaced, or the list shortened)
    is encoded as it stands, never from the state's records."""
    state = run.steps[-1].after
    if not state.attempts:
        return
    p = projection(state)
    p.compact_json()  # its records' text is remembered now
    p["attempts"] = [{**p["attempts"][0], "note": "changed ✓"}, *p["attempts"][1:]]
    assert p.compact_json() == plain(p)
    p["attempts"] = p["attempts"][1:]
    assert p.compact_json() == plain(p)
