"""Named crash points at commit boundaries, for crash tests.

``STATEWRIGHT_CRASH_AT=after_claim`` makes the process SIGKILL itself the first time it
passes that point; ``STATEWRIGHT_CRASH_AT=in_append_txn:5`` the fifth time (so a test can
die in the middle of a commit that carries several outcomes). Points: after_claim,
before_effect, after_effect, in_append_txn, after_append, after_notify (a notification was
sent, its outcome not yet recorded)."""

from __future__ import annotations

import os

CRASH_POINTS = frozenset(
    {"after_claim", "before_effect", "after_effect", "in_append_txn", "after_append", "after_notify"}
)
_TARGET, _, _NTH = os.environ.get("STATEWRIGHT_CRASH_AT", "").partition(":")
_AT_PASS = int(_NTH) if _NTH.isdigit() and int(_NTH) > 0 else 1
_passes = 0


def crash_point(name: str) -> None:
    global _passes
    if _TARGET and name == _TARGET:
        _passes += 1
        if _passes >= _AT_PASS:
            _die()


# The outer loop's crash points are its states: ``STATEWRIGHT_LOOP_CRASH_AT=RUNNING`` makes
# ``statewright loop run`` SIGKILL itself right after the record line that names RUNNING is
# committed (IDLE: right after the run is opened).
LOOP_CRASH_ENV = "STATEWRIGHT_LOOP_CRASH_AT"


def loop_crash_point(target: str | None, state: str) -> None:
    """Die here when ``target`` (the value of STATEWRIGHT_LOOP_CRASH_AT) names ``state``."""
    if target and target.strip().upper() == str(state).upper():
        _die()


def _die() -> None:
    import signal  # here: only a crash test ever gets this far

    os.kill(os.getpid(), signal.SIGKILL)
