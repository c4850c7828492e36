"""Replay every task's log through the reducer; compare with the stored projection and
check the hash chain."""

from __future__ import annotations

from dataclasses import dataclass

from statewright._canonical import canonical_json
from statewright._errors import StatewrightError
from statewright.machine.events import event_from_dict
from statewright.machine.state import new_task
from statewright.machine.task import transition
from statewright.runtime.engine import Engine
from statewright.store.sql import GENESIS_HASH, chain_hash


@dataclass(frozen=True)
class Finding:
    task_id: str
    problem: str


# What a hand-edited row can make reading or replaying it raise.
_DAMAGED = (StatewrightError, ValueError, TypeError, KeyError)


def verify_task(engine: Engine, task_id: str) -> list[Finding]:
    try:
        stored = engine.store.load(task_id)
    except ValueError as exc:
        return [Finding(task_id, f"the stored projection is not readable: {exc}")]
    if stored is None:
        return [Finding(task_id, "task row missing")]
    out: list[Finding] = []
    prev = GENESIS_HASH
    rows = engine.store.raw_events(task_id)
    for i, (version, body, prev_hash, h) in enumerate(rows, start=1):
        if version != i:
            out.append(Finding(task_id, f"event versions jump to {version} at position {i}"))
            break
        if prev_hash != prev or chain_hash(prev, version, body) != h:
            out.append(Finding(task_id, f"hash chain broken at event version {version}"))
            break
        prev = h
    try:
        wf = engine.workflow(stored.workflow_hash)
        if wf.content_hash != stored.workflow_hash:
            out.append(Finding(task_id, f"stored definition {stored.workflow_hash[:12]} does not match its hash"))
        state = new_task(task_id, wf)
        for r in engine.store.events(task_id):
            state, _ = transition(state, event_from_dict(r.body))
    except _DAMAGED as exc:
        out.append(Finding(task_id, f"replay failed: {exc}"))
        return out
    if canonical_json(state.to_dict()) != canonical_json(stored.state):
        out.append(Finding(task_id, "replayed state differs from the stored projection"))
    if state.version != stored.version:
        out.append(Finding(task_id, f"stored version {stored.version}, replayed {state.version}"))
    if stored.status != state.status.value:
        out.append(Finding(task_id, f"stored status {stored.status!r}, replayed {state.status.value!r}"))
    return out


def verify_all(engine: Engine) -> tuple[int, list[Finding]]:
    ids = engine.store.task_ids()
    findings: list[Finding] = []
    for tid in ids:
        findings.extend(verify_task(engine, tid))
    return len(ids), findings
