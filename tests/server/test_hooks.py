"""Webhooks that start tasks: signatures, replays, malformed bodies, and the hooks file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from server.conftest import HOOK_SECRET
from server.support import World, refused
from statewright._errors import DefinitionError
from statewright.server import load_hooks, sign


def _post(world: World, hook: str, body: Any, delivery: str | None = "d-1", *, secret: bytes = HOOK_SECRET,
          raw: bytes | None = None, signature: str | None = None) -> Any:
    data = raw if raw is not None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    headers["X-Statewright-Signature"] = signature if signature is not None else sign(secret, data)
    if delivery is not None:
        headers["X-Statewright-Delivery"] = delivery
    return world.client.post(f"/api/hooks/{hook}", content=data, headers=headers)


ORDER = {"order": {"region": "eu", "amount": 40, "note": "rush"}}


def test_a_signed_delivery_starts_a_task_with_its_input_mapped_from_the_body(world: World) -> None:
    r = _post(world, "order", ORDER)
    assert r.status_code == 201, r.text
    tid = r.json()["task_id"]
    assert r.json() == {"task_id": tid, "status": "awaiting_approval", "created": True}
    st = world.engine.state(tid)
    assert (st.workflow.name, dict(st.input)) == ("payment", {"region": "eu", "amount": 40})


def test_a_replayed_delivery_returns_the_same_task_and_another_body_under_its_id_is_409(world: World) -> None:
    """The same delivery again: 200 and the same task. The id with a body that maps to other
    input: 409 naming the task. A body differing only where the hook does not read it is the
    same submission."""
    tid = _post(world, "order", ORDER).json()["task_id"]
    again = _post(world, "order", ORDER)
    assert (again.status_code, again.json()["task_id"], again.json()["created"]) == (200, tid, False)
    unread = _post(world, "order", {"order": {**ORDER["order"], "note": "not rush"}})
    assert (unread.status_code, unread.json()["task_id"]) == (200, tid)
    other = _post(world, "order", {"order": {**ORDER["order"], "amount": 41}})
    assert "already names task" in refused(other, 409, "key_reused") and other.json()["task_id"] == tid
    raw = _post(world, "raw", {"region": "us"}, "d-9")
    assert raw.status_code == 201
    refused(_post(world, "raw", {"region": "us", "amount": 1}, "d-9"), 409, "key_reused")
    second = _post(world, "order", ORDER, "d-2")
    assert second.status_code == 201 and second.json()["task_id"] != tid
    assert len(world.engine.store.task_ids()) == 3


@pytest.mark.parametrize("case", ["missing", "other-secret", "tampered", "sha1", "no-hex", "not-hex"])
def test_a_bad_signature_is_401_and_starts_nothing(world: World, case: str) -> None:
    data = json.dumps(ORDER).encode()
    signature = {
        "missing": "", "other-secret": sign(b"another-secret-of-16-bytes", data),
        "tampered": sign(HOOK_SECRET, data + b" "), "sha1": "sha1=" + sign(HOOK_SECRET, data)[7:],
        "no-hex": "sha256=", "not-hex": "sha256=zz" + sign(HOOK_SECRET, data)[9:],
    }[case]
    refused(_post(world, "order", ORDER, raw=data, signature=signature), 401, "unauthenticated")
    assert world.engine.store.task_ids() == []


@pytest.mark.parametrize(("raw", "why"), [
    (b"{not json", "the body"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"order": {"amount": 3}}', "input 'region': body.order.region: body.order has no field 'region'"),
    (b'{"order": "eu"}', "input 'region'"),
    (b'{"order": {"region": "eu", "amount": "forty"}}', "input"),
    (b"\xff\xfe", "the body"),
    (b"", "the body"),
])
def test_a_malformed_body_is_422_and_starts_nothing(world: World, raw: bytes, why: str) -> None:
    """Signed, but not JSON, not an object, missing what the mapping reads, or failing the workflow's input schema."""
    assert why in refused(_post(world, "order", None, raw=raw), 422, "invalid")
    assert world.engine.store.task_ids() == []


def test_a_delivery_needs_its_id_and_an_unknown_hook_is_404(world: World) -> None:
    assert "X-Statewright-Delivery" in refused(_post(world, "order", ORDER, delivery=None), 422)
    refused(_post(world, "order", ORDER, delivery="x" * 201), 422)
    refused(_post(world, "nope", ORDER), 404, "not_found")
    assert world.engine.store.task_ids() == []


HOOKS = """\
hooks:
  order:
    workflow: wf.yaml
    secret_env: ORDER_SECRET
    input:
      region: body.order.region
"""
WORKFLOW = """\
workflow: pay
steps:
  - {id: approve, kind: human, owner: finance, approvers: {role: finance}}
"""


def _hooks_file(tmp_path: Path, text: str) -> Path:
    (tmp_path / "wf.yaml").write_text(WORKFLOW, encoding="utf-8")
    path = tmp_path / "hooks.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_hooks_file_names_the_workflow_the_secret_and_the_mapping(tmp_path: Path) -> None:
    hooks = load_hooks(_hooks_file(tmp_path, HOOKS), {"ORDER_SECRET": "s" * 32})
    hook = hooks["order"]
    assert (hook.workflow.name, hook.secret, hook.task_input({"order": {"region": "eu"}})) == (
        "pay", b"s" * 32, {"region": "eu"})


@pytest.mark.parametrize(("text", "env", "problem"), [
    (HOOKS, {}, "the secret in $ORDER_SECRET is not set; it must hold at least 16"),
    (HOOKS, {"ORDER_SECRET": "short"}, "holds 5 bytes"),
    (HOOKS.replace("body.order.region", "order.region"), None, "is not a reference such as body.order.id"),
    (HOOKS.replace("body.order.region", "body.order..x"), None, "each part after the root"),
    (HOOKS.replace("wf.yaml", "missing.yaml"), None, "file not found"),
    (HOOKS.replace("    input:", "    inptu:"), None, "unknown field 'inptu'"),
    ("hooks: [1]", None, "expected 'hooks:' mapping"),
    ("hooks: {a: [", None, "not valid YAML"),
])
def test_a_bad_hooks_file_is_refused_with_what_is_wrong(tmp_path: Path, text: str, env: dict[str, str] | None,
                                                       problem: str) -> None:
    with pytest.raises(DefinitionError, match=r"hooks\.yaml") as caught:
        load_hooks(_hooks_file(tmp_path, text), env if env is not None else {"ORDER_SECRET": "s" * 32})
    assert any(problem in p for p in caught.value.problems), caught.value.problems
