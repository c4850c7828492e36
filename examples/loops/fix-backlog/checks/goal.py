"""Goal oracles: 'tests' re-runs every item's tests; 'lint' compiles every file written."""

import json
import os
import pathlib
import py_compile
import sys

sys.path.insert(0, os.path.dirname(__file__))
from cases import check  # noqa: E402

what = sys.argv[1]
ids = [json.loads(x)["id"] for x in pathlib.Path("backlog.jsonl").read_text().splitlines() if x]
failed = []
if what == "tests":
    for item_id in ids:
        try:
            check(item_id)
        except Exception as exc:
            failed.append(f"{item_id}: {exc}")
    print(f"{len(ids) - len(failed)} passed, {len(failed)} failed")
else:
    for path in sorted(pathlib.Path("work").glob("*.py")):
        try:
            py_compile.compile(str(path), doraise=True)
        except py_compile.PyCompileError as exc:
            failed.append(str(exc))
    print("lint clean" if not failed else "\n".join(failed))
sys.exit(1 if failed else 0)
