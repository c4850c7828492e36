"""The checks every outcome passes: ``plain_json`` (verdicts), ``loads_plain`` (verdict
text) and ``screen`` (whole reports). Pure functions, so hostile values are generated."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statewright._canonical import canonical_json
from statewright._jsonsafe import MAX_JSON_DEPTH, clean_text, loads_plain, plain_json
from statewright.machine.events import AttemptReported, CheckReported
from statewright.runtime.screen import (
    MAX_ARTIFACT_CHARS,
    MAX_ARTIFACTS,
    MAX_DETAIL_CHARS,
    MAX_NOTE_CHARS,
    MAX_REASON_CHARS,
    failed_instead,
    screen,
)
from strategies import HOSTILE_JSON, HOSTILE_TEXT


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(name)

    return json.loads(text, parse_constant=refuse)


def _report(**fields: Any) -> AttemptReported:
    base: dict[str, Any] = {"event_id": "t/s/1:result", "at_ms": 1, "command_id": "t/s/1", "step": "s",
                            "attempt": 1, "actor": "agent:python"}
    return AttemptReported(**{**base, **fields})


def _nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = {"a": [value]}
    return value


@settings(max_examples=200, deadline=None)
@given(HOSTILE_JSON)
def test_plain_json_gives_storable_json_or_a_reason(value: Any) -> None:
    """Any value either comes back as a copy that encodes as standard UTF-8 JSON, or is
    refused with a message; it never raises."""
    copy, problem = plain_json(value)
    if problem is None:
        text = canonical_json(copy)
        text.encode("utf-8")
        assert _strict(text) == copy
    else:
        assert problem.message


@settings(max_examples=200, deadline=None)
@given(verdict=HOSTILE_JSON, note=HOSTILE_TEXT, detail=HOSTILE_TEXT, error=HOSTILE_TEXT,
       artifacts=st.dictionaries(HOSTILE_TEXT, HOSTILE_TEXT, max_size=3),
       cost=st.dictionaries(st.sampled_from(["tokens_in", "money_usd"]), st.floats(allow_nan=True), max_size=2))
def test_a_screened_report_always_encodes(
    verdict: Any, note: str, detail: str, error: str, artifacts: dict[str, str], cost: dict[str, float],
) -> None:
    """Whatever an executor put in a report, the screened report encodes as standard UTF-8
    JSON (what the store hashes and writes)."""
    event = _report(verdict={"v": verdict}, note=note, detail=detail, error=error, artifacts=artifacts, cost=cost)
    text = canonical_json(screen(event).wire())
    text.encode("utf-8")
    _strict(text)


def test_deep_and_cyclic_values_are_refused_without_recursion() -> None:
    """100,000 levels and a value that contains itself are refused by a loop, not the stack."""
    assert "nested deeper than" in str(plain_json(_nested(100_000))[1])
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    assert "nested deeper than" in str(plain_json(cycle)[1])
    assert plain_json(_nested(MAX_JSON_DEPTH // 2 - 1))[1] is None


def test_the_copy_holds_exact_builtin_types() -> None:
    """Subclasses (which could change how they encode) come back as plain str, int, dict."""

    class Sneaky(str):
        def __str__(self) -> str:
            return "something else"

    copy, problem = plain_json({Sneaky("k"): [Sneaky("v"), True, 1.5]})
    assert problem is None and copy == {"k": ["v", True, 1.5]}
    assert type(next(iter(copy))) is str and type(copy["k"][0]) is str


def test_verdict_text_is_parsed_strictly() -> None:
    """NaN, Infinity, a lone surrogate escape, deep nesting and 5,000 digits are refused."""
    for text, words in [
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ('{"a": "\\ud800"}', "lone surrogate (U+D800)"),
        ("[" * 5000 + "]" * 5000, "nested deeper than"),
        ("1" * 5000, "more digits"),
        ('{"a": 1', "not valid JSON"),
    ]:
        value, problem = loads_plain(text)
        assert value is None and words in str(problem), text


def test_screen_cuts_texts_and_escapes_lone_surrogates() -> None:
    """Notes, details, artifacts and reason codes are cut to their caps; a lone surrogate
    becomes its escape; the verdict is kept."""
    event = _report(
        verdict={"approved": True}, note="\ud800" + "n" * (3 * MAX_NOTE_CHARS), detail="d" * 10**6,
        error="\udfff" * 1000, artifacts={"a\ud800": "x" * 10**6},
    )
    out = screen(event)
    assert isinstance(out, AttemptReported) and out.ok and out.verdict == {"approved": True}
    assert len(out.note) <= MAX_NOTE_CHARS + 60 and len(out.detail) <= MAX_DETAIL_CHARS + 60
    assert out.error is not None and len(out.error) <= MAX_REASON_CHARS + 60
    [(name, text)] = out.artifacts.items()
    assert name == "a\\ud800" and len(text) <= MAX_ARTIFACT_CHARS + 60


def test_screen_fails_a_report_it_cannot_record() -> None:
    """A verdict that is not plain JSON, too many artifacts, or a NaN cost make the attempt
    a failure with a reason code, and nothing of the bad part is kept."""
    cases = [
        (_report(verdict={"score": math.nan}), "invalid_verdict"),
        (_report(verdict={"s": "v" * 2_000_000}), "output_too_large"),
        (_report(verdict={"approved": True}, artifacts={f"a{i}": "" for i in range(MAX_ARTIFACTS + 1)}),
         "output_too_large"),
        (_report(verdict={"approved": True}, cost={"money_usd": math.inf}), "invalid_output"),
    ]
    for event, reason in cases:
        out = screen(event)
        assert isinstance(out, AttemptReported)
        assert (out.ok, out.error, out.verdict, out.cost) == (False, reason, None, {})


def test_failed_instead_is_the_smallest_failure_of_the_same_command() -> None:
    """An attempt fails with handling_error and keeps nothing of its outcome; a check
    carries the error, so its wait step fails at once."""
    attempt = failed_instead(_report(verdict={"x": 1}, note="n", artifacts={"a": "b"}), "OverflowError: too big")
    assert isinstance(attempt, AttemptReported)
    assert (attempt.ok, attempt.error, attempt.verdict, attempt.note, attempt.artifacts) == (
        False, "handling_error", None, "", {})
    check = CheckReported(event_id="c:result", at_ms=1, command_id="c", step="w", attempt=1, check_number=2)
    failed = failed_instead(check, "boom")
    assert isinstance(failed, CheckReported) and failed.error == "handling_error" and not failed.passed
    assert clean_text("ok \ud800") == "ok \\ud800"
