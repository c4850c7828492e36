"""A workflow's ``github:`` key: which repository's events start and drive its tasks, and
which labels show a task's state on its issue or pull request (data only; checked here, at
load time, against the workflow's steps).

    github:
      repo: octo-org/widgets
      labels: {generate: ready-for-dev, review: needs-review, merge: awaiting-merge}
      loop_back_label: changes-requested     # at a step the task was sent back to
      attempt_label: "auto-fix-attempt-{n}"  # n: loop-backs so far
      terminal: {completed: merge-approved, halted: escalated}
      approval_label: review-approved        # applied by a person: an approval attempt
      reject_labels: {do-not-merge: needs_changes}  # applied by a person: a rejection, its code
      pull_request: results.generate.pull_request   # the number of the pull request a step opened
      users: {octocat: alice}                # GitHub login -> statewright person
      colors: {escalated: b60205}

The labels go on the issue or pull request the task was started for (``input.number``) until
the step that ``pull_request`` names has recorded the number of the pull request it opened;
from then on they go on that pull request, and the issue keeps none of them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any

from statewright._record import record
from statewright.machine.paths import RefError, parse_ref

TERMINAL_KEYS = ("completed", "completed_early", "halted", "cancelled")
START_EVENTS = ("issues.opened", "pull_request.opened")
DEFAULT_COLOR = "ededed"
_REPO = re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}")
_COLOR = re.compile(r"[0-9a-fA-F]{6}")
_FIELDS = (
    "repo", "labels", "loop_back_label", "attempt_label", "terminal", "approval_label", "users", "colors",
    "start_on", "reject_labels", "pull_request",
)
MAX_LABEL_CHARS = 50  # GitHub's limit on a label's name


@record
class GithubProjection:
    repo: str
    labels: Mapping[str, str] = field(default_factory=dict)  # step id -> label
    loop_back_label: str = ""
    attempt_label: str = ""  # with "{n}"
    terminal: Mapping[str, str] = field(default_factory=dict)  # terminal status -> label
    approval_label: str = ""
    users: Mapping[str, str] = field(default_factory=dict)  # GitHub login -> statewright person
    colors: Mapping[str, str] = field(default_factory=dict)  # label -> RRGGBB
    start_on: tuple[str, ...] = START_EVENTS
    reject_labels: Mapping[str, str] = field(default_factory=dict)  # label -> reason code
    pull_request: str = ""  # results.STEP.FIELD: the number of the pull request a step opened

    def person_labels(self) -> tuple[str, ...]:
        """The labels a person applies to act: the approval label and the rejection labels."""
        return tuple(n for n in (self.approval_label, *self.reject_labels) if n)

    def fixed_labels(self) -> tuple[str, ...]:
        """Every label the projection sets, but the numbered attempt labels, in order."""
        out: list[str] = []
        for name in (*self.labels.values(), self.loop_back_label, *self.terminal.values()):
            if name and name not in out:
                out.append(name)
        return tuple(out)

    def attempt_label_for(self, n: int) -> str:
        return self.attempt_label.replace("{n}", str(n)) if self.attempt_label else ""

    def is_attempt_label(self, name: str) -> bool:
        if not self.attempt_label:
            return False
        head, _, tail = self.attempt_label.partition("{n}")
        middle = name[len(head): len(name) - len(tail)] if len(name) > len(head) + len(tail) else ""
        return name.startswith(head) and name.endswith(tail) and middle.isdigit()

    def manages(self, name: str) -> bool:
        """Whether ``name`` is one of the labels the projection sets and removes."""
        return name in self.fixed_labels() or self.is_attempt_label(name)

    def color_of(self, name: str) -> str:
        if name in self.colors:
            return self.colors[name]
        if self.is_attempt_label(name) and self.attempt_label in self.colors:
            return self.colors[self.attempt_label]
        return DEFAULT_COLOR


def parse_github(
    raw: object, steps: Sequence[Any], add: Callable[[str, str], None], reject_codes: Sequence[str] = (),
) -> GithubProjection | None:
    """The projection of a workflow's ``github:`` mapping; each problem is ``add(where, msg)``,
    one line naming the label, step or field."""
    where = "github"
    if not isinstance(raw, Mapping):
        add(where, f"must be a mapping with 'repo' and 'labels', got {type(raw).__name__}")
        return None
    for key in raw:
        if key not in _FIELDS:
            add(where, f"unknown field {key!r}; allowed: {', '.join(sorted(_FIELDS))}")
    repo = raw.get("repo")
    if not isinstance(repo, str) or _REPO.fullmatch(repo) is None:
        add(f"{where} repo", f"must be OWNER/NAME, got {repo!r}")
        repo = ""
    step_ids = [s.id for s in steps]
    kinds = {s.id: str(s.kind) for s in steps}
    labels = _mapping(raw.get("labels", {}), f"{where} labels", add)
    for step_id, label in labels.items():
        if step_id not in step_ids:
            add(f"{where} labels", f"no step {step_id!r} in this workflow (label {label!r}); steps: "
                                   f"{', '.join(step_ids)}")
        _label(label, f"{where} labels {step_id}", add)
    terminal = _mapping(raw.get("terminal", {}), f"{where} terminal", add)
    for status, label in terminal.items():
        if status not in TERMINAL_KEYS:
            add(f"{where} terminal", f"{status!r} is not a final status; use: {', '.join(TERMINAL_KEYS)}")
        _label(label, f"{where} terminal {status}", add)
    loop_back_label = _optional_label(raw, "loop_back_label", add)
    attempt_label = _optional_label(raw, "attempt_label", add)
    if attempt_label and attempt_label.count("{n}") != 1:
        add(f"{where} attempt_label", f"must hold '{{n}}' once (the attempt number), got {attempt_label!r}")
    approval_label = _optional_label(raw, "approval_label", add)
    if approval_label and not any(k == "human" for k in kinds.values()):
        add(f"{where} approval_label", "the workflow has no human step for it to approve")
    shown = [*labels.values(), *terminal.values(), loop_back_label]
    if approval_label and approval_label in shown:
        add(f"{where} approval_label", f"{approval_label!r} is also a label the task's state shows; "
                                       "a person's label must differ from the ones statewright sets")
    reject_labels = _reject_labels(raw, steps, shown, approval_label, reject_codes, add)
    pull_request = _pull_request(raw, steps, add)
    users = _mapping(raw.get("users", {}), f"{where} users", add)
    colors = _mapping(raw.get("colors", {}), f"{where} colors", add)
    known = {*shown, attempt_label, approval_label, *reject_labels} - {""}
    for label, color in colors.items():
        if label not in known:
            add(f"{where} colors", f"{label!r} is not a label of this workflow's github key")
        if _COLOR.fullmatch(color) is None:
            add(f"{where} colors {label}", f"must be six hex digits (RRGGBB), got {color!r}")
    start_on: tuple[str, ...] = START_EVENTS
    if "start_on" in raw:
        got = raw["start_on"]
        if not isinstance(got, list) or not all(isinstance(e, str) and e in START_EVENTS for e in got):
            add(f"{where} start_on", f"must be a list of: {', '.join(START_EVENTS)}; got {got!r}")
        else:
            start_on = tuple(got)
    return GithubProjection(
        repo=repo, labels=labels, loop_back_label=loop_back_label, attempt_label=attempt_label,
        terminal=terminal, approval_label=approval_label, users=users, colors=colors, start_on=start_on,
        reject_labels=reject_labels, pull_request=pull_request,
    )


def _reject_labels(raw: Mapping[str, Any], steps: Sequence[Any], shown: Sequence[str], approval_label: str,
                   reject_codes: Sequence[str], add: Callable[[str, str], None]) -> dict[str, str]:
    """``reject_labels: {LABEL: REASON_CODE}``: each code one that every human step takes."""
    where = "github reject_labels"
    out = _mapping(raw.get("reject_labels", {}), where, add)
    humans = [s for s in steps if str(s.kind) == "human"]
    if out and not humans:
        add(where, "the workflow has no human step for them to reject")
    for label, code in out.items():
        _label(label, f"{where} {label}", add)
        if label in shown or label == approval_label:
            add(f"{where} {label}", f"{label!r} is also a label statewright sets or the approval label; "
                                    "a rejection's label must be a label of its own")
        for step in humans:
            codes = tuple(step.reject_codes) or tuple(reject_codes)
            if code not in codes:
                add(f"{where} {label}", f"reason code {code!r} is not one step {step.id!r} takes; use one of: "
                                        f"{', '.join(codes)}")
    return out


def _pull_request(raw: Mapping[str, Any], steps: Sequence[Any], add: Callable[[str, str], None]) -> str:
    """``pull_request: results.STEP.FIELD``, naming a step of the workflow (an ai or code step:
    one that records a result)."""
    where = "github pull_request"
    value = raw.get("pull_request", "")
    if value == "":
        return ""
    try:
        ref = parse_ref(value)
    except RefError as exc:
        add(where, str(exc))
        return ""
    kinds = {s.id: str(s.kind) for s in steps}
    if ref.root != "results" or len(ref.parts) < 2:
        add(where, f"must be results.STEP.FIELD (the pull request's number in a step's result), got {value!r}")
        return ""
    if ref.parts[0] not in kinds:
        add(where, f"no step {ref.parts[0]!r} in this workflow; steps: {', '.join(kinds)}")
        return ""
    if kinds[ref.parts[0]] not in ("ai", "code"):
        add(where, f"step {ref.parts[0]!r} is a {kinds[ref.parts[0]]} step; only an ai or code step "
                   "records a result")
        return ""
    return str(value)


def _mapping(value: object, where: str, add: Callable[[str, str], None]) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        add(where, f"must be a mapping of names to text, got {value!r}")
        return {}
    return dict(value)


def _optional_label(raw: Mapping[str, Any], key: str, add: Callable[[str, str], None]) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str):
        add(f"github {key}", f"must be a label name, got {value!r}")
        return ""
    if value:
        _label(value, f"github {key}", add)
    return value


def _label(name: str, where: str, add: Callable[[str, str], None]) -> None:
    if not name.strip() or len(name) > MAX_LABEL_CHARS or "," in name:
        add(where, f"{name!r} is not a label name (1 to {MAX_LABEL_CHARS} characters, no comma)")
