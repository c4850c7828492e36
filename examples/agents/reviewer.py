"""A scripted review agent for the fix-bug demo. It reads the diff against main and
approves only a change that adds the two numbers; its verdict follows the built-in
``review`` schema: {approved, must_fix, summary}."""

import json
import os
import subprocess
from pathlib import Path

diff = subprocess.run(
    ["git", "diff", "main...work", "--", "calc.py"], capture_output=True, text=True, check=True
).stdout
must_fix = []
if "return a + b" not in diff:
    must_fix.append("add() must return a + b")
verdict = {
    "approved": not must_fix,
    "must_fix": must_fix,
    "summary": "one-line fix in calc.add, covered by tests/test_calc.py",
}
Path(os.environ["STATEWRIGHT_VERDICT"]).write_text(json.dumps(verdict))
print("LGTM" if not must_fix else "changes requested")
