"""The remote-agent routes over HTTP (a Starlette app built here, on every backend): each
status code, the long poll, and no 5xx for any body."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette

from remote.support import People, good, people, remote_flow, settle
from statewright.runtime.clock import FakeClock
from statewright.runtime.engine import Engine
from statewright.server.agents import agent_routes


@pytest.fixture
def engine_defaults(tmp_path: Path) -> Callable[[], dict[str, Any]]:
    clock = FakeClock()
    return lambda: {"clock": clock, "workspace_root": tmp_path / "ws"}


@pytest.fixture
def engine(open_engine: Callable[..., Engine]) -> Engine:
    return open_engine()


@pytest.fixture
def who(engine: Engine) -> People:
    return people(engine)


@pytest.fixture
def client(engine: Engine, serve: Callable[[Starlette], str]) -> Iterator[httpx.Client]:
    url = serve(Starlette(routes=agent_routes(engine, max_wait_seconds=0.5, poll_seconds=0.01)))
    with httpx.Client(base_url=url, timeout=30) as c:
        yield c


def bearer(p: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {p.token}"}


def test_claim_heartbeat_report_over_http(engine: Engine, who: People, client: httpx.Client) -> None:
    tid = engine.submit(remote_flow())
    assert client.post("/api/agents/builds/claim", headers=bearer(who.builder)).status_code == 204
    settle(engine)
    r = client.post("/api/agents/builds/claim", headers=bearer(who.builder))
    assert r.status_code == 200
    work = r.json()
    assert work["task_id"] == tid and work["step"] == "review" and work["token"].startswith("swq_")
    assert work["brief"]["instructions"] == "Review the change." and work["heartbeat_seconds"] == 30.0
    hb = client.post("/api/agents/heartbeat", headers=bearer(who.builder), json={"token": work["token"]})
    assert hb.status_code == 200 and hb.json()["deadline_at_ms"] == engine.clock.now_ms() + 30_000
    done = client.post("/api/agents/report", headers=bearer(who.builder),
                       json={"token": work["token"], "verdict": good(), "note": "fine"})
    assert done.status_code == 200 and done.json() == {"task_id": tid, "status": "running", "repair": None,
                                                       "reason": None}
    version = engine.state(tid).version
    again = client.post("/api/agents/report", headers=bearer(who.builder), json={"token": work["token"],
                                                                                 "verdict": good()})
    late = client.post("/api/agents/heartbeat", headers=bearer(who.builder), json={"token": work["token"]})
    assert (again.status_code, late.status_code) == (409, 409)
    assert "not open" in again.json()["error"]
    assert engine.state(tid).version == version
    settle(engine)
    assert engine.state(tid).status.value == "completed"


def test_a_bad_verdict_answers_with_the_repair(engine: Engine, who: People, client: httpx.Client) -> None:
    engine.submit(remote_flow())
    settle(engine)
    work = client.post("/api/agents/builds/claim", headers=bearer(who.builder)).json()
    r = client.post("/api/agents/report", headers=bearer(who.builder),
                    json={"token": work["token"], "verdict": {"approved": 1}})
    assert r.status_code == 200 and "approved" in r.json()["repair"]
    settle(engine)
    again = client.post("/api/agents/builds/claim", headers=bearer(who.builder)).json()
    assert "repair" in again["brief"]
    failed = client.post("/api/agents/report", headers=bearer(who.builder),
                         json={"token": again["token"], "error": "exit_status", "detail": "exit 2"})
    assert failed.status_code == 200 and failed.json()["reason"] == "exit_status"


def test_who_gets_401_and_403(engine: Engine, who: People, client: httpx.Client) -> None:
    engine.submit(remote_flow())
    settle(engine)
    path = "/api/agents/builds/claim"
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer swt_" + "x" * 43},
                    {"Authorization": "Bearer nonsense"}):
        r = client.post(path, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    for p in (who.nobody, who.stranger, who.admin):
        assert client.post(path, headers=bearer(p)).status_code == 403
    work = client.post(path, headers=bearer(who.builder)).json()
    other = client.post("/api/agents/report", headers=bearer(who.other), json={"token": work["token"],
                                                                               "verdict": good()})
    assert other.status_code == 403
    engine.users.revoke_token(who.admin, who.builder.token_id)
    revoked = client.post("/api/agents/heartbeat", headers=bearer(who.builder), json={"token": work["token"]})
    assert revoked.status_code == 401


MALFORMED: list[tuple[str, bytes | None]] = [
    ("/api/agents/builds/claim?wait=abc", None),
    ("/api/agents/builds/claim?wait=-1", None),
    ("/api/agents/builds/claim?wait=nan", None),
    ("/api/agents/Bad%20Queue/claim", None),
    ("/api/agents/heartbeat", b"not json"),
    ("/api/agents/heartbeat", b"[1, 2]"),
    ("/api/agents/heartbeat", b'{"token": 7}'),
    ("/api/agents/heartbeat", b'{"token": "swq_x", "extra": 1}'),
    ("/api/agents/report", b'{"token": "swq_x", "verdict": {}, "error": "timeout"}'),
    ("/api/agents/report", b'{"token": "swq_x", "error": 5}'),
    ("/api/agents/report", b'{"token": "swq_x", "verdict": [1]}'),
    ("/api/agents/report", b'{"token": "swq_x", "verdict": {}, "note": 3}'),
    ("/api/agents/report", b'{"token": "swq_x", "error": "not_a_code"}'),
    ("/api/agents/report", b'{"token": "swq_x", "verdict": {"a": NaN}}'),
    ("/api/agents/report", b'{"token": "' + b"swq_" + b"a" * 200 + b'", "verdict": {}}'),
]


def test_malformed_requests_get_422(who: People, client: httpx.Client) -> None:
    for path, body in MALFORMED:
        r = client.post(path, headers=bearer(who.builder), content=body)
        assert r.status_code == 422, (path, body, r.text)
        assert r.json()["error"]


def test_an_unknown_task_token_gets_409(who: People, client: httpx.Client) -> None:
    r = client.post("/api/agents/report", headers=bearer(who.builder),
                    json={"token": "swq_" + "b" * 43, "verdict": good()})
    assert r.status_code == 409


def test_the_long_poll_answers_when_work_arrives(engine: Engine, who: People, client: httpx.Client,
                                                serve: Callable[[Starlette], str]) -> None:
    """A claim held open gets the attempt parked while it waits; one with nothing to find
    answers 204 once its (capped) wait is over."""
    patient = serve(Starlette(routes=agent_routes(engine, max_wait_seconds=20.0, poll_seconds=0.01)))
    tid = engine.submit(remote_flow())
    answers: list[Any] = []
    held = threading.Thread(target=lambda: answers.append(
        httpx.post(f"{patient}/api/agents/builds/claim?wait=20", headers=bearer(who.builder), timeout=30)))
    held.start()
    settle(engine)  # parks the attempt while the claim is held
    held.join()
    assert answers[0].status_code == 200 and answers[0].json()["task_id"] == tid
    capped = client.post("/api/agents/builds/claim?wait=3600", headers=bearer(who.builder))
    assert capped.status_code == 204  # held for the cap (0.5 s here), not an hour


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/api/agents/heartbeat", "/api/agents/report", "/api/agents/builds/claim"]),
       body=st.one_of(_json, st.fixed_dictionaries({"token": st.text(max_size=60)}, optional={
           "verdict": _json, "error": _json, "detail": _json, "note": _json})))
def test_no_body_gets_a_5xx(who: People, client: httpx.Client, path: str, body: Any) -> None:
    r = client.post(path, headers=bearer(who.builder), content=json.dumps(body))
    assert r.status_code in (200, 204, 401, 403, 409, 422), r.text
