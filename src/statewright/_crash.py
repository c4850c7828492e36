"""Named crash points at commit boundaries, for crash tests.

``STATEWRIGHT_CRASH_AT=after_claim`` makes the process SIGKILL itself the first time it
passes that point. Points: after_claim, before_effect, after_effect, in_append_txn,
after_append."""

from __future__ import annotations

import os
import signal

CRASH_POINTS = frozenset({"after_claim", "before_effect", "after_effect", "in_append_txn", "after_append"})
_TARGET = os.environ.get("STATEWRIGHT_CRASH_AT", "")


def crash_point(name: str) -> None:
    if _TARGET and name == _TARGET:
        os.kill(os.getpid(), signal.SIGKILL)
