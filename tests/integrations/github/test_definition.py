"""The github key is checked at load time: a label for a step that does not exist (the seed's
typo'd label that no stage listens to) is one line naming it, and the file never loads.
``statewright github labels`` creates the labels with the definition's colors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from statewright._errors import DefinitionError
from statewright.cli import cli, main
from statewright.definition.loader import workflow_from_dict

from .fake_github import FakeGitHub
from .support import EXAMPLE, REPO

STEPS = [
    {"id": "review", "kind": "code", "owner": "ci", "run": {"command": ["true"]}},
    {"id": "merge", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"}},
]


def _load(github: Any) -> None:
    workflow_from_dict({"workflow": "w", "github": github, "steps": STEPS}, "w.yaml")


@pytest.mark.parametrize(("github", "line"), [
    ({"repo": REPO, "labels": {"reveiw": "needs-review"}},
     "github labels: no step 'reveiw' in this workflow (label 'needs-review'); steps: review, merge"),
    ({"repo": REPO, "terminal": {"halt": "escalated"}},
     "github terminal: 'halt' is not a final status; use: completed, completed_early, halted, cancelled"),
    ({"repo": REPO, "labels": {"review": "needs-review"}, "colors": {"needs-reveiw": "fbca04"}},
     "github colors: 'needs-reveiw' is not a label of this workflow's github key"),
    ({"repo": REPO, "labels": {"merge": "review-approved"}, "approval_label": "review-approved"},
     "github approval_label: 'review-approved' is also a label the task's state shows; a person's label must "
     "differ from the ones statewright sets"),
    ({"repo": REPO, "attempt_label": "auto-fix-attempt"},
     "github attempt_label: must hold '{n}' once (the attempt number), got 'auto-fix-attempt'"),
    ({"repo": "widgets"}, "github repo: must be OWNER/NAME, got 'widgets'"),
    ({"repo": REPO, "lables": {}},
     "github: unknown field 'lables'; allowed: approval_label, attempt_label, colors, labels, loop_back_label, "
     "pull_request, reject_labels, repo, start_on, terminal, users"),
    ({"repo": REPO, "pull_request": "results.reveiw.number"},
     "github pull_request: no step 'reveiw' in this workflow; steps: review, merge"),
    ({"repo": REPO, "pull_request": "results.merge.number"},
     "github pull_request: step 'merge' is a human step; only an ai or code step records a result"),
    ({"repo": REPO, "pull_request": "input.number"},
     "github pull_request: must be results.STEP.FIELD (the pull request's number in a step's result), "
     "got 'input.number'"),
    ({"repo": REPO, "reject_labels": {"do-not-merge": "not_a_code"}},
     "github reject_labels do-not-merge: reason code 'not_a_code' is not one step 'merge' takes; use one of: "
     "insufficient_evidence, incorrect_extraction, policy_denial, suspected_fraud, other"),
    ({"repo": REPO, "labels": {"review": "needs-review"}, "reject_labels": {"needs-review": "other"}},
     "github reject_labels needs-review: 'needs-review' is also a label statewright sets or the approval "
     "label; a rejection's label must be a label of its own"),
])
def test_a_mistake_in_the_github_key_is_one_line_naming_it(github: Any, line: str) -> None:
    with pytest.raises(DefinitionError) as err:
        _load(github)
    assert err.value.problems == [line]


def test_validate_names_the_typo_and_fails(tmp_path: Path) -> None:
    text = EXAMPLE.read_text(encoding="utf-8").replace("    review: needs-review", "    reveiw: needs-review")
    bad = tmp_path / "review.yaml"
    bad.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(cli, ["validate", str(bad)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"{bad}: github labels: no step 'reveiw' in this workflow (label 'needs-review'); "
        "steps: validate, generate, review, merge",
    ]


def test_the_example_validates() -> None:
    result = CliRunner().invoke(cli, ["validate", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{EXAMPLE}: OK  github-review v1:")


def test_github_labels_creates_them_with_their_colors_and_recolors_on_a_second_run(github: FakeGitHub) -> None:
    first = CliRunner().invoke(cli, ["github", "labels", str(EXAMPLE), "--repo", "octo-org/other"])
    assert first.exit_code == 0, first.output
    made = github.repo_labels["octo-org/other"]
    assert made["escalated"] == "b60205" and made["needs-review"] == "fbca04"
    assert made["auto-fix-attempt-1"] == made["auto-fix-attempt-3"] == "f9d0c4"
    # three fixes at most by the review's loop budget, one more after the maintainer's rejection
    assert made["auto-fix-attempt-4"] == "f9d0c4" and "auto-fix-attempt-5" not in made
    assert set(made) >= {"triage", "ready-for-dev", "changes-requested", "review-approved", "merge-approved",
                         "needs-rework"}
    github.repo_labels["octo-org/other"]["escalated"] = "000000"
    again = CliRunner().invoke(cli, ["github", "labels", str(EXAMPLE), "--repo", "octo-org/other"])
    assert again.exit_code == 0, again.output
    assert "updated escalated #b60205" in again.output
    assert github.repo_labels["octo-org/other"]["escalated"] == "b60205"


@pytest.mark.parametrize(("args", "message"), [
    (["--repo", "nobody"], "error: --repo must be OWNER/NAME, got 'nobody'"),
    (["--repo", REPO, "--token-bad"], None),
])
def test_github_labels_refuses_bad_input_in_one_line(
    github: FakeGitHub, args: list[str], message: str | None, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", ["statewright", "github", "labels", str(EXAMPLE), *args])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    if message is not None:
        assert err == [message]
    assert github.writes() == []


def test_github_labels_without_a_token_is_one_line(github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN")
    result = CliRunner().invoke(cli, ["github", "labels", str(EXAMPLE), "--repo", REPO])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: GITHUB_TOKEN is not set; the GitHub calls need a token"
    assert github.calls == []
