"""The receiver's two ways in: ``github_routes`` mounted in a Starlette app (one line for
``statewright serve``), served by uvicorn on a local port, and ``statewright github replay``
feeding a payload file through the same handler."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from click.testing import CliRunner
from starlette.applications import Starlette

from statewright.cli import cli
from statewright.definition.model import Workflow
from statewright.integrations.github.webhook import PATH, WebhookConfig, github_routes
from statewright.runtime.engine import Engine

from . import payloads as p
from .fake_github import FakeGitHub
from .support import EXAMPLE


@contextmanager
def served(app: Starlette) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(1000):  # until it listens (at most ten seconds: a broken start fails below)
            if server.started or not thread.is_alive():
                break
            thread.join(0.01)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


def test_the_route_answers_as_the_handler_does(engine: Engine, review_workflow: Workflow, github: FakeGitHub) -> None:
    app = Starlette(routes=github_routes(engine, WebhookConfig.build([review_workflow], secret=p.SECRET)))
    with served(app) as url, httpx.Client(base_url=url) as client:
        headers, body = p.delivery("issues", p.issue_opened(41))
        first = client.post(PATH, content=body, headers=headers)
        assert first.status_code == 200 and first.json()["task_id"].startswith("t-")
        again = client.post(PATH, content=body, headers=headers)
        assert again.json() == {"task_id": first.json()["task_id"], "duplicate": True}
        headers["X-Hub-Signature-256"] = "sha256=" + "0" * 64
        assert client.post(PATH, content=body, headers=headers).status_code == 401
        assert client.get(PATH).status_code == 405


def test_replay_feeds_a_payload_file_through_the_receiver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, github: FakeGitHub, review_workflow: Workflow,
) -> None:
    monkeypatch.setenv("STATEWRIGHT_GITHUB_WEBHOOK_SECRET", p.SECRET)
    payload = tmp_path / "opened.json"
    payload.write_text(json.dumps(p.issue_opened(42)), encoding="utf-8")
    db = str(tmp_path / "state.db")
    args = ["github", "replay", str(payload), "--event", "issues", "--config", str(EXAMPLE), "--db", db]
    first = CliRunner().invoke(cli, [*args, "--delivery", "d-42"])
    assert first.exit_code == 0, first.output
    status, answer = first.output.split(" ", 1)
    assert status == "200"
    tid = json.loads(answer)["task_id"]
    again = CliRunner().invoke(cli, [*args, "--delivery", "d-42"])
    assert again.output.strip() == f'200 {{"duplicate": true, "task_id": "{tid}"}}'
    payload.write_text("{broken", encoding="utf-8")
    bad = CliRunner().invoke(cli, args)
    assert bad.exit_code == 1
    assert bad.output.strip() == '400 {"error": "the body is not JSON"}'


def test_replay_without_a_secret_is_one_line(tmp_path: Path) -> None:
    payload = tmp_path / "opened.json"
    payload.write_text("{}", encoding="utf-8")
    result = CliRunner().invoke(cli, ["github", "replay", str(payload), "--event", "issues",
                                      "--db", str(tmp_path / "state.db")])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: STATEWRIGHT_GITHUB_WEBHOOK_SECRET is not set; the receiver verifies every delivery with it")
    assert not (tmp_path / "state.db").exists()


def test_serve_github_mounts_the_receiver(tmp_path: Path, github: FakeGitHub) -> None:
    """``statewright serve --github FILE`` as a real process: a signed issues.opened delivery
    starts the example's task; without the secret it refuses to start, in one line."""
    import os
    import signal
    import subprocess
    import sys

    from server.test_serve_process import _lines

    db = tmp_path / "state.db"
    env = {**os.environ, "STATEWRIGHT_GITHUB_WEBHOOK_SECRET": p.SECRET}
    argv = [sys.executable, "-m", "statewright", "serve", "--port", "0", "--db", str(db), "--github", str(EXAMPLE)]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    try:
        (line,) = _lines(proc, 1)
        api = line.split(" on ")[1].split(" ")[0]
        headers, body = p.delivery("issues", p.issue_opened(43))
        with httpx.Client(timeout=30) as client:
            answer = client.post(f"{api}{PATH}", content=body, headers=headers)
        assert answer.status_code == 200, answer.text
        assert answer.json()["task_id"].startswith("t-")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
    env.pop("STATEWRIGHT_GITHUB_WEBHOOK_SECRET")
    refused = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        "error: STATEWRIGHT_GITHUB_WEBHOOK_SECRET is not set; the receiver verifies every delivery with it"]
