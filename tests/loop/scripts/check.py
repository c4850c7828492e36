"""The per-item check: the item's test passes only if fixed-<id> exists."""

import os
import pathlib
import sys

item_id = os.environ["STATEWRIGHT_ITEM_ID"]
if pathlib.Path(f"fixed-{item_id}").exists():
    print("suite: 0 failed")
    sys.exit(0)
print("FAILED tests/test_export.py::test_export_empty - AssertionError")
print("1 failed (test_export_empty)")
sys.exit(1)
