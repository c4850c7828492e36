"""``statewright serve`` as a real process, called over real sockets."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest

from statewright.server import sign

SECRET = "a-secret-of-more-than-16-bytes"
GATE = """\
workflow: gate
steps:
  - {id: build, kind: code, owner: ci, run: {command: [sh, -c, "echo built"]}}
  - {id: approve, kind: human, owner: leads, approvers: {role: maintainer}}
"""
HOOKS = """\
hooks:
  build:
    workflow: gate.yaml
    secret_env: BUILD_HOOK_SECRET
"""


def _sw(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "statewright", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=60, check=False)


def _lines(proc: subprocess.Popen[bytes], n: int, timeout_seconds: float = 30) -> list[str]:
    """The first ``n`` lines the process writes to stderr (waiting on the pipe, not on a clock)."""
    assert proc.stderr is not None
    fd, seen = proc.stderr.fileno(), b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_seconds
        while seen.count(b"\n") < n:
            if not sel.select(max(0.0, deadline - time.monotonic())):
                raise AssertionError(f"serve wrote {seen!r} and then nothing")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise AssertionError(f"serve ended: {seen!r}")
            seen += chunk
    return seen.decode().splitlines()[:n]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    (tmp_path / "gate.yaml").write_text(GATE, encoding="utf-8")
    (tmp_path / "hooks.yaml").write_text(HOOKS, encoding="utf-8")
    db = tmp_path / "state.db"
    env = {**os.environ, "BUILD_HOOK_SECRET": SECRET}
    assert _sw("users", "bootstrap", "root", "--out", tmp_path / "root.token", "--db", db, env=env).returncode == 0
    yield tmp_path, db, env


def test_serve_answers_over_a_socket_and_stops_on_sigterm(setup: tuple[Path, Path, dict[str, str]]) -> None:
    """The API on one port, /metrics on another; a submit, a read, a signed hook; SIGTERM stops it."""
    tmp_path, db, env = setup
    token = (tmp_path / "root.token").read_text(encoding="utf-8").strip()
    proc = subprocess.Popen(
        [sys.executable, "-m", "statewright", "serve", "--port", "0", "--metrics-port", "0", "--db", str(db),
         "--workflow", str(tmp_path / "gate.yaml"), "--hooks", str(tmp_path / "hooks.yaml")],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    try:
        api_line, metrics_line = _lines(proc, 2)
        api = api_line.split(" on ")[1].split(" ")[0]
        metrics = metrics_line.split(" on ")[1].split(" ")[0]
        assert api_line.startswith("statewright API on http://127.0.0.1:") and metrics_line.startswith(
            "statewright metrics on http://127.0.0.1:")
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(timeout=30) as client:
            made = client.post(f"{api}/api/tasks", json={"workflow": "gate"}, headers=auth)
            assert made.status_code == 201, made.text
            tid = made.json()["task_id"]
            shown = client.get(f"{api}/api/tasks/{tid}", headers=auth)
            assert (shown.status_code, shown.json()["status"]) == (200, "running")
            assert client.get(f"{api}/api/tasks/{tid}").status_code == 401
            body = json.dumps({"ref": "main"}).encode()
            hooked = client.post(f"{api}/api/hooks/build", content=body, headers={
                "X-Statewright-Signature": sign(SECRET.encode(), body), "X-Statewright-Delivery": "42"})
            assert hooked.status_code == 201, hooked.text
            scraped = client.get(f"{metrics}/metrics")
            assert scraped.status_code == 200 and 'statewright_tasks{status="running"} 2' in scraped.text
            assert client.get(f"{api}/metrics").status_code == 404  # served on its own port only
            assert "/metrics" not in client.get(f"{api}/openapi.json").json()["paths"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


def test_serve_refuses_a_taken_port_and_a_bad_hooks_file_in_one_line(
        setup: tuple[Path, Path, dict[str, str]]) -> None:
    tmp_path, db, env = setup
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = _sw("serve", "--port", port, "--db", db, env=env)
    assert r.returncode == 1 and r.stderr.startswith(f"error: --port {port}: cannot listen on 127.0.0.1:{port}")
    assert len(r.stderr.splitlines()) == 1
    r = _sw("serve", "--hooks", tmp_path / "hooks.yaml", "--db", db, env={**env, "BUILD_HOOK_SECRET": ""})
    assert r.returncode == 1 and r.stderr.splitlines() == [
        f"error: {tmp_path / 'hooks.yaml'}: hook 'build': the secret in $BUILD_HOOK_SECRET is not set; "
        "it must hold at least 16"]
