"""The per-item check: the item's test passes only if fixed-<id> exists.

An item with ``check_barrier: [NAME, SIZE]`` first waits until SIZE checks have reached
barrier NAME (checks run at once meet there; one at a time never would: a fail)."""

import json
import os
import pathlib
import sys

from _proc import meet

item_id = os.environ["STATEWRIGHT_ITEM_ID"]
barrier = json.loads(os.environ.get("STATEWRIGHT_ITEM", "{}")).get("check_barrier")
if barrier:
    name, size = barrier
    if (met := meet(f"check-{name}", size, item_id)) < size:
        print(f"only {met} of {size} checks met at barrier {name}")
        sys.exit(1)
if pathlib.Path(f"fixed-{item_id}").exists():
    print("suite: 0 failed")
    sys.exit(0)
print("FAILED tests/test_export.py::test_export_empty - AssertionError")
print("1 failed (test_export_empty)")
sys.exit(1)
