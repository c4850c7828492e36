"""Labels as a projection of task state: make the task's issue or pull request show
``machine.labels.labels_for(state)``, and nothing else of the labels statewright manages.

The reducer asks for this with a SyncLabels command in the same transaction as the
transition, so a crash between the two is repaired by the outbox: the next worker performs
the command. The state is read again here, not taken from the command, and read once more
after the change: a late, repeated or reordered command sets the latest labels."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from statewright.definition.github import GithubProjection
from statewright.definition.model import RouteKind, Workflow
from statewright.integrations.github.client import GitHub
from statewright.machine.labels import labels_for
from statewright.machine.state import TaskState, TaskStatus

PROPOSAL_MARK = "<!-- statewright:proposal"
_ROUNDS = 3  # read, change, read again: the state moved on at most this often before a later command


@dataclass
class Synced:
    """What one sync changed on GitHub."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    commented: bool = False


def target_of(state: TaskState) -> tuple[GithubProjection, str, int] | None:
    """The projection, repository and issue or pull request number of ``state``; None for a
    task without a github workflow or a number in its input."""
    gh = state.workflow.github
    number = state.input.get("number")
    if gh is None or isinstance(number, bool) or not isinstance(number, int) or number < 1:
        return None
    return gh, gh.repo, number


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
    proposal that waits for approval once, in a comment)."""
    done = Synced()
    for _ in range(_ROUNDS):
        state = state_of()
        target = target_of(state)
        if target is None:
            return done
        gh, repo, number = target
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


def label_plan(workflow: Workflow) -> list[tuple[str, str]]:
    """The labels ``statewright github labels`` creates, with their colors: every fixed label,
    the approval label, and an attempt label for each loop-back the workflow's budgets allow."""
    gh = workflow.github
    if gh is None:
        return []
    attempts = sum(max(0, (s.on_failure.max_attempts or 1) - 1) for s in workflow.steps
                   if s.on_failure.kind is RouteKind.LOOP_BACK)
    names = [*gh.fixed_labels(), *([gh.approval_label] if gh.approval_label else [])]
    names += [gh.attempt_label_for(n) for n in range(1, attempts + 1) if gh.attempt_label]
    return [(n, gh.color_of(n)) for n in names]
