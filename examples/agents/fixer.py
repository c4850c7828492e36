"""A scripted coding agent for the fix-bug demo (a command agent).

It reads its brief from $STATEWRIGHT_BRIEF and works in the repository it is started in.
Attempt 1 makes the plausible-but-wrong fix a hurried agent makes. When the brief carries a
rejected attempt whose failing test output names test_add_negative, it makes the real fix.
It writes its verdict to $STATEWRIGHT_VERDICT and says "Done. All tests pass." either way:
that message is kept as a note and never read as a verdict."""

import json
import os
import subprocess
from pathlib import Path

brief = json.loads(Path(os.environ["STATEWRIGHT_BRIEF"]).read_text())
prior = brief.get("prior_attempts", [])
evidence = "\n".join(str(p.get("output", "")) for p in prior)

if "test_add_negative" in evidence:
    body = "def add(a, b):\n    return a + b\n"
    summary = "add() now returns a + b; the failing test showed abs() was wrong for negatives"
else:
    body = "def add(a, b):\n    return abs(a) + abs(b)\n"
    summary = "add() returned a - b; changed it to add the magnitudes"

Path("calc.py").write_text(body)
subprocess.run(["git", "checkout", "-q", "-B", "work"], check=True)
subprocess.run(["git", "commit", "-q", "-am", f"fix add (attempt {brief['attempt']})"], check=True)
sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
Path(os.environ["STATEWRIGHT_VERDICT"]).write_text(
    json.dumps({"summary": summary, "branch": "work", "commit": sha.stdout.strip()})
)
print("Done. All tests pass.")
