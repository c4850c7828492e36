"""The engine applies events: load the projection, run the pure reducer, and write the
event, the new projection and the commands in one store transaction."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from statewright._errors import (
    ApprovalError,
    DefinitionError,
    IllegalEventError,
    InputError,
    KeyReusedError,
    PermissionDeniedError,
    Refusal,
    StaleLeaseError,
    TaskNotFoundError,
    TaskStateError,
    VersionConflictError,
)
from statewright._json_limits import check_json_value
from statewright._names import AGENT_ROLE, OPERATOR_ROLE, is_agent_identity
from statewright._record import record
from statewright.definition.fleet import check_priority, check_tenant, is_tenant
from statewright.definition.loader import load_workflow, workflow_from_dict
from statewright.definition.model import Workflow
from statewright.machine._records import replace
from statewright.machine.children import ParentRef
from statewright.machine.commands import Command, RequestApproval
from statewright.machine.events import (
    ApprovalGranted,
    ApprovalRejected,
    Event,
    EvidenceAdded,
    TaskCancelled,
    TaskRetried,
    TaskSubmitted,
    event_from_dict,
)
from statewright.machine.paths import RefError, parse_ref, resolve
from statewright.machine.seam import RUN_STREAM_PREFIX, StreamKind
from statewright.machine.state import TaskState, TaskStatus, new_task, projection
from statewright.machine.task import transition
from statewright.runtime import inputs, workspaces
from statewright.runtime.children import Unit, spans_tasks
from statewright.runtime.clock import Clock, SystemClock
from statewright.runtime.outbox import remote_closed, to_new_commands
from statewright.runtime.users import Principal, Users
from statewright.store import AppendRequest, Store, open_store
from statewright.store.base import Claim, StoredTask, Wake

log = logging.getLogger("statewright.worker")
_CONFLICT_RETRIES = 8
_UNIT_STATES_MAX = 1_000  # states remembered from multi-task commits (then forgotten at once)
_PROPOSAL_HASH = re.compile(r"[0-9a-f]{64}")


@record
class Applied:
    """What applying one event gave: the task's new state, its commands, and the command it claimed."""

    state: TaskState
    commands: Sequence[Command]
    claimed: Claim | None = None
    duplicate: bool = False


@record
class Report:
    """One event for ``Engine.apply_many``: ``state`` is the task's state it applies to, and
    ``complete`` the (command id, fencing token) of the command it reports on."""

    task_id: str
    event: Event
    state: TaskState
    complete: tuple[str, int] | None = None
    reduced: tuple[TaskState, Sequence[Command], AppendRequest] | None = None  # see Engine.reduce


class Holder(Protocol):
    """A worker in this process that will run a task's next step at once (``Worker``): the
    commit of a submit or an approval given one claims that step for it, so the step starts
    with no claim of its own (one write commit fewer). What it holds and does not run is
    claimed by any worker once the lease runs out."""

    def claim_for(self) -> tuple[str, int]: ...

    def hold(self, task_id: str, claim: Claim, state: TaskState) -> None: ...


def _random_hex(n: int) -> str:
    """``n`` random hex digits from ``os.urandom``, as the leading digits of a uuid4 are
    (not uuid itself: importing it, and the platform module it pulls in, is a noticeable
    part of a new process's first task)."""
    return os.urandom((n + 1) // 2).hex()[:n]


def _why_not(st: TaskState, act: str, rule: str) -> str:
    """Why an operator's or approver's act does not apply to ``st``, in the user's words:
    "task T was cancelled by ops at 2026-12-01 10:42 UTC; a cancelled task cannot be retried
    (submit it again)"."""
    from statewright._time import when

    tid = st.task_id
    if st.status is TaskStatus.CANCELLED:
        last = next((o for o in reversed(st.operator_actions) if o.action == "cancel"), None)
        by = f" by {last.actor} at {when(last.at_ms)} ({last.reason})" if last else ""
        again = " (submit it again)" if act == "retried" else ""
        return f"task {tid} was cancelled{by}; a cancelled task cannot be {act}{again}"
    if st.status in (TaskStatus.COMPLETED, TaskStatus.COMPLETED_EARLY):
        early = " early" if st.status is TaskStatus.COMPLETED_EARLY else ""
        return f"task {tid} completed{early} at {when(st.updated_at_ms)}; a completed task cannot be {act}"
    where = f" at {st.current.step!r}" if st.current else ""
    return f"task {tid} is {st.status.value.replace('_', ' ')}{where}; {rule}"


def _no_agent(who: Principal, act: str) -> None:
    """An agent identity (one holding the ``agent`` role, for any queue) never approves or rejects."""
    if is_agent_identity(who.roles):
        raise PermissionDeniedError(f"{who.name!r} is an agent identity (role {AGENT_ROLE!r}) and may never {act}")


def new_task_id(now_ms: int) -> str:
    """``t-``, the submit time (milliseconds, 11 hex digits) and 8 random hex digits. Tasks
    submitted close together sort together in every index keyed by task id, so a commit of
    several tasks' steps writes a few pages, not a few pages per task."""
    return f"t-{max(0, now_ms):011x}{_random_hex(8)}"


def announce(task_id: str, commands: Sequence[Command]) -> None:
    """Log that a committed transition left the task waiting for a person."""
    for c in commands:
        if isinstance(c, RequestApproval):
            log.info("task %s waits for approval at %s (role %s, proposal %s)", task_id, c.step, c.role,
                     c.proposal_hash)


class Engine:
    def __init__(
        self, store: Store, *, clock: Clock | None = None, workspace_root: Path | None = None,
    ) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()
        local = not store.url.startswith(("postgres", "memory:"))
        db_dir = Path(store.url).parent if local else Path(".statewright")
        self.workspace_root = workspace_root or db_dir / "workspaces"
        self.users = Users(store, self.clock)
        self._defs: dict[str, Workflow] = {}
        # The states the last multi-task commits left (a map step's parent, mostly): the next
        # child's end starts from it instead of reading and parsing the parent again.
        self._unit_states: dict[str, TaskState] = {}

    @classmethod
    def open(cls, db: str | Path | None = None, **kwargs: Any) -> Engine:
        return cls(open_store(db), **kwargs)

    def close(self) -> None:
        self.store.close()

    # --- definitions -------------------------------------------------------------------
    def register(self, workflow: Workflow) -> None:
        """Store a workflow's definition (and those of the child workflows its map steps
        read from files), so any worker can load it by content hash."""
        for child in workflow.children.values():
            self.register(child)
        if workflow.content_hash not in self._defs:
            self.store.put_definition(
                workflow.content_hash, workflow.name, workflow.version, workflow.raw
            )
            self._defs[workflow.content_hash] = workflow

    def workflow(self, content_hash: str) -> Workflow:
        wf = self._defs.get(content_hash)
        if wf is None:
            body = self.store.get_definition(content_hash)
            if body is None:
                raise DefinitionError([f"definition {content_hash[:12]} is not stored"], self.store.url)
            wf = workflow_from_dict(body, f"stored:{content_hash[:12]}")
            self._defs[content_hash] = wf
        return wf

    def child_workflow(self, content_hash: str, name: str) -> Workflow:
        """A map step's child workflow: pinned by ``content_hash``, or else the highest
        version stored under ``name``."""
        if content_hash:
            return self.workflow(content_hash)
        found = self.store.definition_by_name(name)
        if found is None:
            msg = f"no workflow named {name!r} is registered here; submit or register it first, or name its file"
            raise DefinitionError([msg], self.store.url)
        return self.workflow(found)

    def check_children(self, workflow: Workflow, stack: tuple[str, ...] = ()) -> None:
        """Refuse (DefinitionError, one line) a workflow whose map steps name a workflow that
        is not registered, a file that was not read with it, or each other in a cycle."""
        from statewright.definition.maps import is_file_ref, map_steps

        chain = (*stack, workflow.name)
        for step in map_steps(workflow):
            spec = step.map
            if spec is None:
                continue
            where = f"workflow {workflow.name!r}, map step {step.id!r}"
            if not spec.workflow_hash and is_file_ref(spec.workflow):
                msg = (f"{where} names the file {spec.workflow!r}, which was not read with it; load the "
                       "workflow from its file (statewright.load_workflow) so its children are read")
                raise DefinitionError([msg], workflow.source)
            try:
                child = self.child_workflow(spec.workflow_hash, spec.workflow)
            except DefinitionError as exc:
                raise DefinitionError([f"{where}: {exc.problems[0]}"], workflow.source) from None
            if child.name in chain:
                cycle = " -> ".join((*chain[chain.index(child.name):], child.name))
                raise DefinitionError([f"{where}: workflows map each other in a cycle: {cycle}"], workflow.source)
            self.check_children(child, chain)

    # --- tasks -------------------------------------------------------------------------
    def submit(
        self,
        workflow: Workflow | str | Path,
        input: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        task_id: str | None = None,
        priority: int = 0,
        tenant: str | None = None,
        hold_for: Holder | None = None,
        parent: ParentRef | None = None,
    ) -> str:
        """Start a task; with ``key``, submitting the same again returns the same task id, and
        the key given with other input or another workflow is refused (KeyReusedError).
        ``priority`` (higher first, -1000..1000) and ``tenant`` (else the one the workflow's
        ``tenant:`` reference finds in the input) hold for all its steps; a child task takes
        its parent's. With ``hold_for``, the first step is claimed for that worker in the same
        commit. With ``parent`` (a loop run's pass), the task is that stream's child: its end
        is written to the parent in the same commit as the task's last event."""
        wf = workflow if isinstance(workflow, Workflow) else load_workflow(workflow)
        if input is not None and not isinstance(input, Mapping):
            raise InputError(f"input must be a mapping (a JSON object), got {type(input).__name__}")
        given = inputs.task_input(wf, input)
        if key is not None:
            existing = self.store.task_by_key(key)
            if existing is not None:
                return self._same_submission(existing, key, wf, given)
        priority, tenant = self._schedule(wf, given, priority, tenant)
        data = workspaces.pin_base(wf, given)  # the protected paths' baseline, fixed now
        self.register(wf)
        if any(st.map is not None for st in wf.steps):
            self.check_children(wf)
        now = self.clock.now_ms()
        for attempt in range(_CONFLICT_RETRIES):
            tid = task_id or new_task_id(now)
            ev = TaskSubmitted(event_id=f"{tid}:submitted", at_ms=now, input=data, priority=priority, tenant=tenant,
                               parent=parent.as_dict() if parent is not None else None)
            new, cmds = transition(new_task(tid, wf), ev)
            try:
                if spans_tasks(cmds) or parent is not None:  # children started, a parent recorded: one commit
                    unit = Unit(self, now)
                    unit.add(None, ev, new, cmds, workflow=wf.name, workflow_hash=wf.content_hash, idem_key=key,
                             parent_id=parent.task_id if parent is not None else None)
                    res = self.store.append_all(unit.run().requests)[0]
                    self._announce(unit)
                else:
                    res = self.store.append(
                        tid, 0, ev.wire(), projection(new), to_new_commands(cmds, now, new),
                        workflow=wf.name, workflow_hash=wf.content_hash, idem_key=key,
                        claim_for=hold_for.claim_for() if hold_for is not None else None,
                    )
            except VersionConflictError:
                existing = self.store.task_by_key(key) if key is not None else None
                if existing is not None and key is not None:
                    return self._same_submission(existing, key, wf, given)
                if task_id is not None or attempt == _CONFLICT_RETRIES - 1:
                    raise
                continue  # a generated id that is taken (the same millisecond, the same 32 bits)
            if not res.duplicate:
                announce(tid, cmds)
                if hold_for is not None and res.claimed is not None:
                    hold_for.hold(tid, res.claimed, new)
                return tid
            existing = self.store.task_by_key(key) if key is not None else None
            if existing is not None and key is not None:
                return self._same_submission(existing, key, wf, given)  # submitted before under this key
            if task_id is None:
                continue  # a generated id that is taken: never join another submit's task
            return tid  # the caller's own task id, submitted before
        raise VersionConflictError(task_id or "t-?", 0, 1)

    @staticmethod
    def _announce(unit: Unit) -> None:
        for tid, cmds in unit.commands[1:]:
            announce(tid, cmds)

    def loop_parent(self, parent_id: str) -> StoredTask | None:
        """The stored loop run ``parent_id`` names (a child task runs one of its passes), or
        None when the parent is a task."""
        if not parent_id.startswith(RUN_STREAM_PREFIX) or parent_id in self._unit_states:
            return None
        row = self.store.load(parent_id)
        return row if row is not None and row.kind == str(StreamKind.LOOP_RUN) else None

    def unit_state(self, task_id: str) -> TaskState:
        """A task's state for a multi-task commit: the one a committed unit left, else read."""
        known = self._unit_states.get(task_id)
        return known if known is not None else self.state(task_id)

    def _commit_unit(self, unit: Unit) -> Any:
        """Write a unit (``Store.append_all``) and remember the states it left; a refused
        one forgets them, so the retry reads them again."""
        try:
            res = self.store.append_all(unit.run().requests)[0]
        except BaseException:
            for tid in unit.states:
                self._unit_states.pop(tid, None)
            raise
        if len(self._unit_states) > _UNIT_STATES_MAX:
            self._unit_states.clear()
        if not res.duplicate:  # never over a newer state another thread's unit left
            self._unit_states.update((tid, st) for tid, st in unit.states.items() if not st.terminal
                                     and st.version >= getattr(self._unit_states.get(tid), "version", -1))
            for tid, st in unit.states.items():
                if st.terminal:
                    self._unit_states.pop(tid, None)
            self._announce(unit)
        return res

    def _schedule(self, wf: Workflow, given: Mapping[str, Any], priority: object, tenant: object) -> tuple[int, str]:
        """The checked priority and tenant of a new task; InputError names what is wrong."""
        try:
            prio = check_priority(priority)
            if tenant is None and wf.tenant_ref is not None:
                try:
                    found = resolve(parse_ref(wf.tenant_ref), given, {})
                except RefError as exc:
                    msg = f"workflow {wf.name!r} reads the tenant from {exc}; give it in the input or pass a tenant"
                    raise ValueError(msg) from None
                if not is_tenant(found):
                    msg = (f"workflow {wf.name!r} reads the tenant from {wf.tenant_ref}, which holds {found!r}, "
                           "not a tenant name")
                    raise ValueError(msg)
                tenant = found
            name = check_tenant(tenant) if tenant is not None else ""
        except ValueError as exc:
            raise InputError(str(exc)) from None
        named = {n for s in wf.steps for n in s.limits}
        if named:
            unknown = sorted(named - set(self.store.fleet().limits))
            if unknown:
                step = next(s.id for s in wf.steps if unknown[0] in s.limits)
                msg = (f"workflow {wf.name!r} step {step!r} draws on limit {unknown[0]!r}, which the fleet config "
                       f"of {self.store.url} does not name; add it to a fleet file and run "
                       "'statewright limits apply FILE'")
                raise InputError(msg)
        return prio, name

    def _same_submission(self, task_id: str, key: str, wf: Workflow, given: Mapping[str, Any]) -> str:
        """``task_id``, submitted under ``key`` before, when it is this submission again;
        KeyReusedError when the workflow or the input differ. The ``base_commit`` a repo's
        HEAD was pinned to counts only when the caller gave one."""
        stored = self.store.load(task_id)
        if stored is None:
            raise TaskNotFoundError(task_id)
        before = dict(stored.state.get("input") or {})
        if "base_commit" not in given:
            before.pop("base_commit", None)
        if stored.workflow_hash != wf.content_hash:
            why = (f"workflow {stored.workflow!r} ({stored.workflow_hash[:12]}), "
                   f"not {wf.name!r} ({wf.content_hash[:12]})")
        elif before != dict(given):
            why = "other input"
        else:
            return task_id
        msg = (f"key {key!r} already names task {task_id}, submitted with {why}; "
               "a repeat must be the same submission (use a new key for new work)")
        raise KeyReusedError(msg, key=key, task_id=task_id)

    def states(self, task_ids: Sequence[str]) -> dict[str, TaskState]:
        """The states of the tasks that exist among ``task_ids``, read in one query."""
        return {
            tid: TaskState.from_dict(stored.state, self.workflow(stored.workflow_hash))
            for tid, stored in self.store.load_many(task_ids).items()
        }

    def state(self, task_id: str) -> TaskState:
        stored = self.store.load(task_id)
        if stored is None:
            raise TaskNotFoundError(task_id)
        return TaskState.from_dict(stored.state, self.workflow(stored.workflow_hash))

    def apply(
        self,
        task_id: str,
        event: Event,
        *,
        complete: tuple[str, int] | None = None,
        complete_timer: tuple[str, int] | None = None,
        claim_for: tuple[str, int] | None = None,
        state: TaskState | None = None,
    ) -> Applied:
        """Apply one event; retries on a lost version race; a duplicate event id returns
        the recorded result. Raises IllegalEventError (state unchanged) when refused."""
        refused_on_cache = False
        for attempt in range(_CONFLICT_RETRIES * 8):  # a parent with many children ending is contended
            st = state if (state is not None and attempt == 0) else self.state(task_id)
            try:
                new, cmds = transition(st, event)
            except IllegalEventError:
                if self.store.has_event(event.event_id):
                    return Applied(st, [], duplicate=True)
                raise
            now = self.clock.now_ms()
            try:
                if spans_tasks(cmds):  # children started or cancelled, or a parent told: one commit
                    unit = Unit(self, now, fresh=refused_on_cache)
                    unit.add(st, event, new, cmds, complete=complete, complete_timer=complete_timer,
                             claim_for=claim_for)
                    try:
                        res = self._commit_unit(unit)
                    except IllegalEventError:
                        # Another task of the unit (a parent told of its child's end) refused its
                        # part on the state this process's last unit left it in, which another
                        # process may have moved on since: judge it once more on states read now
                        # (the refused unit's are forgotten), before the refusal stands.
                        if refused_on_cache:
                            raise
                        refused_on_cache = True
                        continue
                else:
                    res = self.store.append(
                        task_id, st.version, event.wire(), projection(new), to_new_commands(cmds, now, new),
                        complete=complete, complete_timer=complete_timer, terminal=new.terminal,
                        claim_for=claim_for, complete_remote=remote_closed(st, new),
                    )
            except VersionConflictError:
                continue
            if res.duplicate:
                return Applied(self.state(task_id), [], duplicate=True)
            announce(task_id, cmds)
            return Applied(new, cmds, claimed=res.claimed)
        raise VersionConflictError(task_id, -1, -1)

    def apply_many(
        self, reports: Sequence[Report], *, claim_for: tuple[str, int] | None = None, wake: Wake | None = None
    ) -> list[Applied | IllegalEventError | StaleLeaseError]:
        """Apply several tasks' events in ONE commit (group commit): each is reduced from
        the state it names and all are appended together, each claiming its task's next
        command for ``claim_for``. When any one is refused the store writes none of them,
        and each is then applied on its own, as ``apply`` does, so one refusal (returned in
        its place) costs the others nothing. ``wake`` (the slots of claims under limits that
        ended) is done in the same commit, or after the appends made one by one."""
        if len(reports) > 1 or (reports and reports[0].reduced is not None):
            done = self._apply_together(reports, claim_for, wake)
            if done is not None:
                return done
        out: list[Applied | IllegalEventError | StaleLeaseError] = []
        for r in reports:
            try:
                out.append(self.apply(r.task_id, r.event, complete=r.complete, claim_for=claim_for, state=r.state))
            except (IllegalEventError, StaleLeaseError) as exc:
                out.append(exc)
        if wake is not None:
            self.store.wake(wake.gates, wake.now_ms, wake.count)
        return out

    def reduce(self, report: Report) -> Report:
        """The report with its event already reduced and its append prepared (only the lease
        of the next command is left to ``apply_many``): a worker does this work while the
        previous commit is on its way to the disk. A refused event is left as it is; the
        refusal comes from ``apply_many``."""
        if report.reduced is not None:
            return report
        try:
            new, cmds = transition(report.state, report.event)
        except IllegalEventError:
            return report
        if spans_tasks(cmds):
            return report  # other tasks' appends go with it: apply_many applies it on its own
        req = self.store.encode(AppendRequest(
            report.task_id, report.state.version, report.event.wire(), projection(new),
            to_new_commands(cmds, self.clock.now_ms(), new), complete=report.complete, terminal=new.terminal,
            complete_remote=remote_closed(report.state, new),
        ))
        return replace(report, reduced=(new, cmds, req))

    def _apply_together(
        self, reports: Sequence[Report], claim_for: tuple[str, int] | None, wake: Wake | None
    ) -> list[Applied | IllegalEventError | StaleLeaseError] | None:
        reduced = []
        for r in reports:
            done = self.reduce(r).reduced
            if done is None:
                return None  # a refused event: apply_many applies them one by one
            reduced.append(done)
        results = self.store.append_batch([replace(req, claim_for=claim_for) for _, _, req in reduced], wake=wake)
        if results is None:
            return None
        for r, (_, cmds, _) in zip(reports, reduced, strict=True):
            announce(r.task_id, cmds)
        return [
            Applied(new, cmds, claimed=res.claimed)
            for (new, cmds, _), res in zip(reduced, results, strict=True)
        ]

    # --- people ------------------------------------------------------------------------
    # Each act takes the Principal that ``engine.users.authenticate(token)`` returned and
    # authenticates its token again: the person is the token's, never a name passed along.
    def approve(
        self, task_id: str, by: Principal, *, proposal_hash: str, comment: str = "", hold_for: Holder | None = None
    ) -> TaskState:
        """Approve the proposal the task waits on. ``proposal_hash`` is the hash of the
        proposal reviewed: required, and never filled in from the current one. With
        ``hold_for``, the step after the approval is claimed for that worker in the same commit."""
        who = self.users.check(by, act="approve")
        _no_agent(who, "approve")
        if not isinstance(proposal_hash, str) or _PROPOSAL_HASH.fullmatch(proposal_hash) is None:
            msg = (
                f"approving task {task_id} needs the hash of the proposal you reviewed (64 hex digits, "
                f"got {proposal_hash!r}); 'statewright show {task_id} --json' prints it"
            )
            raise InputError(msg)
        st = self._awaiting(task_id)
        cur = st.current
        ev = ApprovalGranted(
            event_id=f"{task_id}:approve:{_random_hex(8)}", at_ms=self.clock.now_ms(),
            step=cur.step if cur else "", actor=who.name, roles=who.roles,
            proposal_hash=proposal_hash, comment=comment, token_id=who.token_id,
        )
        applied = self.apply(task_id, ev, state=st, claim_for=hold_for.claim_for() if hold_for is not None else None)
        if hold_for is not None and applied.claimed is not None:
            hold_for.hold(task_id, applied.claimed, applied.state)
        return applied.state

    def reject(self, task_id: str, by: Principal, *, reason_code: str, comment: str = "") -> TaskState:
        """Reject the proposal the task waits on, with one of the step's reason codes."""
        who = self.users.check(by, act="reject")
        _no_agent(who, "reject")
        st = self._awaiting(task_id)
        cur = st.current
        ev = ApprovalRejected(
            event_id=f"{task_id}:reject:{_random_hex(8)}", at_ms=self.clock.now_ms(),
            step=cur.step if cur else "", actor=who.name, roles=who.roles,
            proposal_hash=cur.proposal_hash if cur else "", reason_code=reason_code, comment=comment,
            token_id=who.token_id,
        )
        transition(st, ev)  # who may reject is the reducer's to say, before the code is looked at
        codes = st.workflow.reject_codes_of(st.workflow.step(cur.step)) if cur else ()
        if reason_code not in codes:
            raise InputError(f"reason code {reason_code!r} is not one this step takes; use one of: {', '.join(codes)}")
        return self.apply(task_id, ev, state=st).state

    def add_evidence(self, task_id: str, by: Principal, evidence: Mapping[str, Any], note: str = "") -> TaskState:
        """Supply evidence to a task that has not ended (an operator's act): it is appended to
        the task's state as an audited event, and a proposal awaiting approval is built
        again with it."""
        who = self.users.check(by, role=OPERATOR_ROLE, act="supply evidence")
        if not isinstance(evidence, Mapping) or not evidence:
            raise InputError("evidence must be a non-empty JSON object")
        problem = check_json_value(dict(evidence))
        if problem is not None:
            raise InputError(f"evidence refused: {problem}")
        st = self.state(task_id)
        if st.status in (TaskStatus.COMPLETED, TaskStatus.COMPLETED_EARLY, TaskStatus.CANCELLED):
            raise TaskStateError(f"task {task_id} is {st.status.value}; evidence goes to a task that has not ended")
        ev = EvidenceAdded(
            event_id=f"{task_id}:evidence:{_random_hex(8)}", at_ms=self.clock.now_ms(), actor=who.name,
            roles=who.roles, evidence=dict(evidence), note=note, token_id=who.token_id,
        )
        return self.apply(task_id, ev, state=st).state

    def retry(self, task_id: str, by: Principal, reason: str) -> TaskState:
        """Re-run a halted task's halted step; needs the operator role."""
        who = self.users.check(by, role=OPERATOR_ROLE, act="retry")
        st = self.state(task_id)
        if st.status is not TaskStatus.HALTED:
            raise TaskStateError(_why_not(st, "retried", "only a halted task can be retried"))
        ev = TaskRetried(
            event_id=f"{task_id}:retry:{_random_hex(8)}", at_ms=self.clock.now_ms(),
            actor=who.name, reason=reason,
        )
        return self.apply(task_id, ev).state

    def cancel(self, task_id: str, by: Principal, reason: str) -> TaskState:
        """Cancel a task; needs the operator role."""
        who = self.users.check(by, role=OPERATOR_ROLE, act="cancel")
        st = self.state(task_id)
        if st.status in (TaskStatus.COMPLETED, TaskStatus.COMPLETED_EARLY, TaskStatus.CANCELLED):
            raise TaskStateError(_why_not(st, "cancelled", "it has ended"))
        ev = TaskCancelled(
            event_id=f"{task_id}:cancel:{_random_hex(8)}", at_ms=self.clock.now_ms(),
            actor=who.name, reason=reason,
        )
        return self.apply(task_id, ev).state

    def _awaiting(self, task_id: str) -> TaskState:
        st = self.state(task_id)
        if st.status is not TaskStatus.AWAITING_APPROVAL or st.current is None:
            raise ApprovalError(_why_not(st, "approved or rejected", "nothing waits for an approval"),
                                refusal=Refusal.NOT_WAITING)
        return st

    # --- reading -----------------------------------------------------------------------
    def review(self, task_id: str) -> dict[str, Any]:
        """What an approver or operator decides on (``statewright.runtime.review``)."""
        from statewright.runtime.review import review

        return review(self, task_id)

    def may_approve(self, state: TaskState, by: Principal) -> bool:
        """Whether ``by`` may approve the step ``state`` waits at (role and scope, separation
        of duty); False for a task that waits for no approval."""
        from statewright.runtime.review import may_approve

        return may_approve(state, by.name, by.roles)

    def events(self, task_id: str) -> list[Event]:
        if self.store.load(task_id) is None:
            raise TaskNotFoundError(task_id)
        return [event_from_dict(r.body) for r in self.store.events(task_id)]
