"""A scripted worker for loop tests. Its behaviour comes from the item's fields.

fix_on_attempt: N (default 1) or null   writes fixed-<id> from attempt N on
exit: CODE                              exits with CODE (a "no result" pass)
touch: PATH                             creates PATH (e.g. the kill-switch file)
run: [argv...]                          runs a command first (e.g. 'loop stop'); $NAME in an
                                        argument is the value of a variable it was given
tamper: PATH                            appends to PATH (a check asset)
kill_parent: KILL | TERM                signals the loop process, then blocks
spawn: true                             first starts a child that blocks (pid in children.log)
tokens / money                          the cost it reports
barrier: [NAME, SIZE]                   waits until SIZE workers have reached barrier NAME (passes
                                        at once meet there; one at a time never would: exit 3)
It always claims success on stdout: the loop must not believe it.
"""

import json
import os
import pathlib
import select
import signal
import subprocess
import sys

from _proc import loop_pid, meet

item = json.loads(os.environ["STATEWRIGHT_ITEM"])
attempt = int(os.environ["STATEWRIGHT_ATTEMPT"])
with open("launches.log", "a", encoding="utf-8") as log:
    log.write(f"{item['id']} {attempt} {os.getpid()}\n")
if item.get("barrier"):
    name, size = item["barrier"]
    if (met := meet(name, size, f"{item['id']}-{attempt}")) < size:
        print(f"only {met} of {size} workers met at barrier {name}")
        sys.exit(3)
if item.get("run"):
    subprocess.run([os.path.expandvars(a) for a in item["run"]], check=False)
if item.get("touch"):
    pathlib.Path(item["touch"]).write_text("stop", encoding="utf-8")
if item.get("tamper"):
    with open(item["tamper"], "a", encoding="utf-8") as f:
        f.write("\n# the worker was here\n")
if "exit" in item:
    print("Done. All tests pass.")
    sys.exit(int(item["exit"]))
fix_on = item.get("fix_on_attempt", 1)
if fix_on is not None and attempt >= fix_on:
    pathlib.Path(f"fixed-{item['id']}").write_text("ok", encoding="utf-8")
result_file = os.environ.get("STATEWRIGHT_RESULT_FILE")
if result_file:
    with open(result_file, "w", encoding="utf-8") as f:
        json.dump(
            {
                "tokens": item.get("tokens", 100),
                "money_usd": item.get("money", 0.01),
                "artifacts": [f"patch-{item['id']}-{attempt}.diff"],
            },
            f,
        )
if item.get("spawn"):
    child = subprocess.Popen([sys.executable, "-c", "import select; select.select([], [], [])"])
    with open("children.log", "a", encoding="utf-8") as log:
        log.write(f"{child.pid}\n")
if item.get("kill_parent"):
    os.kill(loop_pid(), getattr(signal, "SIG" + item["kill_parent"]))
    select.select([], [], [])  # block until killed; never sleeps on a clock
print("Done. All tests pass.")
