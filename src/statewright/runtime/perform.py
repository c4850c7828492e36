"""How one claimed command is performed: its executor runs under the attempt's context,
and what it hands back becomes the event that reports it (not yet screened: the worker
screens, redacts and reduces it)."""

from __future__ import annotations

from collections.abc import Callable

from statewright import executors
from statewright.definition.model import Step, StepKind
from statewright.executors.base import ExecContext, Reason
from statewright.machine.events import AttemptReported, CheckReported, Event
from statewright.runtime import workspaces
from statewright.runtime.workspaces import AttemptSpace
from statewright.store.base import Claim


def run(
    claim: Claim, step: Step, ctx: ExecContext, space: AttemptSpace | None, result_id: str,
    now: Callable[[], int],
) -> Event:
    """Perform ``claim`` (a RunStep or RunCheck of ``step``) and report what happened."""
    body = claim.body
    if claim.type == "RunCheck":
        res = executors.run_check(step.check or {}, ctx)
        final = res.reason == Reason.MISSING_REFERENCE  # the state will not change while it waits
        return CheckReported(
            event_id=result_id, at_ms=now(), command_id=claim.command_id, step=step.id,
            attempt=ctx.attempt, check_number=int(body.get("check_number", 1)),
            passed=res.passed, detail=res.detail or (res.reason or ""), output=res.output,
            error=res.reason if final else None, body=res.body,
        )
    if step.kind is StepKind.AI:
        brief = body.get("brief") or {}
        ares = executors.run_agent(step.agent or {}, brief, step.output_schema, ctx)
        kind = str((step.agent or {}).get("type", "agent"))
        artifacts = dict(ares.artifacts)
        error, detail = ares.error, ares.detail
        if error == "no_verdict" and kind != "openai":
            error = "invalid_verdict"  # the reducer grants one repair turn, then fails it
        if space is not None and space.per_attempt:
            artifacts.update(workspace=str(space.path), base_commit=space.base_commit)
            touched = workspaces.protected_touched(space)
            if touched:
                error = "protected_path_modified"
                detail = "the attempt changed protected paths: " + ", ".join(touched)
        return AttemptReported(
            event_id=result_id, at_ms=now(), command_id=claim.command_id, step=step.id,
            attempt=ctx.attempt, actor=f"agent:{kind}", ok=error is None,
            verdict=dict(ares.verdict) if ares.verdict is not None else None,
            error=error, detail=detail, output=detail,
            artifacts=artifacts, cost=ares.cost.to_dict(), note=ares.note,
        )
    cres = executors.run_code(step.run or {}, ctx)
    return AttemptReported(
        event_id=result_id, at_ms=now(), command_id=claim.command_id, step=step.id,
        attempt=ctx.attempt, actor=f"code:{step.id}", ok=cres.ok,
        error=None if cres.ok else (cres.reason or "failed"), output=cres.output,
        detail="" if cres.ok else _last_line(cres.output), artifacts=dict(cres.artifacts),
        cost=cres.cost.to_dict(), result=dict(cres.result) if cres.result is not None else None,
    )


def _last_line(text: str) -> str:
    """The last line the command itself printed (the executor's own ``[statewright: ...]``
    marker says less than the line before it, unless it is all there is)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    own = [ln for ln in lines if not ln.startswith("[statewright:")]
    pick = own or lines
    return pick[-1][:200] if pick else ""
