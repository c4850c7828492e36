"""Canonical and compact JSON, and the sha256 of canonical JSON: how statewright fingerprints and writes data."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The projection is not hashed, so it skips canonical_json's key sort (command bodies keep
# it: an agent sees its brief in the same order as before); one shared encoder also saves
# building a new one per call, as json.dumps(**options) does.
encode_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def compact_json(value: Any) -> str:
    """No insignificant white space, UTF-8 text, keys in their own order: how a store writes a
    task's projection. A value that writes its own text (``compact_json()``, as
    ``machine.state.Projection`` does, reusing the text of records written before) is asked
    for it; the text is the same."""
    own = getattr(value, "compact_json", None)
    return own() if own is not None else encode_compact(value)


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant white space, UTF-8 text; equal data gives equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
