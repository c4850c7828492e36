"""The web console in a real browser: Playwright drives the Chromium of Debian's ``chromium``
package (never a downloaded build) against ``statewright serve``'s app on a free local port.
A person signs in, opens the inbox, reads the review, approves and watches the task complete
live; a stale page's approval is refused; a rejection carries its reason; an operator retries
a halted task; hostile text stays text; a form without its CSRF token is refused. Every page
is saved as a screenshot at desktop and phone width under build/screenshots/ (not committed).

One SQLite database (the embedded default) serves these: the pages read it through the same
Store calls on every backend, which test_console_http.py covers."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from starlette.applications import Starlette

from server.console_agents import PAYLOADS
from server.console_support import console_workflows
from server.support import World
from statewright.machine.state import TaskStatus
from statewright.runtime.worker import Worker

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does it)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


class Console:
    """A browser on the served console, with what went wrong in its pages collected."""

    def __init__(self, browser: Browser, base: str) -> None:
        self.browser = browser
        self.base = base
        self.problems: list[str] = []

    def _console(self, message: Any) -> None:
        """A console error is a problem (a CSP violation, a script error), except the line
        Chromium writes for every refusal the tests provoke on purpose (their status is checked)."""
        if message.type == "error" and "the server responded with a status of" not in message.text:
            self.problems.append(f"console {message.type}: {message.text}")

    def page(self, who: str | None, world: World, path: str = "/", viewport: dict[str, int] | None = None) -> Page:
        """A fresh browser context signed in as ``who`` (by keyboard, through /login), at ``path``."""
        context = self.browser.new_context(viewport=viewport or DESKTOP)  # type: ignore[arg-type]
        page = context.new_page()
        page.on("dialog", lambda d: (self.problems.append(f"dialog: {d.message}"), d.dismiss()))
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("console", self._console)
        page.goto(self.base + path)
        if who is not None:
            expect(page).to_have_url(re.compile(r"/login\?next="))
            page.keyboard.insert_text(world.people.tokens[who])  # the token field has the focus
            page.keyboard.press("Enter")
            expect(page).to_have_url(self.base + path)
        return page


@pytest.fixture
def console(world: World, browser: Browser, serve: Callable[[Starlette], str]) -> Iterator[Console]:
    c = Console(browser, serve(world.client.app))
    yield c
    for context in browser.contexts:
        context.close()
    assert c.problems == []


def _live(page: Page) -> None:
    """Wait until the page's event stream is open (its baseline read)."""
    expect(page.locator("#live-state")).to_have_text(re.compile(r"^Live updates: on"))


def test_sign_in_open_the_inbox_read_the_review_approve_and_see_it_complete_live(world: World,
                                                                                 console: Console) -> None:
    """mia signs in, opens the one task her inbox holds, reads its proposal and hash,
    approves it by keyboard, and sees the task complete on the same page when a worker runs
    the last step (no reload)."""
    tid, proposal = world.waiting("gate")
    world.waiting("payment", {"region": "us"})  # not hers: finance approves it
    page = console.page("mia", world, "/inbox")
    links = page.locator("a.open")
    expect(links).to_have_count(1)
    links.first.click()
    expect(page).to_have_url(f"{console.base}/tasks/{tid}")
    expect(page.locator("#shown-hash")).to_have_text(proposal)
    expect(page.locator(".proposal")).to_contain_text('"workflow": "gate"')
    expect(page.locator(".review")).to_contain_text("Who may approve: role maintainer")
    page.locator("#approve-comment").fill("looks right")
    page.keyboard.press("Tab")  # to the Approve button
    expect(page.locator("form.approve button")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".notice")).to_have_text("Approved.")
    _live(page)
    page.evaluate("window.__same_page = 'yes'")
    world.settle()  # a worker runs 'ship'; the page hears of it over server-sent events
    expect(page.locator("#task-head .status")).to_have_text("completed", timeout=10_000)
    expect(page.locator("#task-body .history")).to_contain_text("ship")
    assert page.evaluate("window.__same_page") == "yes"
    assert world.engine.state(tid).status is TaskStatus.COMPLETED


def test_a_stale_page_approval_is_refused_and_the_page_says_so(world: World, console: Console) -> None:
    """Evidence added while the review is open changes the proposal: the old page's approval
    is refused, the page says why and shows the new hash, and nothing was approved."""
    tid, old = world.waiting("gate")
    page = console.page("mia", world, f"/tasks/{tid}")
    expect(page.locator("#shown-hash")).to_have_text(old)
    ops = world.engine.users.authenticate(world.people.tokens["ops"])
    world.engine.add_evidence(tid, ops, {"ticket": "T-9"}, note="found later")
    new = world.engine.state(tid).current.proposal_hash  # type: ignore[union-attr]
    page.get_by_role("button", name=re.compile("^Approve proposal")).click()
    expect(page.locator("#refusal")).to_contain_text("The proposal changed while the page was open")
    expect(page.locator("#shown-hash")).to_have_text(new)
    assert world.engine.state(tid).status is TaskStatus.AWAITING_APPROVAL


def test_reject_with_a_reason_code_and_comment(world: World, console: Console) -> None:
    """The reject form takes a reason code from the workflow's list and a comment; both are
    recorded with the approver's name."""
    tid, _ = world.waiting("gate")
    page = console.page("mia", world, f"/tasks/{tid}")
    page.locator("#reject-code").select_option("insufficient_evidence")
    page.locator("#reject-comment").fill("no test results attached")
    page.get_by_role("button", name="Reject").click()
    expect(page.locator(".notice")).to_have_text("Rejected.")
    last = world.engine.state(tid).attempts[-1]
    assert (last.actor, last.reason) == ("mia", "insufficient_evidence")
    assert "no test results attached" in str(last.verdict) + last.detail + last.note


def test_an_operator_retries_a_halted_task_from_the_queue_with_a_reason(world: World, console: Console) -> None:
    """The operator queue shows the halt's error in full; Retry needs a reason (the browser
    will not send the form without one), and the retry is recorded with it."""
    halted = world.halted()
    page = console.page("ops", world, "/halted")
    card = page.locator("li.halted-task")
    expect(card).to_have_count(1)
    expect(card.locator(".reason")).to_have_text(world.engine.state(halted).halt.reason)  # type: ignore[union-attr]
    card.get_by_role("button", name="Retry").click()  # no reason: the form is not sent
    assert world.engine.state(halted).operator_actions == ()
    card.get_by_label("Reason to retry").fill("the runner is fixed")
    card.get_by_role("button", name="Retry").click()
    expect(page.locator(".notice")).to_contain_text("Retried")
    acts = world.engine.state(halted).operator_actions
    assert [(o.action, o.actor, o.reason) for o in acts] == [("retry", "ops", "the runner is fixed")]


def test_hostile_text_in_input_verdicts_and_notes_is_shown_as_text(world: World, console: Console) -> None:
    """Each payload in the task's input, the agent's verdict and its note is on the page as
    text: no script ran, no element came from it, every attempt's details opened."""
    tid = world.engine.submit(console_workflows()["hostile"], {"title": PAYLOADS[1], "all": list(PAYLOADS)})
    Worker(world.engine).run(until_idle=True)
    page = console.page("mia", world, f"/tasks/{tid}")
    for summary in page.locator("details > summary").all():
        summary.click()
    text = page.locator("main").inner_text()
    for p in PAYLOADS:
        assert p in text or p.replace('"', '\\"') in text, p
    assert page.evaluate("window.__xss") is None
    assert page.locator("main img, main iframe, main object, main embed, main video, main math, main base").count() == 0
    assert page.locator("script").count() == 1  # the console's own


def test_a_form_without_its_csrf_token_is_refused(world: World, console: Console) -> None:
    """The approve form with its csrf_token removed is refused (403) and nothing is approved."""
    tid, _ = world.waiting("gate")
    page = console.page("mia", world, f"/tasks/{tid}")
    page.evaluate("document.querySelector('form.approve input[name=csrf_token]').remove()")
    with page.expect_response(re.compile(r"/approve$")) as answer:
        page.get_by_role("button", name=re.compile("^Approve proposal")).click()
    assert answer.value.status == 403
    expect(page.locator(".error")).to_contain_text("csrf_token is missing or wrong")
    assert world.engine.state(tid).status is TaskStatus.AWAITING_APPROVAL


def _fits(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"))


def test_every_page_at_desktop_and_phone_width(world: World, console: Console, tmp_path: Path) -> None:
    """Each page renders at 1280 and 390 pixels wide without the page itself scrolling
    sideways (wide tables and the drawing scroll in their own box); screenshots are saved."""
    from loop.helpers import FakeClock, run_loop, write_loop

    waiting, _ = world.waiting("gate", {"title": "Ship the release notes"})
    halted = world.halted()
    looped = world.engine.submit(console_workflows()["looping"], {"ticket": "BUG-7"})
    Worker(world.engine).run(until_idle=True)
    run = run_loop(write_loop(tmp_path / "loop", [{"id": "88", "fix_on_attempt": 1},
                                                  {"id": "89", "fix_on_attempt": 99}]), world.loop_db, FakeClock())
    pages: dict[str, str] = {"dashboard": "/", "inbox": "/inbox", "halted": "/halted", "review": f"/tasks/{waiting}",
                             "task-halted": f"/tasks/{halted}", "task-loop-backs": f"/tasks/{looped}",
                             "runs": "/runs", "run": f"/runs/{run.run_id}"}
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        login = console.page(None, world, "/login", viewport)
        login.screenshot(path=str(SHOTS / f"login-{width}.png"), full_page=True)
        assert _fits(login), f"login at {width}"
        page = console.page("mia", world, "/", viewport)
        for name, path in pages.items():
            page.goto(console.base + path)
            expect(page.locator("h1")).to_be_visible()
            page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
            assert _fits(page), f"{name} at {width}"
    shots: list[Any] = sorted(p.name for p in SHOTS.glob("*.png"))
    assert len(shots) >= 18, shots
