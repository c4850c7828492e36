"""Every outcome a worker reports passes here before the reducer and the store see it.

An agent does anything its step's process can do, so what an executor hands back is checked
once more, in the one place no executor can go around: ``screen(event)`` returns the event
as it may be recorded, or a failed attempt with a reason code that routes like any failure.

    verdict     plain JSON (``statewright._jsonsafe``): not plain -> ``invalid_verdict``
                (the reducer grants its one repair turn), over MAX_JSON_BYTES ->
                ``output_too_large``
    artifacts   at most MAX_ARTIFACTS (more -> ``output_too_large``), names and texts cut
                to MAX_ARTIFACT_NAME_CHARS / MAX_ARTIFACT_CHARS
    note        cut to MAX_NOTE_CHARS
    output      cut to MAX_OUTPUT_CHARS
    detail      cut to MAX_DETAIL_CHARS; a reason code to MAX_REASON_CHARS
    cost        finite numbers, not negative, within 64 bits (else ``invalid_output``)
    result      a JSON object (else ``invalid_output``), at most the step's result limit
                written as JSON (else ``output_too_large``); the verdict (an ai step's
                result) and a check's JSON ``body`` (part of a wait step's result) are held
                to the same limit, a body failing its check with the same reason codes

Texts are cut keeping their end (where failures are reported), with a marker, as command
output always was, and a lone surrogate in them is written as its escape. ``failed_instead``
builds the smallest failure report for an outcome that still could not be recorded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from statewright._jsonsafe import MAX_JSON_INT, clean_text, plain_json
from statewright.definition.limits import DEFAULT_RESULT_LIMIT_BYTES
from statewright.executors.base import Reason
from statewright.machine._records import replace
from statewright.machine.brief import cut_output
from statewright.machine.events import ArtifactsCaptured, AttemptReported, CheckReported, Event, NotificationSent

MAX_NOTE_CHARS = 20_000  # an agent's note (a command agent's stdout is cut to the same)
MAX_OUTPUT_CHARS = 20_000  # a step's output
MAX_DETAIL_CHARS = 2_000  # why an attempt or a check failed
MAX_REASON_CHARS = 100  # a reason code
MAX_ARTIFACTS = 32  # artifacts one attempt may record
MAX_ARTIFACT_NAME_CHARS = 200
MAX_ARTIFACT_CHARS = 20_000  # each artifact's text
MAX_RESULT_BYTES = DEFAULT_RESULT_LIMIT_BYTES  # a step's result, unless it sets result_limit


def screen(event: Event, result_limit_bytes: int = MAX_RESULT_BYTES) -> Event:
    """``event`` as it may be recorded: an AttemptReported or CheckReported with its texts
    made storable and cut, or, when its data cannot be recorded, a failed attempt (check).
    ``result_limit_bytes`` bounds the step's result (its verdict, output or check body)."""
    if isinstance(event, CheckReported):
        return _screen_check(event, result_limit_bytes)
    if isinstance(event, ArtifactsCaptured):
        return replace(event, detail=_text(event.detail, MAX_DETAIL_CHARS))
    if not isinstance(event, AttemptReported):
        return event
    texts: dict[str, Any] = {
        "detail": _text(event.detail, MAX_DETAIL_CHARS),
        "output": _text(event.output, MAX_OUTPUT_CHARS),
        "note": _text(event.note, MAX_NOTE_CHARS),
        "error": None if event.error is None else _text(event.error, MAX_REASON_CHARS),
        "actor": _text(event.actor, MAX_REASON_CHARS),
    }
    verdict = None
    if event.verdict is not None:
        verdict, unsafe = plain_json(event.verdict, max_bytes=result_limit_bytes)
        if unsafe is not None:
            reason = Reason.OUTPUT_TOO_LARGE if unsafe.too_large else Reason.INVALID_VERDICT
            return _failed(event, texts, reason, f"the verdict is {unsafe.message}")
    result = None
    if event.result is not None:
        if not isinstance(event.result, Mapping):
            why = f"the output must be a JSON object; got {type(event.result).__name__}"
            return _failed(event, texts, Reason.INVALID_OUTPUT, why)
        result, unsafe = plain_json(event.result, max_bytes=result_limit_bytes)
        if unsafe is not None:
            reason = Reason.OUTPUT_TOO_LARGE if unsafe.too_large else Reason.INVALID_OUTPUT
            return _failed(event, texts, reason, f"the output is {unsafe.message}")
    artifacts, problem = _artifacts(event.artifacts)
    if problem is not None:
        return _failed(event, texts, Reason.OUTPUT_TOO_LARGE, problem)
    cost, problem = _cost(event.cost)
    if problem is not None:
        return _failed(event, {**texts, "artifacts": artifacts}, Reason.INVALID_OUTPUT, problem)
    if (event.verdict is None and event.result is None and artifacts == event.artifacts and cost == event.cost
            and all(texts[name] is getattr(event, name) for name in texts)):
        return event  # nothing to change (a code step's report, usually)
    return replace(event, verdict=verdict, result=result, artifacts=artifacts, cost=cost, **texts)


def _screen_check(event: CheckReported, result_limit_bytes: int) -> CheckReported:
    texts = {"detail": _text(event.detail, MAX_DETAIL_CHARS), "output": _text(event.output, MAX_OUTPUT_CHARS),
             "error": None if event.error is None else _text(event.error, MAX_REASON_CHARS)}
    if event.body is None:
        return replace(event, **texts)
    body, unsafe = plain_json(event.body, max_bytes=result_limit_bytes)
    if unsafe is None:
        return replace(event, body=body, **texts)
    reason = Reason.OUTPUT_TOO_LARGE if unsafe.too_large else Reason.INVALID_OUTPUT
    why = _text(f"the check's answer is {unsafe.message}", MAX_DETAIL_CHARS)
    return replace(event, passed=False, body=None, error=reason.value, detail=why, output=texts["output"])


def failed_instead(event: Event, detail: str, reason: Reason = Reason.HANDLING_ERROR) -> Event | None:
    """The smallest report of the same attempt (or check) failing with ``reason``
    (``handling_error``: the outcome was made, and not recorded): no verdict, no artifacts,
    no note. None for an event that reports no step's work."""
    if reason is Reason.HANDLING_ERROR:
        detail = f"{detail}; the outcome was not recorded"
    detail = _text(detail, MAX_DETAIL_CHARS)
    if isinstance(event, AttemptReported):
        return AttemptReported(
            event_id=event.event_id, at_ms=event.at_ms, command_id=event.command_id, step=event.step,
            attempt=event.attempt, actor=_text(event.actor, MAX_REASON_CHARS), ok=False,
            error=reason.value, detail=detail, output=detail,
        )
    if isinstance(event, CheckReported):
        return CheckReported(
            event_id=event.event_id, at_ms=event.at_ms, command_id=event.command_id, step=event.step,
            attempt=event.attempt, check_number=event.check_number, passed=False, detail=detail,
            error=reason.value,
        )
    if isinstance(event, ArtifactsCaptured):
        return ArtifactsCaptured(
            event_id=event.event_id, at_ms=event.at_ms, command_id=event.command_id, step=event.step,
            attempt=event.attempt, error=reason.value, detail=detail,
        )
    return None


def failed_command(
    command_type: str, command_id: str, body: Mapping[str, Any], at_ms: int, actor: str, detail: str,
    reason: Reason = Reason.HANDLING_ERROR,
) -> Event:
    """``failed_instead`` for a command whose outcome was never made: its attempt (or, for
    a RunCheck, its check) failing with ``reason``."""
    common: dict[str, Any] = {
        "event_id": f"{command_id}:result", "at_ms": at_ms, "command_id": command_id,
        "step": str(body.get("step", "")), "attempt": _whole(body.get("attempt")),
    }
    event: Event
    if command_type == "RunCheck":
        event = CheckReported(**common, check_number=_whole(body.get("check_number")))
    elif command_type == "CaptureArtifacts":
        event = ArtifactsCaptured(**common)
    elif command_type == "Notify":  # given up: a notification never fails its task
        return NotificationSent(**common, event=str(body.get("event", "")), delivered=False, error=reason.value,
                                idempotency_key=str(body.get("idempotency_key") or command_id),
                                detail=_text(detail, MAX_DETAIL_CHARS))
    else:
        event = AttemptReported(**common, actor=actor)
    failed = failed_instead(event, detail, reason)
    return event if failed is None else failed


def describe(exc: BaseException) -> str:
    """One storable line about an exception: its type and the start of its message."""
    text = " ".join(str(exc).split())
    return _text(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, 300)


def _failed(event: AttemptReported, texts: Mapping[str, Any], reason: Reason, why: str) -> Event:
    fields = {"artifacts": {}, **texts, "error": reason.value, "detail": _text(why, MAX_DETAIL_CHARS)}
    return replace(event, ok=False, verdict=None, result=None, cost={}, **fields)


def _artifacts(raw: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    if not isinstance(raw, Mapping):
        return {}, f"artifacts must map names to texts; got {type(raw).__name__}"
    if len(raw) > MAX_ARTIFACTS:
        return {}, f"the attempt has {len(raw)} artifacts; at most {MAX_ARTIFACTS} are kept"
    out: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not isinstance(value, str):
            return {}, "artifacts must map names to texts"
        out[_text(name, MAX_ARTIFACT_NAME_CHARS)] = _text(value, MAX_ARTIFACT_CHARS)
    return out, None


def _cost(raw: Mapping[str, float]) -> tuple[dict[str, float], str | None]:
    if not isinstance(raw, Mapping):
        return {}, f"the cost must map names to numbers; got {type(raw).__name__}"
    out: dict[str, float] = {}
    for name, value in raw.items():
        if (not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or not 0 <= value <= MAX_JSON_INT):
            shown = _text(repr(value), 40)
            return {}, f"the cost holds {shown}; costs are finite numbers from 0 up"
        out[_text(name, MAX_REASON_CHARS)] = value
    return out, None


def _whole(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _text(value: object, limit: int) -> str:
    if type(value) is str and len(value) <= limit and value.isascii():
        return value  # the common case, at once
    text = value if isinstance(value, str) else str(value)
    return cut_output(clean_text(str.__str__(text)), limit)
