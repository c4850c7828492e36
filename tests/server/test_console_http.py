"""The web console over plain HTTP, on every backend: signing in, the session cookie, CSRF,
escaping, the security headers, and the acts' refusals (the browser tests drive the same
pages in Chromium)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
from starlette.testclient import TestClient

from server.console_agents import PAYLOADS
from server.console_support import console_workflows, csrf_of, injected, markup_and_text, post_form, sign_in
from server.support import World
from statewright.machine.state import TaskStatus
from statewright.runtime.worker import Worker

PAGES = ("/", "/inbox", "/halted", "/runs")


def test_pages_need_a_session_and_the_login_form_signs_in_with_a_strict_http_only_cookie(world: World) -> None:
    """Every page sends a stranger to /login (keeping where they were going); a good token
    signs in with an HttpOnly, SameSite=Strict cookie (not Secure over plain HTTP)."""
    for path in (*PAGES, "/tasks/t-x"):
        r = world.client.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), (path, r.status_code)
    r = sign_in(world.client, world.people.tokens["mia"], "/inbox")
    assert (r.status_code, r.headers["location"]) == (303, "/inbox")
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("statewright_session=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Secure" not in cookie and world.people.tokens["mia"] not in cookie
    for path in PAGES:
        page = world.client.get(path)
        assert page.status_code == 200 and ">mia<" in page.text, path


def test_the_session_cookie_is_secure_over_tls(world: World) -> None:
    """Served over https, the session cookie is marked Secure."""
    client = TestClient(world.client.app, base_url="https://testserver")
    r = sign_in(client, world.people.tokens["eve"])
    assert r.status_code == 303 and "Secure" in r.headers["set-cookie"]


def test_a_bad_token_a_forged_login_and_an_open_redirect_are_refused(world: World) -> None:
    """A wrong token is 401 with the form again; a login post without the login form's CSRF
    token is 403; ``next`` outside this site goes to the dashboard instead."""
    r = sign_in(world.client, "swt_" + "x" * 43)
    assert r.status_code == 401 and "Not signed in" in r.text and "set-cookie" not in {
        k.lower() for k in r.headers if r.headers[k].startswith("statewright_session")}
    forged = world.client.post("/login", data={"token": world.people.tokens["mia"]}, follow_redirects=False)
    assert forged.status_code == 403 and "statewright_session" not in forged.headers.get("set-cookie", "")
    for bad in ("//evil.example/x", "https://evil.example", "/\\evil.example"):
        r = sign_in(world.client, world.people.tokens["mia"], bad)
        assert r.headers["location"] == "/", bad


def test_every_page_has_a_strict_content_security_policy(world: World) -> None:
    """Pages, the login form and the script itself carry a CSP whose script-src is 'self'
    only (no 'unsafe-inline'), and the pages hold no inline script or inline handler."""
    sign_in(world.client, world.people.tokens["mia"])
    tid, _ = world.waiting("gate")
    for path in (*PAGES, f"/tasks/{tid}", "/login", "/console/console.js"):
        r = world.client.get(path)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp, path
        assert r.headers["x-content-type-options"] == "nosniff"
        if path != "/console/console.js":
            assert re.search(r"<script(?![^>]*\bsrc=)", r.text) is None, path
            assert re.search(r"\son[a-z]+\s*=", r.text) is None, path


def test_a_form_post_without_the_csrf_token_is_refused_and_changes_nothing(world: World) -> None:
    """approve, reject, retry, cancel and sign-out without the session's csrf_token (or with
    another session's) answer 403 and leave the task as it was."""
    tid, proposal = world.waiting("gate")
    halted = world.halted()
    other = TestClient(world.client.app)
    sign_in(other, world.people.tokens["ops"])
    foreign = csrf_of(other.get("/").text)
    sign_in(world.client, world.people.tokens["ops"])
    world.people.add("lead", "maintainer", "operator")
    sign_in(world.client, world.people.tokens["lead"])
    for csrf in (None, "", foreign):
        extra = {} if csrf is None else {"csrf_token": csrf}
        for path, fields in ((f"/tasks/{tid}/approve", {"proposal_hash": proposal}),
                             (f"/tasks/{tid}/reject", {"reason_code": "other"}),
                             (f"/tasks/{halted}/retry", {"reason": "again"}),
                             (f"/tasks/{tid}/cancel", {"reason": "stop"}), ("/logout", {})):
            r = world.client.post(path, data={**fields, **extra}, follow_redirects=False)
            assert r.status_code == 403 and "csrf_token" in r.text, (path, csrf, r.status_code)
    assert world.engine.state(tid).status is TaskStatus.AWAITING_APPROVAL
    assert world.engine.state(halted).status is TaskStatus.HALTED
    assert world.client.get("/").status_code == 200  # still signed in
    stranger = TestClient(world.client.app)
    r = stranger.post(f"/tasks/{tid}/approve", data={"proposal_hash": proposal, "csrf_token": foreign})
    assert r.status_code == 403 and world.engine.state(tid).status is TaskStatus.AWAITING_APPROVAL


def test_approve_from_the_page_and_a_stale_page_is_refused_saying_so(world: World) -> None:
    """The approve form quotes the hash it showed: after evidence changed the proposal, the
    old page's approval is refused (409) and the page says so and shows the new hash; the new
    one approves."""
    tid, old = world.waiting("gate")
    sign_in(world.client, world.people.tokens["mia"])
    page = world.client.get(f"/tasks/{tid}")
    assert old in page.text and "Approve proposal" in page.text
    ops = world.engine.users.authenticate(world.people.tokens["ops"])
    world.engine.add_evidence(tid, ops, {"ticket": "T-1"}, note="late")
    new = world.engine.state(tid).current.proposal_hash  # type: ignore[union-attr]
    r = world.client.post(f"/tasks/{tid}/approve", data={"csrf_token": csrf_of(page.text), "proposal_hash": old},
                          follow_redirects=False)
    assert r.status_code == 409 and "The proposal changed while the page was open" in r.text and new in r.text
    assert world.engine.state(tid).status is TaskStatus.AWAITING_APPROVAL
    r = world.client.post(f"/tasks/{tid}/approve", data={"csrf_token": csrf_of(r.text), "proposal_hash": new},
                          follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, f"/tasks/{tid}?done=approved")
    assert world.engine.state(tid).status is not TaskStatus.AWAITING_APPROVAL
    assert "Approved." in world.client.get(r.headers["location"]).text


def test_acts_refused_by_the_engine_show_why_and_change_nothing(world: World) -> None:
    """A viewer's approval is 403; reject without a reason code, retry or cancel without a
    reason is 422; an unknown task is 404: each a page saying why, the task unchanged."""
    tid, proposal = world.waiting("gate")
    halted = world.halted()
    sign_in(world.client, world.people.tokens["eve"])
    r = post_form(world.client, f"/tasks/{tid}/approve", {"proposal_hash": proposal})
    assert r.status_code == 403 and "maintainer" in r.text
    sign_in(world.client, world.people.tokens["mia"])
    assert post_form(world.client, f"/tasks/{tid}/reject", {"reason_code": ""}).status_code == 422
    sign_in(world.client, world.people.tokens["ops"])
    for act, task in (("retry", halted), ("cancel", halted), ("cancel", tid)):
        r = post_form(world.client, f"/tasks/{task}/{act}", {"reason": "   "})
        assert r.status_code == 422 and f"{act} needs a reason" in r.text, act
    assert post_form(world.client, "/tasks/t-none/retry", {"reason": "x"}).status_code == 404
    assert world.engine.state(tid).status is TaskStatus.AWAITING_APPROVAL
    assert world.engine.state(halted).status is TaskStatus.HALTED


def test_reject_retry_and_cancel_from_the_pages(world: World) -> None:
    """Reject with a reason code and comment, retry a halted task and cancel another, each
    recorded with the signed-in person and the reason."""
    tid, _ = world.waiting("gate")
    halted, other = world.halted(), world.halted()
    sign_in(world.client, world.people.tokens["mia"])
    r = post_form(world.client, f"/tasks/{tid}/reject", {"reason_code": "policy_denial", "comment": "no"},
                  csrf_from=f"/tasks/{tid}")
    assert r.status_code == 303
    assert world.engine.state(tid).attempts[-1].reason == "policy_denial"
    sign_in(world.client, world.people.tokens["ops"])
    r = post_form(world.client, f"/tasks/{halted}/retry", {"reason": "the flake is fixed", "back": "halted"},
                  csrf_from="/halted")
    assert (r.status_code, r.headers["location"]) == (303, "/halted?done=retried")
    assert post_form(world.client, f"/tasks/{other}/cancel", {"reason": "not needed"}).status_code == 303
    acts = {(o.action, o.actor, o.reason) for t in (halted, other) for o in world.engine.state(t).operator_actions}
    assert acts == {("retry", "ops", "the flake is fixed"), ("cancel", "ops", "not needed")}


def test_sign_out_and_a_revoked_token_end_the_session(world: World) -> None:
    """Signing out forgets the session; revoking the token signs its browser out at once."""
    sign_in(world.client, world.people.tokens["mia"])
    assert post_form(world.client, "/logout", {}).status_code == 303
    assert world.client.get("/", follow_redirects=False).status_code == 303
    sign_in(world.client, world.people.tokens["eve"])
    assert world.client.get("/", follow_redirects=False).status_code == 200
    eve = world.engine.users.authenticate(world.people.tokens["eve"])
    world.engine.users.revoke_token(world.people.admin, eve.token_id)
    assert world.client.get("/", follow_redirects=False).status_code == 303


def test_hostile_input_verdicts_and_notes_are_shown_escaped(world: World) -> None:
    """Every payload in a task's input, an agent's verdict and its note reaches the task page
    only escaped: never as markup."""
    wf = console_workflows()["hostile"]
    tid = world.engine.submit(wf, {p[:3] + str(i): p for i, p in enumerate(PAYLOADS)} | {"all": list(PAYLOADS)})
    Worker(world.engine).run(until_idle=True)
    assert world.engine.state(tid).status is TaskStatus.AWAITING_APPROVAL
    sign_in(world.client, world.people.tokens["mia"])
    for path in (f"/tasks/{tid}", "/inbox", "/"):
        assert injected(world.client.get(path).text) == [], path
    _, text = markup_and_text(world.client.get(f"/tasks/{tid}").text)
    for p in PAYLOADS:  # shown as the text it is: in the input, the verdict and the note
        assert text.count(p) >= 3 or text.count(json.dumps(p, ensure_ascii=False)[1:-1]) >= 3, p
    assert len(PAYLOADS) >= 20


def test_the_dashboard_counts_by_state_and_age_and_alerts_on_a_task_over_its_allowance(world: World) -> None:
    """Counts by state, open tasks by time in state, the approval queue's longest wait, the
    oldest first, halts grouped by failure code, and an alert for the approval that has
    waited longer than its step's expiry (1h) allows (no worker has fired the expiry yet)."""
    halted = world.halted()
    old, _ = world.waiting("gate")
    fresh, _ = world.waiting("duty")  # its step sets no bound
    world.engine.clock.advance(2 * 3600)  # type: ignore[attr-defined]
    sign_in(world.client, world.people.tokens["eve"])
    page = world.client.get("/").text
    _, text = markup_and_text(page)
    text = " ".join(text.split())
    assert "awaiting approval 2" in text and "halted 1" in text and "completed 0" in text
    assert "2 waiting; the longest for 2h" in text
    assert "awaiting approval 0 2 0 0" in text and "halted 0 1 0 0" in text  # by time in state
    late = page[page.index('id="h-late"'):page.index('id="h-queue"')]
    assert old in late and fresh not in late and "1h" in late
    oldest = page[page.index('id="h-oldest"'):page.index('id="h-halted"')]
    assert oldest.index(old) < oldest.index(fresh)
    assert "exit_status" in page[page.index('id="h-halted"'):] and halted in page


def test_loop_runs_show_their_record_parked_items_budgets_and_terminal_reason(world: World, tmp_path: Path) -> None:
    """/runs lists the loop's runs; /runs/{id} shows the record line by line, each item with
    its standing (a parked one marked), the budgets as bars, and why the run ended."""
    from loop.helpers import FakeClock, run_loop, write_loop

    sign_in(world.client, world.people.tokens["eve"])
    assert "No loop runs recorded" in world.client.get("/runs").text
    outcome = run_loop(write_loop(tmp_path / "loop", [{"id": "88", "fix_on_attempt": 1},
                                                      {"id": "89", "fix_on_attempt": 99}]),
                       world.loop_db, FakeClock())
    listing = world.client.get("/runs").text
    assert f'href="/runs/{outcome.run_id}"' in listing and outcome.status in listing
    page = world.client.get(f"/runs/{outcome.run_id}").text
    assert page.count("<progress ") >= 2 and 'max="20"' in page
    assert 'class="item-closed"' in page and 'class="item-parked"' in page and "1 parked" in page
    assert "test_export_empty" in page  # the parked item's last failure
    assert page.count('<li class="line kind-') >= 5 and "<code>idle</code> → <code>finding</code>" in page
    assert outcome.status == "escalated" and '<strong class="terminal-reason">no workable item left' in page
    for missing in ("999", "abc", "9" * 40):
        assert world.client.get(f"/runs/{missing}").status_code == 404


def test_an_operator_unparks_a_parked_item_from_the_run_page(world: World, tmp_path: Path) -> None:
    """The run page offers an operator a form per parked item; the post, with a reason,
    writes the loop's audited unpark line. Without the operator role, a reason or the CSRF
    token it is refused and the run is unchanged."""
    from loop.helpers import FakeClock, run_loop, write_loop

    outcome = run_loop(write_loop(tmp_path / "loop", [{"id": "88", "fix_on_attempt": 1},
                                                      {"id": "89", "fix_on_attempt": 99}]),
                       world.loop_db, FakeClock())
    page_url = f"/runs/{outcome.run_id}"
    sign_in(world.client, world.people.tokens["eve"])
    assert 'action="/runs/' not in world.client.get(page_url).text  # no form for a viewer
    refused = post_form(world.client, f"{page_url}/unpark", {"item": "89", "reason": "fixed upstream"},
                        csrf_from=page_url)
    assert refused.status_code == 403 and "operator" in refused.text
    assert world.client.post(f"{page_url}/unpark", data={"item": "89", "reason": "x"}).status_code == 403

    sign_in(world.client, world.people.tokens["ops"])
    page = world.client.get(page_url).text
    assert f'action="/runs/{outcome.run_id}/unpark"' in page and 'value="89"' in page
    no_reason = post_form(world.client, f"{page_url}/unpark", {"item": "89", "reason": " "}, csrf_from=page_url)
    assert no_reason.status_code == 422 and "needs a reason" in no_reason.text
    assert 'class="item-parked"' in world.client.get(page_url).text
    done = post_form(world.client, f"{page_url}/unpark", {"item": "89", "reason": "fixed upstream"},
                     csrf_from=page_url)
    assert done.status_code == 303 and done.headers["location"].endswith("?done=unparked")
    after = world.client.get(done.headers["location"]).text
    assert "Unparked" in after and 'class="item-parked"' not in after
    assert "ops" in after and "fixed upstream" in after  # the audited line names who and why
    again = post_form(world.client, f"{page_url}/unpark", {"item": "89", "reason": "again"}, csrf_from=page_url)
    assert again.status_code in (409, 422) and 'id="refusal"' in again.text


def _messages(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """Server-sent event messages: each the fields before a blank line (comments left out)."""
    fields: dict[str, str] = {}
    for line in lines:
        if not line:
            if fields:
                yield fields
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value


def test_live_updates_stream_a_change_and_resume_from_the_last_id(world: World, serve: Any) -> None:
    """/live?task=ID (signed in) sends the task's stamp as the first message's id, then a
    ``change`` when the task moves; a browser reconnecting with an older Last-Event-ID hears
    of the change at once. Without a session it is 401."""
    tid, proposal = world.waiting("gate")
    base = serve(world.client.app)
    with httpx.Client(base_url=base, timeout=20) as client:
        sign_in(client, world.people.tokens["mia"])  # type: ignore[arg-type]
        with client.stream("GET", f"/live?task={tid}") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            messages = _messages(stream.iter_lines())
            first = next(messages)
            assert set(first) == {"id", "retry"}
            world.engine.approve(tid, world.engine.users.authenticate(world.people.tokens["mia"]),
                                 proposal_hash=proposal)
            change = next(messages)
            assert change["event"] == "change" and change["id"] != first["id"]
        with client.stream("GET", f"/live?task={tid}", headers={"Last-Event-ID": first["id"]}) as stream:
            again = next(_messages(stream.iter_lines()))
            assert again["event"] == "change" and again["id"] == change["id"]
        with client.stream("GET", f"/live?task={tid}", headers={"Last-Event-ID": change["id"]}) as stream:
            assert "event" not in next(_messages(stream.iter_lines()))
        assert httpx.get(f"{base}/live?task={tid}").status_code == 401


def test_an_artifact_that_is_a_diff_is_shown_as_one() -> None:
    """A unified diff's lines are classed as added, removed, hunk and header; other text is
    left plain."""
    from statewright.server.console.views import diff_lines

    text = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n same"
    assert [c for c, _ in diff_lines(text)] == ["meta", "meta", "meta", "hunk", "del", "add", ""]
    assert diff_lines("+ not a diff\n- a list") == [("", "+ not a diff"), ("", "- a list")]
