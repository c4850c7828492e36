"""JSON forms of the loop state, events, commands and record lines (for the store), made
with the machine's one record codec (``machine._records.record_dict``).

``state_from_dict(state_to_dict(s)) == s`` for every state the reducer can make.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from statewright.machine._records import record_dict
from statewright.machine.loop.events import Command, Event
from statewright.machine.loop.model import (
    LEGACY_VERDICTS,
    CheckOutcome,
    CheckResult,
    ItemLedger,
    ItemStatus,
    LineKind,
    LoopConfig,
    LoopState,
    LoopStatus,
    Pass,
    RecordLine,
    Verdict,
)


def line_body(event: Event, line: RecordLine, commands: Sequence[Command],
              extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The stored body of one line of a run's record: the event, the line, the commands it
    asked for, and what the line wrote down (``extra``: an ItemsFound's payloads, a pass record)."""
    return {**dict(extra or {}), **event_to_dict(event), "line": line_to_dict(line),
            "commands": [command_to_dict(c) for c in commands]}


def run_projection(state: LoopState, meta: Mapping[str, Any], lines: int) -> dict[str, Any]:
    """A run's projection in the store: its state, its bookkeeping (``meta``) and its line count."""
    return {"status": str(state.status), "loop": state.config.loop, "state": state_to_dict(state),
            "meta": dict(meta), "lines": lines}


def dumps(value: object) -> str:
    """Canonical JSON: sorted keys, no NaN, UTF-8 text."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)


# Fields later than the first runs, written only when they say something, so that a run
# stored before they existed still replays to its stored projection.
_UNSAID_WHEN_DEFAULT = {"asleep": False, "authors": [], "returned": False}  # of a pass
_CONFIG_UNSAID_WHEN_DEFAULT = {"parallel": 1, "pass_tokens": None, "pass_money_usd": None}
_STATE_UNSAID_WHEN_DEFAULT: dict[str, object] = {"more": []}


def state_to_dict(state: LoopState) -> dict[str, Any]:
    """The state as JSON; fields added since the first runs only when they say something."""
    out = _plain_dict(record_dict(state))
    _drop_defaults(out, _STATE_UNSAID_WHEN_DEFAULT)
    _drop_defaults(out["config"], _CONFIG_UNSAID_WHEN_DEFAULT)
    for one in (out.get("current"), *out.get("more", ())):
        if isinstance(one, dict):
            _drop_defaults(one, _UNSAID_WHEN_DEFAULT)
    return out


def _drop_defaults(d: dict[str, Any], defaults: Mapping[str, object]) -> None:
    for key, default in defaults.items():
        if key in d and d[key] == default:
            del d[key]


def state_from_dict(d: Mapping[str, Any]) -> LoopState:
    cfg = dict(d["config"])
    for key in ("check_names", "oracle_names"):
        cfg[key] = tuple(cfg[key])
    current = d.get("current")
    return LoopState(
        run_id=d["run_id"],
        config=LoopConfig(**cfg),
        status=LoopStatus(d["status"]),
        items=tuple(_item(i) for i in d.get("items", ())),
        plan=tuple(d.get("plan", ())),
        current=None if current is None else _pass(current),
        more=tuple(_pass(p) for p in d.get("more", ())),
        passes=d.get("passes", 0),
        records=d.get("records", 0),
        passes_since_last_close=d.get("passes_since_last_close", 0),
        tokens_spent=d.get("tokens_spent", 0),
        money_spent_usd=d.get("money_spent_usd", 0.0),
        started_at_ms=d.get("started_at_ms"),
        restarts_here=d.get("restarts_here", 0),
        clean_stop=d.get("clean_stop", False),
        recent_failures=tuple(d.get("recent_failures", ())),
        reason=d.get("reason", ""),
        cleared_by=d.get("cleared_by", ""),
        cleared_reason=d.get("cleared_reason", ""),
    )


def item_to_dict(item: ItemLedger) -> dict[str, Any]:
    return _plain_dict(record_dict(item))


def _item(d: Mapping[str, Any]) -> ItemLedger:
    return ItemLedger(
        id=d["id"],
        status=ItemStatus(d.get("status", "open")),
        attempts=d.get("attempts", 0),
        last_failure=d.get("last_failure", ""),
        reopened_after=d.get("reopened_after", 0),
    )


def check_from_dict(d: Mapping[str, Any]) -> CheckResult:
    return CheckResult(d["name"], CheckOutcome(d["outcome"]), d.get("output", ""))


def _pass(d: Mapping[str, Any]) -> Pass:
    verdict = d.get("verdict")
    return Pass(
        item=d["item"],
        attempt=d["attempt"],
        brief=d.get("brief", ""),
        launched=d.get("launched", False),
        note=d.get("note", ""),
        artifacts=tuple(d.get("artifacts", ())),
        receipts=tuple(d.get("receipts", ())),
        tokens=d.get("tokens", 0),
        money_usd=d.get("money_usd", 0.0),
        checks=tuple(check_from_dict(c) for c in d.get("checks", ())),
        proposal_hash=d.get("proposal_hash", ""),
        shown=dict(d.get("shown", {})),
        gate_started_at_ms=d.get("gate_started_at_ms"),
        verdict=None if verdict is None else Verdict(verdict),
        cause=d.get("cause", ""),
        decided_by=d.get("decided_by", ""),
        task_id=d.get("task_id", ""),
        asleep=d.get("asleep", False),
        authors=tuple(d.get("authors", ())),
        returned=d.get("returned", False),
    )


def event_to_dict(event: Event) -> dict[str, Any]:
    return {"type": event.type, **_plain(record_dict(event))}


def command_to_dict(command: Command) -> dict[str, Any]:
    return {"type": command.type, **_plain(record_dict(command))}


def line_to_dict(line: RecordLine) -> dict[str, Any]:
    return _plain_dict(record_dict(line))


def line_from_dict(d: Mapping[str, Any]) -> RecordLine:
    return RecordLine(
        state=LoopStatus(d["state"]),
        event=d["event"],
        written=dict(d["written"]),
        summary=d["summary"],
        next_state=LoopStatus(d["next_state"]),
        kind=LineKind(d["kind"]),
        event_type=d["event_type"],
        at_ms=d["at_ms"],
    )


#: The words a run recorded before the one casing wrote where today's lower-case ones go:
#: the state names, and the verdicts PASS and FAIL (its other verdicts were phrases).
_UPPER_WORDS = re.compile(r"\b(?:" + "|".join(s.name for s in LoopStatus) + r"|PASS|FAIL)\b")


def recased(text: str) -> str:
    """``text`` as a run stored it, in today's casing: upper-case state names and verdicts in
    lower case, an old verdict phrase (``no result``, alone or quoted) as its value."""
    legacy = LEGACY_VERDICTS.get(text)
    if legacy is not None:
        return str(legacy)
    return _UPPER_WORDS.sub(lambda m: m.group(0).lower(), text).replace('"no result"', str(Verdict.NO_RESULT))


def casing_blind(value: Any) -> Any:
    """A stored JSON value with every string :func:`recased`. Runs recorded before the one
    casing still replay to what they stored, but in today's words: compare both sides through
    this, never rewrite the stored side (the hash chain covers it)."""
    if isinstance(value, str):
        return recased(value)
    if isinstance(value, Mapping):
        return {str(k): casing_blind(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [casing_blind(v) for v in value]
    return value


def _plain_dict(value: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): _plain(v) for k, v in value.items()}


def _plain(value: Any) -> Any:
    """Tuples to lists, enums to their strings, mappings to dicts: JSON-ready."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
