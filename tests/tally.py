"""What the reliability campaign tried and what happened, for docs/RELIABILITY.md.

Campaign tests call ``tally(category, case, ...)`` next to the assertion that checks the
outcome, so a figure in the report is only ever what a test run saw. Nothing is written
unless ``STATEWRIGHT_RELIABILITY_OUT`` names a file (``scripts/reliability_report.py`` sets
it); each call appends one JSON line there.

Categories and the fields each call gives:

- ``crash``: backend, point, kills (int), effects_lost (int), effects_duplicated (int)
- ``tamper``: backend, detected (bool)
- ``bypass``: backend, refused (bool)
- ``malformed``: result, one of "clean_error", "accepted", "traceback", "hang"
- ``poison``: backend, outcome (the reason code it ended as), worker_alive (bool)
- ``secrets``: where ("db", "logs", "output"), found (int: planted values seen there)
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

CATEGORIES = frozenset({"crash", "tamper", "bypass", "malformed", "poison", "secrets"})
_lock = threading.Lock()


def tally(category: str, case: str, **fields: Any) -> None:
    if category not in CATEGORIES:
        raise ValueError(f"unknown tally category {category!r}; one of {sorted(CATEGORIES)}")
    out = os.environ.get("STATEWRIGHT_RELIABILITY_OUT")
    if not out:
        return
    line = json.dumps({"category": category, "case": case, **fields}, sort_keys=True)
    with _lock, open(out, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
