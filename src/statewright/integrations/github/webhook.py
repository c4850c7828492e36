"""The GitHub webhook receiver: a delivery is verified, deduplicated, and mapped to an input
the engine accepts or refuses; the task stays the state of record.

    handle_event(engine, config, headers, body) -> (status, answer)   # no web framework
    github_routes(engine, config) -> [Route POST /api/github/webhook]  # Starlette, to mount

Verified: ``X-Hub-Signature-256`` is the HMAC-SHA256 of the raw body under
STATEWRIGHT_GITHUB_WEBHOOK_SECRET, checked before the body is read as JSON. Deduplicated on
``X-GitHub-Delivery``, durably: a submit's idempotency key is the pull request's (one task per
issue or pull request, however many deliveries race), an act's event id carries the delivery
id (a redelivery is a duplicate event), and a refusal's comment names the delivery.

Mapped (anything else is answered and changes nothing):
  issues.opened, pull_request.opened    submit a task keyed github:OWNER/NAME#NUMBER, its
                                        input {repo, number, title, body, author}
  issues.labeled, pull_request.labeled  by a person: the approval label is that person's
                                        approval of the proposal the pull request shows, a
                                        rejection label her rejection with its reason code,
                                        checked by the reducer like any other (role, duty,
                                        hash); a label of the task's state set by hand is
                                        refused. A refused label is removed again, the
                                        task's own labels are set back, and a comment says
                                        why. The task's own labels are ignored.
  issues.unlabeled,                     by a person, of a label the task shows: put back
  pull_request.unlabeled
  issues.closed, pull_request.closed    a merge: the merger's approval attempt (a refused
                                        one cannot be undone; a comment says the record has
                                        no approval); a close: the closer's attempt to
                                        cancel the task, which needs the operator role
                                        (refused: reopened, with a comment)
  check_suite.completed,                the task's wait step checks now instead of at its
  pull_request_review.submitted         next interval (an event is a hint; the check decides)

An issue or pull request belongs to the task started for it, or to the task whose step opened
it (the github key's ``pull_request``): statewright names the task in a comment there, and the
receiver believes the comment only when that task's state names the pull request. A bot's
act (``sender.type`` Bot: statewright's own label changes with an app's or Actions' token) is
no person's and is ignored.

Statuses: 200 done, 202 nothing to do (ignored), 400 malformed, 401 bad signature, 404 no
workflow for the repository, 409 an act refused, 413 too large, 422 an event type statewright
does not handle or a task input the workflow refuses, 503 GitHub did not answer a read the
act needs (GitHub delivers it again)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from statewright._errors import (
    DefinitionError,
    IllegalEventError,
    InputError,
    TaskNotFoundError,
    VersionConflictError,
)
from statewright._names import OPERATOR_ROLE
from statewright._record import record
from statewright.definition.github import GithubProjection
from statewright.definition.model import Workflow
from statewright.integrations.github.client import GitHub, GitHubError
from statewright.integrations.github.labels import linked_tasks, shown_proposals, target_of
from statewright.machine.events import ApprovalGranted, ApprovalRejected, TaskCancelled, TimerFired
from statewright.machine.labels import labels_for
from statewright.machine.state import TaskState, TaskStatus

if TYPE_CHECKING:
    from starlette.routing import Route

    from statewright.runtime.engine import Engine
    from statewright.store.base import Person

SECRET_ENV = "STATEWRIGHT_GITHUB_WEBHOOK_SECRET"
PATH = "/api/github/webhook"
MAX_BODY_BYTES = 1_000_000
HANDLED = frozenset({"ping", "issues", "pull_request", "check_suite", "pull_request_review"})
REFUSED_MARK = "<!-- statewright:refused"
log = logging.getLogger("statewright.github")
Answer = tuple[int, dict[str, Any]]


@record
class WebhookConfig:
    """The workflows whose ``github: {repo: ...}`` the receiver serves, one per repository,
    the webhook secret, and how to reach GitHub for a refusal's cleanup."""

    workflows: Mapping[str, Workflow]
    secret: str
    github: Callable[[], GitHub] = field(default=GitHub)

    @classmethod
    def build(cls, workflows: Iterable[Workflow], secret: str | None = None, **kwargs: Any) -> WebhookConfig:
        secret = secret if secret is not None else os.environ.get(SECRET_ENV, "")
        if not secret:
            raise InputError(f"{SECRET_ENV} is not set; the receiver verifies every delivery with it")
        by_repo: dict[str, Workflow] = {}
        for wf in workflows:
            if wf.github is None:
                raise InputError(f"{wf.source}: the workflow has no github key (github: {{repo: OWNER/NAME}})")
            if wf.github.repo in by_repo:
                raise InputError(f"{wf.source}: {wf.github.repo} is served by {by_repo[wf.github.repo].source} "
                                 "already; one workflow per repository")
            by_repo[wf.github.repo] = wf
        return cls(by_repo, secret, **kwargs)

    @classmethod
    def load(cls, files: Iterable[str], secret: str | None = None, **kwargs: Any) -> WebhookConfig:
        from statewright.definition import load_workflow

        return cls.build([load_workflow(f) for f in files], secret, **kwargs)


def sign(secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` GitHub sends with ``body``."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def task_key(repo: str, number: int) -> str:
    """The idempotency key of the task of one issue or pull request."""
    return f"github:{repo}#{number}"


def handle_event(engine: Engine, config: WebhookConfig, headers: Mapping[str, str], body: bytes) -> Answer:
    """Answer one delivery: ``(HTTP status, JSON object)``. Never raises for bad input."""
    h = {k.lower(): v for k, v in headers.items()}
    if len(body) > MAX_BODY_BYTES:
        return 413, {"error": f"the body is over {MAX_BODY_BYTES} bytes"}
    if not hmac.compare_digest(h.get("x-hub-signature-256", "").encode(), sign(config.secret, body).encode()):
        return 401, {"error": "X-Hub-Signature-256 is missing or does not match the body"}
    kind = h.get("x-github-event", "")
    delivery = h.get("x-github-delivery", "")
    if not kind or not delivery or len(delivery) > 100:
        return 400, {"error": "X-GitHub-Event and X-GitHub-Delivery are required"}
    if kind not in HANDLED:
        return 422, {"error": f"event {kind!r} is not one statewright handles ({', '.join(sorted(HANDLED))})"}
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return 400, {"error": "the body is not JSON"}
    if not isinstance(payload, dict):
        return 400, {"error": "the body is not a JSON object"}
    if kind == "ping":
        return 200, {"ok": "pong"}
    repo = _dig(payload, "repository", "full_name")
    action = payload.get("action")
    if not isinstance(repo, str) or not isinstance(action, str):
        return 400, {"error": "the body has no repository.full_name or action"}
    wf = config.workflows.get(repo)
    if wf is None:
        return 404, {"error": f"no workflow serves {repo}"}
    try:
        return _Delivery(engine, config, wf, repo, delivery, payload).handle(kind, action)
    except _Malformed as exc:
        return 400, {"error": str(exc)}
    except InputError as exc:
        return 422, {"error": str(exc)}


def github_routes(engine: Engine, config: WebhookConfig) -> list[Route]:
    """``POST /api/github/webhook`` for a Starlette app (``statewright serve``)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def webhook(request: Request) -> JSONResponse:
        body = await request.body()
        status, answer = await run_in_threadpool(handle_event, engine, config, dict(request.headers), body)
        return JSONResponse(answer, status_code=status)

    return [Route(PATH, webhook, methods=["POST"])]


class _Malformed(Exception):
    """The payload lacks a field the event needs."""


@record
class _Undo:
    """What a refused act is undone by: removing the label the person applied, reopening
    what they closed, or nothing (a merge)."""

    label: str = ""
    reopen: bool = False


def _dig(payload: Mapping[str, Any], *path: str) -> Any:
    value: Any = payload
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _number(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Malformed(f"{what} is not an issue or pull request number")
    return value


class _Delivery:
    def __init__(self, engine: Engine, config: WebhookConfig, wf: Workflow, repo: str, delivery: str,
                 payload: dict[str, Any]) -> None:
        self.engine = engine
        self.config = config
        self.wf = wf
        if wf.github is None:  # WebhookConfig.build refuses such a workflow
            raise InputError(f"{wf.source}: the workflow has no github key")
        self.gh: GithubProjection = wf.github
        self.repo = repo
        self.delivery = delivery
        self.payload = payload

    def handle(self, kind: str, action: str) -> Answer:
        item = "issue" if kind == "issues" else "pull_request"
        if kind in ("issues", "pull_request") and action == "opened":
            return self._open(kind, item)
        if kind in ("issues", "pull_request") and action in ("labeled", "unlabeled", "closed"):
            return self._persons_act(item, action)
        if kind == "check_suite" and action == "completed":
            prs = self.payload.get("check_suite", {}).get("pull_requests") if isinstance(
                self.payload.get("check_suite"), dict) else None
            if not isinstance(prs, list):
                raise _Malformed("check_suite.pull_requests is not a list")
            return self._check_now([_number(_dig(p, "number"), "check_suite.pull_requests[].number") for p in prs])
        if kind == "pull_request_review" and action == "submitted":
            return self._check_now([_number(_dig(self.payload, "pull_request", "number"), "pull_request.number")])
        return 202, {"ignored": f"{kind}.{action} is not mapped to an input"}

    # --- submit ----------------------------------------------------------------------
    def _open(self, kind: str, item: str) -> Answer:
        if f"{kind}.opened" not in self.gh.start_on:
            return 202, {"ignored": f"{self.wf.name} does not start on {kind}.opened"}
        number = _number(_dig(self.payload, item, "number"), f"{item}.number")
        key = task_key(self.repo, number)
        existing = self.engine.store.task_by_key(key)
        if existing is not None:
            return 200, {"task_id": existing, "duplicate": True}
        data = {
            "repo": self.repo, "number": number, "title": str(_dig(self.payload, item, "title") or ""),
            "body": str(_dig(self.payload, item, "body") or ""),
            "author": str(_dig(self.payload, item, "user", "login") or ""),
        }
        props = (self.wf.input_schema or {}).get("properties")
        if isinstance(props, Mapping):  # what the workflow's input takes (its schema is closed)
            data = {k: v for k, v in data.items() if k in props or k in ("repo", "number")}
        tid = self.engine.submit(self.wf, data, key=key)
        log.info("github %s: %s #%d opened: task %s", self.delivery, self.repo, number, tid)
        return 200, {"task_id": tid}

    # --- a person's act ----------------------------------------------------------------
    def _task_of(self, number: int) -> str | None:
        """The task of an issue or pull request: the one started for it (by key), or the one
        whose step opened it, named in a comment statewright wrote there and believed only
        when that task's own state names this pull request."""
        tid = self.engine.store.task_by_key(task_key(self.repo, number))
        if tid is not None:
            return tid
        with self.config.github() as client:
            named = list(dict.fromkeys(linked_tasks(client.comments(self.repo, number))))
        for candidate in named:
            try:
                state = self.engine.state(candidate)
            except (TaskNotFoundError, DefinitionError):
                continue
            target = target_of(state)
            if state.workflow.content_hash == self.wf.content_hash and target is not None and \
                    target.number == number:
                return candidate
        return None

    def _persons_act(self, item: str, action: str) -> Answer:
        number = _number(_dig(self.payload, item, "number"), f"{item}.number")
        login = _dig(self.payload, "sender", "login")
        label = _dig(self.payload, "label", "name")
        if not isinstance(login, str) or (action != "closed" and not isinstance(label, str)):
            raise _Malformed(f"a {action} event needs sender.login" + ("" if action == "closed" else " and label.name"))
        if _dig(self.payload, "sender", "type") == "Bot":
            return 202, {"ignored": "a bot's act (statewright's own, or an app's) is no person's"}
        try:
            tid = self._task_of(number)
        except GitHubError as exc:
            return 503, {"error": f"cannot read which task #{number} belongs to: {exc}"}
        if tid is None:
            return 202, {"ignored": f"no task for {self.repo}#{number}"}
        state = self.engine.state(tid)
        event_id = f"{tid}:github:{self.delivery}"
        if self.engine.store.has_event(event_id):
            return 200, {"task_id": tid, "duplicate": True}
        if action == "closed":
            return self._closed(state, item, number, login, event_id)
        if not isinstance(label, str):  # checked above; for the type checker
            raise _Malformed("label.name is missing")
        if action == "unlabeled":
            return self._unlabeled(state, number, label)
        if label in labels_for(state):
            return 202, {"ignored": f"{label!r} is the task's own label", "task_id": tid}
        if label == self.gh.approval_label:
            return self._decide(state, number, login, event_id, _Undo(label=label), reject=None)
        if label in self.gh.reject_labels:
            return self._decide(state, number, login, event_id, _Undo(label=label),
                                reject=self.gh.reject_labels[label])
        if self.gh.manages(label):
            why = (f"`{label}` shows the task's state, which statewright sets; the task is "
                   f"{state.status.value.replace('_', ' ')}{_at(state)}")
            return self._refuse(state, number, login, why, _Undo(label=label))
        return 202, {"ignored": f"{label!r} is not a label of {self.wf.name}", "task_id": tid}

    def _unlabeled(self, state: TaskState, number: int, label: str) -> Answer:
        """A label the task shows, removed by a person: put back (the labels are the task's)."""
        target = target_of(state)
        if target is None or target.number != number or label not in labels_for(state):
            return 202, {"ignored": f"{label!r} is not a label the task shows here", "task_id": state.task_id}
        try:
            with self.config.github() as client:
                client.add_labels(self.repo, number, [label])
        except GitHubError as exc:
            return 503, {"error": f"cannot put the label {label!r} back: {exc}"}
        return 200, {"task_id": state.task_id, "restored": label}

    def _closed(self, state: TaskState, item: str, number: int, login: str, event_id: str) -> Answer:
        """A merge is the merger's approval attempt; a close without one is the closer's
        attempt to cancel the task (an operator's act)."""
        if state.status in (TaskStatus.COMPLETED, TaskStatus.COMPLETED_EARLY, TaskStatus.CANCELLED):
            return 202, {"ignored": f"the task is {state.status.value.replace('_', ' ')} already",
                         "task_id": state.task_id}
        if item == "pull_request" and _dig(self.payload, "pull_request", "merged") is True:
            merger = _dig(self.payload, "pull_request", "merged_by", "login")
            return self._decide(state, number, merger if isinstance(merger, str) else login, event_id,
                                _Undo(), reject=None)
        person = self._person(login)
        undo = _Undo(reopen=True)
        if person is None:
            return self._refuse(state, number, login, f"@{login} is not mapped to an active statewright user", undo)
        if OPERATOR_ROLE not in person.roles:
            return self._refuse(state, number, login, f"{person.name!r} lacks the role {OPERATOR_ROLE!r} needed "
                                                      "to cancel the task", undo)
        event = TaskCancelled(event_id=event_id, at_ms=self.engine.clock.now_ms(), actor=person.name,
                              reason=f"GitHub: @{login} closed #{number} (delivery {self.delivery})")
        try:
            applied = self.engine.apply(state.task_id, event, state=state)
        except (IllegalEventError, VersionConflictError) as exc:
            return self._refuse(self.engine.state(state.task_id), number, login, str(exc), undo)
        log.info("github %s: %s cancelled task %s by closing #%d", self.delivery, person.name, state.task_id, number)
        return 200, {"task_id": state.task_id, "cancelled_by": person.name, "status": applied.state.status.value}

    def _person(self, login: str) -> Person | None:
        user = self.gh.users.get(login)
        return next((p for p in self.engine.users.people() if p.name == user and p.active), None) if user else None

    def _decide(self, state: TaskState, number: int, login: str, event_id: str, undo: _Undo,
                reject: str | None) -> Answer:
        """A person's approval (``reject`` None) or rejection with that reason code of the
        proposal the pull request shows, checked by the reducer like any other."""
        person = self._person(login)
        if person is None:
            return self._refuse(state, number, login, f"@{login} is not mapped to an active statewright user", undo)
        cur = state.current
        if reject is None and _approved_by(state, person.name):  # hers already (a race of her own deliveries)
            return 200, {"task_id": state.task_id, "duplicate": True}
        if state.status is not TaskStatus.AWAITING_APPROVAL or cur is None:
            act = "an approval" if reject is None else "a rejection"
            return self._refuse(state, number, login, f"the task is not waiting for {act} (it is "
                                                      f"{state.status.value.replace('_', ' ')}{_at(state)})", undo)
        try:
            with self.config.github() as client:
                shown = list(shown_proposals(client.comments(self.repo, number), state.task_id))
        except GitHubError as exc:
            return 503, {"error": f"cannot read the proposal the pull request shows: {exc}"}
        what = f"label {undo.label!r}" if undo.label else "merge"
        why_label = f"GitHub {what} by @{login} (delivery {self.delivery})"
        common: dict[str, Any] = {
            "event_id": event_id, "at_ms": self.engine.clock.now_ms(), "step": cur.step, "actor": person.name,
            "roles": person.roles, "proposal_hash": shown[-1] if shown else "", "comment": why_label,
        }
        event: ApprovalGranted | ApprovalRejected = (
            ApprovalGranted(**common) if reject is None else ApprovalRejected(**common, reason_code=reject))
        try:
            applied = self.engine.apply(state.task_id, event, state=state)
        except IllegalEventError as exc:
            now = self.engine.state(state.task_id)
            if reject is None and _approved_by(now, person.name):
                return 200, {"task_id": state.task_id, "duplicate": True}
            why = str(exc)
            if not shown:
                why = "the pull request shows no proposal of this task to decide on"
            elif shown[-1] != cur.proposal_hash:
                why = "the proposal changed since the pull request showed it; review the new one"
            return self._refuse(now, number, login, why, undo)
        except VersionConflictError:
            return self._refuse(self.engine.state(state.task_id), number, login,
                                "the task changed while this act was checked", undo)
        done = "approved" if reject is None else "rejected"
        log.info("github %s: %s %s task %s", self.delivery, person.name, done, state.task_id)
        out = {"task_id": state.task_id, f"{done}_by": person.name, "status": applied.state.status.value}
        return 200, out if reject is None else {**out, "reason_code": reject}

    def _refuse(self, state: TaskState, number: int, login: str, why: str, undo: _Undo) -> Answer:
        """Undo what the person did (remove the label, reopen what was closed; a merge cannot
        be undone), put back a label of the task's the act replaced, and say why on the issue
        or pull request (once per delivery)."""
        mark = f"{REFUSED_MARK} {self.delivery} -->"
        did = (f"removed the label `{undo.label}` @{login} applied" if undo.label else
               f"reopened #{number}, which @{login} closed" if undo.reopen else
               f"records no approval for the merge by @{login}")
        try:
            with self.config.github() as client:
                if undo.label:
                    client.remove_label(self.repo, number, undo.label)
                if undo.reopen:
                    client.reopen(self.repo, number)
                target = target_of(state)
                if target is not None and target.number == number:  # the task's own labels, set back
                    missing = sorted(labels_for(state) - set(client.labels_on(self.repo, number)))
                    if missing:
                        client.add_labels(self.repo, number, missing)
                if not any(c.startswith(mark) for c in client.comments(self.repo, number)):
                    client.comment(self.repo, number, f"{mark}\nstatewright {did}: {why}.")
        except GitHubError as exc:
            log.warning("github %s: refused act not undone: %s", self.delivery, exc)
        log.info("github %s: act of @%s refused on task %s: %s", self.delivery, login, state.task_id, why)
        return 409, {"task_id": state.task_id, "refused": why}

    # --- hints for wait steps ----------------------------------------------------------
    def _check_now(self, numbers: list[int]) -> Answer:
        checked = []
        for number in numbers:
            try:
                tid = self._task_of(number)
            except GitHubError as exc:
                return 503, {"error": f"cannot read which task #{number} belongs to: {exc}"}
            if tid is None:
                continue
            state = self.engine.state(tid)
            cur = state.current
            if state.status is not TaskStatus.WAITING or cur is None or not cur.timer_id:
                continue
            event = TimerFired(event_id=f"{cur.timer_id}:github:{self.delivery}", at_ms=self.engine.clock.now_ms(),
                               timer_id=cur.timer_id)
            try:
                self.engine.apply(tid, event, state=state)
            except (IllegalEventError, VersionConflictError):
                continue  # the task moved on meanwhile: nothing waits for this hint
            checked.append(tid)
        if not checked:
            return 202, {"ignored": "no task waits at a wait step for it"}
        return 200, {"checking": checked}


def _approved_by(state: TaskState, name: str) -> bool:
    """Whether the task went on past an approval by ``name`` (its latest)."""
    return state.status is not TaskStatus.AWAITING_APPROVAL and bool(state.approvals) and \
        state.approvals[-1].actor == name


def _at(state: TaskState) -> str:
    return f" at step '{state.current.step}'" if state.current is not None else ""
