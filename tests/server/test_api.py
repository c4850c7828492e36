"""Every endpoint of the HTTP API and the status codes it answers with, on every backend."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from server.support import World, refused
from statewright.machine.state import TaskStatus


def test_get_tasks_lists_and_filters_by_status_workflow_age_and_waiting_for_me(world: World) -> None:
    """GET /api/tasks lists tasks oldest first and filters by status, workflow, age and waiting_for_me."""
    gate, _ = world.waiting("gate")
    halted = world.halted()
    world.engine.clock.advance(120)  # type: ignore[attr-defined]
    eu, _ = world.waiting("payment", {"region": "eu"})
    us, _ = world.waiting("payment", {"region": "us"})

    def ids(query: str, who: str = "mia") -> list[str]:
        r = world.get(f"/api/tasks{query}", who)
        assert r.status_code == 200, r.text
        return [t["task_id"] for t in r.json()["tasks"]]

    assert ids("") == [gate, halted, eu, us]
    assert ids("?status=halted") == [halted]
    assert ids("?workflow=payment") == [eu, us]
    assert ids("?min_age_seconds=100") == [gate, halted]
    assert ids("?max_age_seconds=100") == [eu, us]
    assert ids("?limit=1") == [gate]
    assert ids("?waiting_for_me=true") == [gate]
    assert ids("?waiting_for_me=true", "fin-eu") == [eu]
    row = world.get("/api/tasks?status=halted", "eve").json()["tasks"][0]
    assert row["step"] == "fail" and row["halt_reason"] and row["why"].startswith(row["halt_reason"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", row["updated"]), row["updated"]
    for bad in ("?status=sleeping", "?min_age_seconds=soon", "?limit=0", "?limit=5000", "?waiting_for_me=maybe",
                "?waiting_for_me=true&status=halted", "?max_age_seconds=-1"):
        refused(world.get(f"/api/tasks{bad}", "mia"), 422, "invalid")


def test_post_tasks_submits_a_served_workflow_and_a_key_repeats_only_the_same_submission(world: World) -> None:
    """POST /api/tasks: 201 with the new task, 200 with the same one for the same key and
    input, 409 for the key with other input, 422 for an unknown workflow or bad input."""
    body = {"workflow": "payment", "input": {"region": "eu", "amount": 5}, "key": "order-7"}
    first = world.post("/api/tasks", body, "eve")
    assert first.status_code == 201, first.text
    tid = first.json()["task_id"]
    assert first.json() == {"task_id": tid, "status": "awaiting_approval", "created": True}
    again = world.post("/api/tasks", body, "eve")
    assert (again.status_code, again.json()["task_id"], again.json()["created"]) == (200, tid, False)
    other = world.post("/api/tasks", {**body, "input": {"region": "eu", "amount": 6}}, "eve")
    line = refused(other, 409, "key_reused")
    assert line.startswith(f"key 'order-7' already names task {tid}, submitted with other input")
    assert other.json()["task_id"] == tid
    assert "no workflow named 'nope' is served; these are: broken, duty, gate, payment" in refused(
        world.post("/api/tasks", {"workflow": "nope"}, "eve"), 422)
    assert "input" in refused(world.post("/api/tasks", {"workflow": "payment", "input": {"amount": 1}}, "eve"), 422)
    refused(world.post("/api/tasks", {"workflow": "payment", "extra": 1}, "eve"), 422)
    refused(world.post("/api/tasks", ["payment"], "eve"), 422)
    refused(world.client.post("/api/tasks", content=b"{not json", headers=world.auth("eve")), 422)
    refused(world.post("/api/tasks", {"workflow": "payment"}), 401, "unauthenticated")
    assert len(world.engine.store.task_ids()) == 1


def test_get_task_shows_its_state_proposal_hash_and_history(world: World) -> None:
    """GET /api/tasks/{id}: the state, the proposal hash while it waits, the history; 404 for none."""
    tid, proposal = world.waiting("gate")
    r = world.get(f"/api/tasks/{tid}", "eve")
    assert r.status_code == 200
    body = r.json()
    assert (body["status"], body["step"], body["proposal_hash"]) == ("awaiting_approval", "approve", proposal)
    assert [a["step"] for a in body["state"]["attempts"]] == ["build"]
    assert body["history"][0].startswith("ok   build") and "waits for approval" in body["history"][-1]
    assert body["events"][0]["type"] == "TaskSubmitted"
    assert "no task with id 't-missing'" in refused(world.get("/api/tasks/t-missing", "eve"), 404, "not_found")
    refused(world.get(f"/api/tasks/{tid}"), 401)


def test_review_is_what_statewright_review_shows(world: World) -> None:
    """GET /api/tasks/{id}/review is runtime.review's document: proposal, hash, approvers, codes, expiry."""
    tid, proposal = world.waiting("gate")
    r = world.get(f"/api/tasks/{tid}/review", "mia")
    assert r.status_code == 200
    body = r.json()
    assert body == {**world.engine.review(tid), "input": body["input"]}
    assert body["proposal_hash"] == proposal
    assert body["approvers"] == {"role": "maintainer", "people": ["bob", "mia"], "separated": []}
    assert body["expires"].endswith("UTC") and "insufficient_evidence" in body["reject_codes"]
    refused(world.get("/api/tasks/t-nope/review", "mia"), 404)
    refused(world.get(f"/api/tasks/{tid}/review"), 401)


def test_approve_moves_the_task_on(world: World) -> None:
    """POST approve with the reviewed hash: 200, the task runs on and completes."""
    tid, proposal = world.waiting("gate")
    r = world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": proposal, "comment": "ok"}, "mia")
    assert r.status_code == 200, r.text
    assert r.json() == {"task_id": tid, "status": "running", "version": r.json()["version"], "by": "mia"}
    world.settle()
    assert world.engine.state(tid).status is TaskStatus.COMPLETED
    assert "a completed task cannot be approved or rejected" in refused(
        world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": proposal}, "mia"), 409, "not_waiting")


def test_approve_refuses_a_malformed_body_with_422(world: World) -> None:
    """A missing or malformed hash, an unknown field, or a body that is not a JSON object is 422."""
    tid, proposal = world.waiting("gate")
    before = world.engine.state(tid).version
    for body in ({}, {"proposal_hash": "abc"}, {"proposal_hash": 7}, {"proposal_hash": proposal, "x": 1},
                 {"proposal_hash": proposal, "comment": ["no"]}, [proposal], "text", None):
        refused(world.post(f"/api/tasks/{tid}/approve", body, "mia"), 422, "invalid")
    refused(world.client.post(f"/api/tasks/{tid}/approve", content=b"\xff\xfe", headers=world.auth("mia")), 422)
    refused(world.client.post(f"/api/tasks/{tid}/approve", content=b"[" * 10000, headers=world.auth("mia")), 422)
    assert world.engine.state(tid).version == before


def test_reject_takes_a_reason_code_of_the_step(world: World) -> None:
    """POST reject: an unknown code is 422; a known one halts the task with it."""
    tid, _ = world.waiting("gate")
    assert "use one of: insufficient_evidence" in refused(
        world.post(f"/api/tasks/{tid}/reject", {"reason_code": "meh"}, "mia"), 422)
    r = world.post(f"/api/tasks/{tid}/reject", {"reason_code": "policy_denial", "comment": "no"}, "mia")
    assert (r.status_code, r.json()["status"]) == (200, "halted")
    st = world.engine.state(tid)
    assert (st.halt.reason, st.halt.detail) == ("policy_denial", "no")
    refused(world.post("/api/tasks/t-none/reject", {"reason_code": "other"}, "mia"), 404)


def test_retry_and_cancel_are_an_operators_acts(world: World) -> None:
    """retry re-runs a halted task; cancel ends one; a task that cannot take the act is 409."""
    tid = world.halted()
    r = world.post(f"/api/tasks/{tid}/retry", {"reason": "flaky runner"}, "ops")
    assert r.status_code == 200, r.text
    world.settle()
    assert world.engine.state(tid).status is TaskStatus.HALTED  # it fails again
    r = world.post(f"/api/tasks/{tid}/cancel", {"reason": "give up"}, "ops")
    assert (r.status_code, r.json()["status"]) == (200, "cancelled")
    assert "a cancelled task cannot be retried" in refused(
        world.post(f"/api/tasks/{tid}/retry", {"reason": "again"}, "ops"), 409, "conflict")
    refused(world.post(f"/api/tasks/{tid}/cancel", {"reason": "again"}, "ops"), 409, "conflict")
    refused(world.post(f"/api/tasks/{tid}/cancel", {"reason": ""}, "ops"), 422)
    refused(world.post(f"/api/tasks/{tid}/cancel", {}, "ops"), 422)
    refused(world.post("/api/tasks/t-none/cancel", {"reason": "x"}, "ops"), 404)


def test_evidence_is_an_operators_act_that_rebuilds_a_waiting_proposal(world: World) -> None:
    """POST evidence: 200 with the proposal's new hash, the old hash is then 409 stale; no
    operator role 403, no such task 404, an ended task 409, a malformed body 422."""
    tid, old = world.waiting("gate")
    body = {"evidence": {"id": "callback-7", "kind": "verified_callback"}, "note": "called back"}
    r = world.post(f"/api/tasks/{tid}/evidence", body, "ops")
    assert r.status_code == 200, r.text
    new = r.json()["proposal_hash"]
    assert r.json() == {"task_id": tid, "status": "awaiting_approval", "version": r.json()["version"], "by": "ops",
                        "proposal_hash": new}
    assert new != old and new == world.engine.state(tid).current.proposal_hash
    [added] = world.engine.state(tid).evidence
    assert (added.actor, dict(added.evidence), added.note) == ("ops", body["evidence"], "called back")
    assert [e["evidence"] for e in world.get(f"/api/tasks/{tid}/review", "mia").json()["evidence"]] == [
        body["evidence"]]
    assert "is not the current proposal" in refused(
        world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": old}, "mia"), 409, "stale")
    before = world.engine.state(tid).version
    assert "lacks the role 'operator' needed to supply evidence" in refused(
        world.post(f"/api/tasks/{tid}/evidence", body, "mia"), 403, "forbidden")
    for bad in ({}, {"evidence": {}}, {"evidence": [1]}, {"evidence": "x"}, {"evidence": {"a": 1}, "note": 3},
                {"evidence": {"a": 1}, "extra": True}, ["evidence"]):
        refused(world.post(f"/api/tasks/{tid}/evidence", bad, "ops"), 422, "invalid")
    refused(world.client.post(f"/api/tasks/{tid}/evidence", content=b'{"evidence": {"n": NaN}}',
                              headers=world.auth("ops")), 422)
    assert world.engine.state(tid).version == before
    refused(world.post("/api/tasks/t-none/evidence", body, "ops"), 404, "not_found")
    world.post(f"/api/tasks/{tid}/cancel", {"reason": "withdrawn"}, "ops")
    assert "evidence goes to a task that has not ended" in refused(
        world.post(f"/api/tasks/{tid}/evidence", body, "ops"), 409, "conflict")
    refused(world.post(f"/api/tasks/{tid}/evidence", body), 401, "unauthenticated")
    halted = world.halted()
    r = world.post(f"/api/tasks/{halted}/evidence", body, "ops")
    assert (r.status_code, r.json()["status"], "proposal_hash" in r.json()) == (200, "halted", False)


def test_inbox_lists_what_the_caller_may_approve_and_halted_the_operator_queue(world: World) -> None:
    """GET /api/inbox is the engine's may_approve per caller; GET /api/halted the halted tasks."""
    gate, _ = world.waiting("gate")
    eu, _ = world.waiting("payment", {"region": "eu"})
    world.waiting("payment", {"region": "us"})
    halted = world.halted()

    def inbox(who: str) -> list[str]:
        r = world.get("/api/inbox", who)
        assert r.status_code == 200
        return [t["task_id"] for t in r.json()["tasks"]]

    assert inbox("mia") == [gate]
    assert inbox("fin-eu") == [eu]
    assert inbox("eve") == []
    assert [t["task_id"] for t in world.get("/api/halted", "eve").json()["tasks"]] == [halted]
    refused(world.get("/api/inbox"), 401)
    refused(world.get("/api/halted"), 401)


def test_runs_are_read_from_the_loop_database(world: World, tmp_path: Path) -> None:
    """GET /api/runs and /api/runs/{id}: the outer loop's runs from the loop database; 404 for none."""
    from loop.helpers import FakeClock, run_loop, write_loop

    assert world.get("/api/runs", "eve").json() == {"runs": [], "loop_db": str(world.loop_db)}  # no file yet
    refused(world.get("/api/runs/1", "eve"), 404)
    outcome = run_loop(write_loop(tmp_path / "loop", [{"id": "88", "fix_on_attempt": 1}]), world.loop_db,
                       FakeClock())
    listed = world.get("/api/runs", "eve").json()["runs"]
    assert [(r["run"], r["status"]) for r in listed] == [(outcome.run_id, "done")]
    detail = world.get(f"/api/runs/{outcome.run_id}", "eve").json()
    assert detail["run"] == outcome.run_id and detail["lines"][0]["state"] == "idle"
    assert detail["lines"][-1]["next_state"] == "done"
    documented = world.client.get("/openapi.json").json()["components"]["schemas"]["Run"]["properties"]["status"]
    assert {r["status"] for r in listed} <= set(documented["enum"]) and "awaiting_human" in documented["enum"]
    for missing in ("999", "abc", "9" * 40):
        refused(world.get(f"/api/runs/{missing}", "eve"), 404)
    refused(world.get("/api/runs?limit=0", "eve"), 422)
    refused(world.get("/api/runs"), 401)


def test_a_loop_database_that_is_not_statewrights_is_503(world: World) -> None:
    """A --loop-db holding someone else's tables: 503 naming it, and the file is left as it was."""
    import sqlite3

    with sqlite3.connect(world.loop_db) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.close()
    before = world.loop_db.read_bytes()
    assert "is not a statewright database" in refused(world.get("/api/runs", "eve"), 503, "unavailable")
    refused(world.get("/api/runs/1", "eve"), 503)
    assert world.loop_db.read_bytes() == before


def test_metrics_count_tasks_approvals_steps_attempts_and_failures(world: World) -> None:
    """GET /metrics needs no token and says, in Prometheus text, what the store holds."""
    tid, proposal = world.waiting("gate")
    world.engine.clock.advance(90)  # type: ignore[attr-defined]
    world.post(f"/api/tasks/{tid}/approve", {"proposal_hash": proposal}, "mia")
    world.settle()
    world.waiting("gate")
    world.halted()
    world.engine.clock.advance(30)  # type: ignore[attr-defined]
    r = world.client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = set(r.text.splitlines())
    for line in (
        'statewright_tasks{status="completed"} 1', 'statewright_tasks{status="awaiting_approval"} 1',
        'statewright_tasks{status="halted"} 1',
        'statewright_tasks_by_age{age="under_1m",status="awaiting_approval"} 1',
        'statewright_task_oldest_age_seconds{status="halted"} 31',
        'statewright_approval_waiting_seconds_count 1', 'statewright_approval_waiting_seconds_sum 32',
        'statewright_approval_queue_seconds_count 1', 'statewright_approval_queue_seconds_sum 91',
        'statewright_approval_queue_seconds_bucket{le="60"} 0', 'statewright_approval_queue_seconds_bucket{le="300"} 1',
        'statewright_attempts_total{kind="human",outcome="passed"} 1',
        'statewright_attempts_total{kind="code",outcome="passed"} 3',
        'statewright_attempts_total{kind="code",outcome="failed"} 1',
        'statewright_step_seconds_count{kind="code"} 4',
        'statewright_failures_total{reason="exit_status"} 1',
    ):
        assert line in lines, (line, r.text)


def test_openapi_describes_every_route(world: World) -> None:
    """/openapi.json needs no token and names every path the app serves, with its methods,
    but the web console's HTML pages and form posts (README: The web console)."""
    from statewright.server.console import console_routes

    def paths(routes: Any) -> set[tuple[str, str]]:
        return {(route.path, m.lower()) for route in routes for m in (route.methods or ()) if m != "HEAD"}

    doc = world.client.get("/openapi.json").json()
    served = paths(world.client.app.routes) - paths(console_routes(world.client.app.state.api))  # type: ignore[attr-defined]
    described = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    assert served == described
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["responses"], (path, method)


def test_every_route_of_a_task_answers_404_for_a_task_that_is_not_there(world: World) -> None:
    """Each read and act on a task id the store does not hold: 404 naming it, nothing made."""
    digest = "0" * 64
    calls = [("GET", "", None), ("GET", "/review", None), ("POST", "/approve", {"proposal_hash": digest}),
             ("POST", "/reject", {"reason_code": "other"}), ("POST", "/retry", {"reason": "again"}),
             ("POST", "/cancel", {"reason": "stop"}), ("POST", "/evidence", {"evidence": {"id": "doc-1"}})]
    for method, tail, body in calls:
        r = world.client.request(method, f"/api/tasks/t-0000000000000000000{tail}", json=body,
                                 headers=world.auth("ops"))
        assert "no task with id 't-0000000000000000000'" in refused(r, 404, "not_found"), (method, tail)
    assert world.engine.store.task_ids() == []


def test_unknown_paths_and_methods_are_json_refusals(world: World) -> None:
    refused(world.get("/api/nothing", "eve"), 404)
    refused(world.client.delete("/api/tasks", headers=world.auth("eve")), 405)
