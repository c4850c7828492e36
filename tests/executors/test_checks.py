"""Checks: command, HTTP (status + JSON-path predicate) and callable. Never a false pass."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from statewright.executors import ExecContext, Reason, run_check

ROUTES: dict[str, tuple[int, bytes]] = {
    "/green": (200, json.dumps({"state": "green", "checks": [{"ok": True}, {"ok": False}],
                                "count": 1, "flag": True, "none": None}).encode()),
    "/down": (503, b'{"state": "red"}'),
    "/text": (200, b"all good"),
}


@pytest.fixture
def http_base() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = ROUTES.get(self.path, (404, b"{}"))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_command_check_passes_on_exit_zero(ctx: ExecContext) -> None:
    """Exit 0 passes; non-zero fails with exit_status and output."""
    assert run_check({"command": [sys.executable, "-c", "print('ok')"]}, ctx).passed
    failed = run_check({"command": [sys.executable, "-c", "print('red'); raise SystemExit(4)"]},
                       ctx)
    assert (failed.passed, failed.reason, failed.detail) == (False, Reason.EXIT_STATUS,
                                                             "exit status 4")
    assert failed.output.startswith("red")


def test_command_check_timeout_is_a_failure(ctx: ExecContext) -> None:
    """A check that hangs is killed and fails."""
    result = run_check({"command": [sys.executable, "-c", "import time; time.sleep(30)"],
                        "timeout": "300ms"}, ctx)
    assert (result.passed, result.reason) == (False, Reason.TIMEOUT)


def test_command_check_that_cannot_start_fails(ctx: ExecContext) -> None:
    """A missing program is passed=False, not an exception and not a pass."""
    result = run_check({"command": ["no-such-probe-xyz"]}, ctx)
    assert (result.passed, result.reason) == (False, Reason.NOT_FOUND)
    assert "no-such-probe-xyz" in result.detail


@pytest.mark.parametrize(
    ("spec", "passed", "reason", "fragment"),
    [
        ({"http": "/green"}, True, None, "status 200"),
        ({"http": "/down"}, False, Reason.HTTP_STATUS, "status 503, expected 200"),
        ({"http": "/down", "expect_status": 503}, True, None, "status 503"),
        ({"http": "/green", "json_path": "$.state", "equals": "green"}, True, None, "== \"green\""),
        ({"http": "/green", "json_path": "$.state", "equals": "red"}, False, Reason.PREDICATE,
         'is "green", expected "red"'),
        ({"http": "/green", "json_path": "$.checks[0].ok", "equals": True}, True, None, ""),
        ({"http": "/green", "json_path": "$.checks[1].ok", "equals": True}, False,
         Reason.PREDICATE, "is false"),
        ({"http": "/green", "json_path": "$.count", "equals": True}, False, Reason.PREDICATE,
         "expected true"),
        ({"http": "/green", "json_path": "$.flag"}, True, None, "is true"),
        ({"http": "/green", "json_path": "$.none"}, False, Reason.PREDICATE, "is null"),
        ({"http": "/green", "json_path": "$.missing"}, False, Reason.PREDICATE, "not in the body"),
        ({"http": "/text", "json_path": "$.state"}, False, Reason.PREDICATE, "not JSON"),
    ],
)
def test_http_checks(
    ctx: ExecContext, http_base: str, spec: dict[str, Any], passed: bool,
    reason: Reason | None, fragment: str,
) -> None:
    """Status and JSON-path predicates against a real local server."""
    spec = {**spec, "http": http_base + spec["http"]}
    result = run_check(spec, ctx)
    assert (result.passed, result.reason) == (passed, reason), result.detail
    assert fragment in result.detail


def test_http_check_against_nobody_fails(ctx: ExecContext) -> None:
    """A refused connection is passed=False with reason error."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_check({"http": f"http://127.0.0.1:{port}/health"}, ctx)
    assert (result.passed, result.reason) == (False, Reason.ERROR)
    assert "failed" in result.detail


@pytest.mark.parametrize(
    ("body", "passed", "reason"),
    [
        ("return True", True, None),
        ("return False", False, Reason.FAILED),
        ("return {'passed': True, 'detail': 'canary held'}", True, None),
        ("return {'passed': False, 'detail': 'error rate 4%'}", False, Reason.FAILED),
        ("return 'passed'", False, Reason.BAD_RETURN),
        ("return {'passed': 1}", False, Reason.BAD_RETURN),
        ("return None", False, Reason.BAD_RETURN),
        ("raise TimeoutError('probe hung')", False, Reason.EXCEPTION),
        ("from statewright._errors import TransientError\n    raise TransientError('busy')",
         False, Reason.EXCEPTION),
    ],
)
def test_callable_checks(
    ctx: ExecContext, make_module: Callable[[str], str], body: str, passed: bool,
    reason: Reason | None,
) -> None:
    """A callable check passes only on True or {'passed': True}."""
    mod = make_module(f"def probe(ctx):\n    {body}\n")
    result = run_check({"callable": f"{mod}:probe"}, ctx)
    assert (result.passed, result.reason) == (passed, reason), result.detail
    if reason is Reason.EXCEPTION:
        assert "Error: " in result.output and "AttributeError" not in result.output


def test_unresolvable_callable_and_bad_spec_fail_without_raising(ctx: ExecContext) -> None:
    """A check whose spec or callable is broken is a failed check, never an exception."""
    missing = run_check({"callable": "no_such_probe_module:probe"}, ctx)
    assert (missing.passed, missing.reason) == (False, Reason.NOT_FOUND)
    bad = run_check({"http": "not a url"}, ctx)
    assert (bad.passed, bad.reason) == (False, Reason.INVALID_SPEC)
    assert "http:// or https:// URL" in bad.detail
