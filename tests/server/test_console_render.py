"""The task page of a long task. The data takes long to make on the SQL backends (a worker
firing 500 durable timers one by one), and the page reads it through the same Store calls on
every backend, which test_console_http.py covers; so this runs on the in-memory store."""

from __future__ import annotations

import time

import pytest

from server.console_support import console_workflows, sign_in
from server.support import World
from statewright.machine.state import TaskStatus
from statewright.runtime.worker import Worker


@pytest.fixture(params=["memory"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_task_with_a_thousand_events_renders_and_loop_backs_show_as_detours(world: World) -> None:
    """A wait step's 500 checks (over 1,000 events) render; a task that looped back 20 times
    shows its 40 attempts in a line with each loop-back marked."""
    wfs = console_workflows()
    polled = world.engine.submit(wfs["polling"], {})
    looped = world.engine.submit(wfs["looping"], {})
    Worker(world.engine).run(until=lambda: world.engine.state(polled).terminal)  # the fake clock moves on
    assert len(world.engine.events(polled)) >= 1000
    assert world.engine.state(looped).status is TaskStatus.HALTED
    sign_in(world.client, world.people.tokens["ops"])
    started = time.monotonic()
    page = world.client.get(f"/tasks/{polled}")
    assert page.status_code == 200 and "500 of 500 checks" in page.text
    assert time.monotonic() - started < 30  # a bound against runaway work; bench/ measures it
    page = world.client.get(f"/tasks/{looped}")
    assert page.text.count('class="entry outcome-') == 40
    assert page.text.count('class="detour detour-loop_back"') == 19 and "detour-halt" in page.text
    assert page.text.count('class="brief"') == 20
    brief = world.client.get(f"/tasks/{looped}/brief/work/20")
    assert brief.status_code == 200 and brief.text.count("&#34;rejected_by&#34;: &#34;check&#34;") == 19
    assert world.client.get(f"/tasks/{looped}/brief/check/1").status_code == 404  # a code step has none


def test_a_map_steps_children_are_counted_in_the_drawing(world: World, tmp_path: object) -> None:
    """The task page's drawing names the workflow a map step runs for each item and counts
    the children of its latest attempt by how they stand."""
    from pathlib import Path

    from statewright.definition.loader import load_workflow

    d = Path(str(tmp_path))
    (d / "sign.yaml").write_text("workflow: sign-one\nsteps:\n  - id: sign\n    kind: human\n    owner: tests\n"
                                 "    approvers: {role: maintainer}\n", encoding="utf-8")
    (d / "parent.yaml").write_text("workflow: signatures\nsteps:\n  - id: each\n    kind: map\n    owner: tests\n"
                                   "    workflow: sign.yaml\n    items: input.numbers\n    max_concurrency: 2\n",
                                   encoding="utf-8")
    tid = world.engine.submit(load_workflow(d / "parent.yaml"), {"numbers": [1, 2, 3]})
    sign_in(world.client, world.people.tokens["ops"])
    page = world.client.get(f"/tasks/{tid}").text
    assert "each item: sign.yaml" in page and ">2 running<" in page
