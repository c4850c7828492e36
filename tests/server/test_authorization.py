"""Who may do what over HTTP, on every backend: the engine's rules, answered as 401, 403 or
409, and every refusal changes nothing."""

from __future__ import annotations

import pytest

from server.support import World, refused
from statewright.machine.state import TaskStatus


def _acts(world: World) -> dict[str, tuple[str, str, object]]:
    """Every call, with a body that would be taken from a person allowed to make it."""
    tid, proposal = world.waiting("gate")
    halted = world.halted()
    return {
        "list": ("GET", "/api/tasks", None),
        "submit": ("POST", "/api/tasks", {"workflow": "gate"}),
        "show": ("GET", f"/api/tasks/{tid}", None),
        "review": ("GET", f"/api/tasks/{tid}/review", None),
        "approve": ("POST", f"/api/tasks/{tid}/approve", {"proposal_hash": proposal}),
        "reject": ("POST", f"/api/tasks/{tid}/reject", {"reason_code": "other"}),
        "retry": ("POST", f"/api/tasks/{halted}/retry", {"reason": "again"}),
        "cancel": ("POST", f"/api/tasks/{halted}/cancel", {"reason": "stop"}),
        "evidence": ("POST", f"/api/tasks/{tid}/evidence", {"evidence": {"id": "doc-1"}}),
        "inbox": ("GET", "/api/inbox", None),
        "halted": ("GET", "/api/halted", None),
        "runs": ("GET", "/api/runs", None),
        "run": ("GET", "/api/runs/1", None),
    }


def _snapshot(world: World) -> tuple[object, ...]:
    store = world.engine.store
    ids = store.task_ids()
    return tuple(ids), tuple((r.version, r.status) for r in store.load_many(ids).values())


def _send(world: World, method: str, path: str, body: object, headers: dict[str, str]) -> object:
    return world.client.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Basic bWlhOnB3"},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer swt_" + "A" * 43},
    {"Authorization": "Bearer agent:reviewer"},
    {"Authorization": "Bearer " + "x" * 5000},
], ids=["none", "basic", "empty", "unknown", "agent-name", "long"])
def test_every_call_without_a_valid_token_is_401_and_changes_nothing(world: World, headers: dict[str, str]) -> None:
    """No token, another scheme, an empty, unknown or malformed token: 401 with WWW-Authenticate."""
    acts = _acts(world)
    before = _snapshot(world)
    for name, (method, path, body) in acts.items():
        r = _send(world, method, path, body, headers)
        refused(r, 401, "unauthenticated")  # type: ignore[arg-type]
        assert r.headers["www-authenticate"] == "Bearer", name  # type: ignore[attr-defined]
    assert _snapshot(world) == before


def test_a_revoked_token_or_a_removed_person_is_401_at_once(world: World) -> None:
    """Revoking mia's token, or removing ops, stops their next call (the engine authenticates again)."""
    acts = _acts(world)
    users = world.engine.users
    mia_token = next(t for t in users.tokens() if t.name == "mia" and t.revoked_at_ms is None)
    users.revoke_token(world.people.admin, mia_token.token_id)
    users.remove(world.people.admin, "ops")
    before = _snapshot(world)
    for who in ("mia", "ops"):
        for name, (method, path, body) in acts.items():
            line = refused(_send(world, method, path, body, world.auth(who)), 401)  # type: ignore[arg-type]
            assert "unknown or revoked" in line, name
    assert _snapshot(world) == before


def test_acting_as_another_person_is_403(world: World) -> None:
    """``as`` naming someone other than the token's person (or an agent) is refused, as --as is."""
    tid, proposal = world.waiting("gate")
    halted = world.halted()
    before = _snapshot(world)
    for as_name in ("bob", "agent:reviewer", "timer:expiry"):
        line = refused(world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": proposal, "as": as_name}, "mia"),
                       403, "forbidden")
        assert f"--as {as_name!r} is not the token's person ('mia')" in line
        refused(world.post(f"/api/tasks/{tid}/reject", {"reason_code": "other", "as": as_name}, "mia"), 403)
        refused(world.post(f"/api/tasks/{halted}/retry", {"reason": "x", "as": as_name}, "ops"), 403)
        refused(world.post(f"/api/tasks/{halted}/cancel", {"reason": "x", "as": as_name}, "ops"), 403)
        refused(world.post(f"/api/tasks/{tid}/evidence", {"evidence": {"id": "x"}, "as": as_name}, "ops"), 403)
    assert _snapshot(world) == before
    ok = world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": proposal, "as": "mia"}, "mia")
    assert ok.status_code == 200, ok.text


def test_the_wrong_role_is_403(world: World) -> None:
    """eve (a viewer) may neither approve nor reject; mia (no operator) may neither retry nor cancel."""
    tid, proposal = world.waiting("gate")
    halted = world.halted()
    before = _snapshot(world)
    assert "'eve' lacks the role 'maintainer' needed to approve" in refused(
        world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": proposal}, "eve"), 403, "forbidden")
    refused(world.post(f"/api/tasks/{tid}/reject", {"reason_code": "other"}, "eve"), 403, "forbidden")
    assert "'mia' lacks the role 'operator' needed to retry" in refused(
        world.post(f"/api/tasks/{halted}/retry", {"reason": "again"}, "mia"), 403)
    refused(world.post(f"/api/tasks/{halted}/cancel", {"reason": "stop"}, "mia"), 403)
    refused(world.post(f"/api/tasks/{tid}/cancel", {"reason": "stop"}, "eve"), 403)
    refused(world.post(f"/api/tasks/{tid}/evidence", {"evidence": {"id": "x"}}, "eve"), 403)
    assert _snapshot(world) == before


def test_the_wrong_scope_is_403(world: World) -> None:
    """finance:region=eu approves the eu payment and not the us one."""
    us, us_hash = world.waiting("payment", {"region": "us"})
    eu, eu_hash = world.waiting("payment", {"region": "eu"})
    before = _snapshot(world)
    assert "lacks the role 'finance:region=us'" in refused(
        world.post(f"/api/tasks/{us}/approve", {"proposal_hash": us_hash}, "fin-eu"), 403, "forbidden")
    refused(world.post(f"/api/tasks/{us}/reject", {"reason_code": "other"}, "fin-eu"), 403)
    assert _snapshot(world) == before
    assert world.post(f"/api/tasks/{eu}/approve", {"proposal_hash": eu_hash}, "fin-eu").status_code == 200


def test_the_author_of_the_work_may_not_sign_it_off(world: World) -> None:
    """bob proposed (duty's first step); bob, a maintainer too, may not sign off: 403; mia may."""
    tid, proposal = world.waiting("duty")
    assert world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": proposal}, "bob").status_code == 200
    world.settle()
    sign_off = world.engine.state(tid).current
    assert sign_off is not None and sign_off.step == "sign-off"
    before = _snapshot(world)
    assert "separation of duty" in refused(
        world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": sign_off.proposal_hash}, "bob"), 403, "forbidden")
    refused(world.post(f"/api/tasks/{tid}/reject", {"reason_code": "other"}, "bob"), 403)
    assert [t["task_id"] for t in world.get("/api/inbox", "bob").json()["tasks"]] == []
    assert _snapshot(world) == before
    r = world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": sign_off.proposal_hash}, "mia")
    assert (r.status_code, r.json()["status"]) == (200, "completed")


def test_an_agent_identity_never_approves_or_rejects(world: World) -> None:
    """A remote agent's identity holding the step's role too (maintainer, finance for its
    region) may neither approve nor reject: 403; no inbox lists it a task, and no review
    names it among those who may approve."""
    world.people.add("bot", "agent:queue=builds", "maintainer")
    world.people.add("eu-bot", "agent", "finance:region=eu")
    tid, proposal = world.waiting("gate")
    eu, eu_hash = world.waiting("payment", {"region": "eu"})
    before = _snapshot(world)
    for who, task, digest in (("bot", tid, proposal), ("eu-bot", eu, eu_hash)):
        line = refused(world.post(f"/api/tasks/{task}/approve", {"proposal_hash": digest}, who), 403, "forbidden")
        assert f"{who!r} is an agent identity (role 'agent') and may never approve" in line
        refused(world.post(f"/api/tasks/{task}/reject", {"reason_code": "other"}, who), 403, "forbidden")
        assert [t["task_id"] for t in world.get("/api/inbox", who).json()["tasks"]] == []
        assert world.get("/api/tasks?waiting_for_me=true", who).json()["tasks"] == []
        assert who not in world.get(f"/api/tasks/{task}/review", "mia").json()["approvers"]["people"]
    assert _snapshot(world) == before


def test_a_stale_hash_is_409(world: World) -> None:
    """A well-formed hash that is not the current proposal's: 409 stale, nothing changes."""
    tid, proposal = world.waiting("gate")
    before = _snapshot(world)
    other = "0" * 64 if proposal != "0" * 64 else "1" * 64
    line = refused(world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": other}, "mia"), 409, "stale")
    assert "is not the current proposal's" in line
    assert _snapshot(world) == before


def test_an_approval_that_loses_a_race_to_another_act_is_409(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """ops cancels the task between mia's read of it and her approval's commit: her commit
    meets a newer version, the engine reads the task again, finds nothing waiting, and the
    answer is 409 with only the cancel recorded."""
    tid, proposal = world.waiting("gate")
    store = world.engine.store
    append = store.append
    raced: list[int] = []

    def cancel_first(*args: object, **kwargs: object) -> object:
        if not raced:
            raced.append(world.engine.state(tid).version)
            world.engine.cancel(tid, world.engine.users.authenticate(world.people.tokens["ops"]), "superseded")
        return append(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "append", cancel_first)
    line = refused(world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": proposal}, "mia"), 409, "conflict")
    monkeypatch.undo()
    assert raced and "not allowed while the task is cancelled" in line, line
    st = world.engine.state(tid)
    assert (st.status, st.version) == (TaskStatus.CANCELLED, raced[0] + 1)
    assert [e.type for e in world.engine.events(tid)][-1] == "TaskCancelled"
    assert "ApprovalGranted" not in [e.type for e in world.engine.events(tid)]


def test_an_expired_approval_is_409(world: World) -> None:
    """Past the 1h window the approval is refused (expired); once the expiry timer has fired
    the task halted and nothing waits (not_waiting)."""
    tid, proposal = world.waiting("gate")
    world.engine.clock.advance(3601)  # type: ignore[attr-defined]
    before = _snapshot(world)
    line = refused(world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": proposal}, "mia"), 409, "expired")
    assert "the approval window closed at" in line
    assert _snapshot(world) == before
    world.settle()
    assert world.engine.state(tid).status is TaskStatus.HALTED
    refused(world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": proposal}, "mia"), 409, "not_waiting")
