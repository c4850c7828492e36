"""Labels as a projection of task state: make the task's issue or pull request show
``machine.labels.labels_for(state)``, and nothing else of the labels statewright manages.

The reducer asks for this with a SyncLabels command in the same transaction as the
transition, so a crash between the two is repaired by the outbox: the next worker performs
the command. The state is read again here, not taken from the command, and read once more
after the change: a late, repeated or reordered command sets the latest labels."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from statewright._record import record
from statewright.definition.github import GithubProjection
from statewright.definition.model import RouteKind, Workflow
from statewright.integrations.github.client import GitHub
from statewright.machine.labels import labels_for
from statewright.machine.paths import RefError, parse_ref, resolve
from statewright.machine.state import TaskState, TaskStatus

PROPOSAL_MARK = "<!-- statewright:proposal"
LINK_MARK = "<!-- statewright:task"
_ROUNDS = 3  # read, change, read again: the state moved on at most this often before a later command


@dataclass
class Synced:
    """What one sync changed on GitHub."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    commented: bool = False


@record
class Target:
    """Where a task's labels go: ``number``, the pull request a step opened (the key's
    ``pull_request``) once its result names one, else ``started_on``, the issue or pull
    request the task was started for (``input.number``)."""

    gh: GithubProjection
    repo: str
    number: int
    started_on: int

    @property
    def moved(self) -> bool:
        return self.number != self.started_on


def _number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def opened_pull_request(state: TaskState) -> int | None:
    """The number of the pull request a step of the task opened, when its result names one."""
    gh = state.workflow.github
    if gh is None or not gh.pull_request:
        return None
    try:
        return _number(resolve(parse_ref(gh.pull_request), state.input, state.results))
    except RefError:
        return None


def target_of(state: TaskState) -> Target | None:
    """Where ``state``'s labels go; None for a task without a github workflow or a number in
    its input."""
    gh = state.workflow.github
    started_on = _number(state.input.get("number"))
    if gh is None or started_on is None:
        return None
    return Target(gh, gh.repo, opened_pull_request(state) or started_on, started_on)


def link_comment(state: TaskState, started_on: int) -> str:
    """What a pull request a step opened says first: which task it belongs to. The receiver
    finds the task of a label applied there by it, and believes it only when the task's own
    state names this pull request."""
    return (f"{LINK_MARK} {state.task_id} -->\nstatewright task `{state.task_id}` (started for #{started_on}) "
            "shows its state on this pull request.")


def linked_tasks(comments: list[str]) -> Iterator[str]:
    """The task ids the comments of an issue or pull request name (link or proposal)."""
    for body in comments:
        for mark in (LINK_MARK, PROPOSAL_MARK):
            if body.startswith(mark):
                words = body[len(mark):].split()
                if words:
                    yield words[0]


def proposal_comment(state: TaskState, gh: GithubProjection) -> str:
    """What the pull request shows a person who may approve: the proposal's hash (an
    approval by label binds to it) and how to act."""
    cur = state.current
    if cur is None:
        return ""
    step = state.workflow.step(cur.step)
    role = f" by a person with the role `{step.approvers_role}`" if step.approvers_role else ""
    how = f" Apply the label `{gh.approval_label}` to approve it." if gh.approval_label else ""
    return (f"{PROPOSAL_MARK} {state.task_id} {cur.proposal_hash} -->\n"
            f"statewright task `{state.task_id}` waits at step `{cur.step}` for approval{role} of the "
            f"proposal `sha256:{cur.proposal_hash}`.{how}")


def shown_proposals(comments: list[str], task_id: str) -> Iterator[str]:
    """The proposal hashes the pull request showed for ``task_id``, oldest first."""
    for body in comments:
        if body.startswith(PROPOSAL_MARK):
            words = body[len(PROPOSAL_MARK):].split()
            if len(words) >= 2 and words[0] == task_id:
                yield words[1]


def sync(state_of: Callable[[], TaskState], client: GitHub) -> Synced:
    """Make the labels of the task's issue or pull request match its state (and show a
    proposal that waits for approval once, in a comment). Once the labels moved to a pull
    request a step opened, that pull request says which task it belongs to (once), and the
    issue the task started on keeps none of the labels statewright manages."""
    done = Synced()
    cleared: set[int] = set()
    for _ in range(_ROUNDS):
        state = state_of()
        target = target_of(state)
        if target is None:
            return done
        gh, repo, number = target.gh, target.repo, target.number
        if target.moved and target.started_on not in cleared:
            _link(state, target, client, done)
            cleared.add(target.started_on)
        want = labels_for(state)
        have = set(client.labels_on(repo, number))
        for name in sorted(have - want):
            if gh.manages(name):
                client.remove_label(repo, number, name)
                done.removed.append(name)
        missing = sorted(want - have)
        if missing:
            client.add_labels(repo, number, missing)
            done.added.extend(missing)
        cur = state.current
        if state.status is TaskStatus.AWAITING_APPROVAL and cur is not None and cur.proposal_hash:
            shown = list(shown_proposals(client.comments(repo, number), state.task_id))
            if not shown or shown[-1] != cur.proposal_hash:
                client.comment(repo, number, proposal_comment(state, gh))
                done.commented = True
        if labels_for(state_of()) == want:
            return done
    return done


def _link(state: TaskState, target: Target, client: GitHub, done: Synced) -> None:
    """The pull request names its task; the issue the task started on sheds its labels."""
    if state.task_id not in linked_tasks(client.comments(target.repo, target.number)):
        client.comment(target.repo, target.number, link_comment(state, target.started_on))
        done.commented = True
    for name in sorted(client.labels_on(target.repo, target.started_on)):
        if target.gh.manages(name):
            client.remove_label(target.repo, target.started_on, name)
            done.removed.append(f"#{target.started_on}:{name}")


def label_plan(workflow: Workflow) -> list[tuple[str, str]]:
    """The labels ``statewright github labels`` creates, with their colors: every fixed label,
    the approval label, and an attempt label for each loop-back the workflow's budgets allow."""
    gh = workflow.github
    if gh is None:
        return []
    attempts = sum(max(0, (s.on_failure.max_attempts or 1) - 1) for s in workflow.steps
                   if s.on_failure.kind is RouteKind.LOOP_BACK)
    names = [*gh.fixed_labels(), *gh.person_labels()]
    names += [gh.attempt_label_for(n) for n in range(1, attempts + 1) if gh.attempt_label]
    return [(n, gh.color_of(n)) for n in names]
