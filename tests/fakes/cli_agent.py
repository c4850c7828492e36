"""A stand-in for a CLI coding agent, run as ``python cli_agent.py MODE [ARG]``.

Modes:
    verdict JSON        write JSON to $STATEWRIGHT_VERDICT; print a note
    record JSON         like ``verdict``, and write what it saw (stdin, env, cwd) to
                        ./seen.json
    raw TEXT            write TEXT verbatim to $STATEWRIGHT_VERDICT
    stdout-only JSON    print JSON to stdout and write no verdict file
    exit CODE           write a valid-looking verdict, then exit with CODE
    loud CHARS          print CHARS characters to stdout and to stderr; write {"approved": true}
    hang PIDFILE        start a grandchild that sleeps, write its pid to PIDFILE, sleep
    mcp JSON...         act as an MCP client of ``statewright mcp-verdict`` (started from
                        $STATEWRIGHT_SCHEMA / $STATEWRIGHT_VERDICT) and call
                        submit_verdict with each JSON argument in turn
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

MCP_SERVER = [
    sys.executable,
    "-c",
    "from statewright.executors.mcp_verdict import mcp_verdict_command; mcp_verdict_command()",
]


def main(argv: list[str]) -> int:
    mode, args = argv[0], argv[1:]
    stdin_text = sys.stdin.read() if not sys.stdin.isatty() else ""
    verdict_path = Path(os.environ.get("STATEWRIGHT_VERDICT", "verdict.json"))
    if mode == "verdict":
        verdict_path.write_text(args[0])
        print(f"I looked at the brief ({len(stdin_text)} chars) and wrote my verdict.")
    elif mode == "record":
        seen = {
            "stdin": stdin_text,
            "brief_file": Path(os.environ["STATEWRIGHT_BRIEF"]).read_text(),
            "env": {k: v for k, v in os.environ.items() if k.startswith("STATEWRIGHT_")},
            "cwd": os.getcwd(),
        }
        Path("seen.json").write_text(json.dumps(seen))
        verdict_path.write_text(args[0])
        print("recorded")
    elif mode == "raw":
        verdict_path.write_text(args[0])
    elif mode == "stdout-only":
        print(args[0])
    elif mode == "exit":
        verdict_path.write_text(json.dumps({"approved": True}))
        print("about to fail", file=sys.stderr)
        return int(args[0])
    elif mode == "loud":
        n = int(args[0])
        sys.stdout.write("o" * (n - 3) + "END")
        sys.stderr.write("e" * (n - 3) + "END")
        verdict_path.write_text(json.dumps({"approved": True}))
    elif mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        Path(args[0]).write_text(str(child.pid))
        print("started a grandchild", flush=True)
        time.sleep(60)
    elif mode == "mcp":
        return _mcp_client([json.loads(a) for a in args])
    else:
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    return 0


def _mcp_client(verdicts: list[object]) -> int:
    server = subprocess.Popen(
        MCP_SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    if server.stdin is None or server.stdout is None:
        return 3

    def ask(method: str, params: dict[str, object], request_id: int) -> dict[str, object]:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        server.stdin.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
        server.stdin.flush()  # type: ignore[union-attr]
        return json.loads(server.stdout.readline())  # type: ignore[union-attr, no-any-return]

    init = ask("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "fake-agent", "version": "0"}}, 1)
    server.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    server.stdin.flush()
    tools = ask("tools/list", {}, 2)
    print(json.dumps({"init": init, "tools": tools}))
    for i, verdict in enumerate(verdicts):
        reply = ask("tools/call", {"name": "submit_verdict", "arguments": verdict}, 10 + i)
        print(json.dumps(reply))
    server.stdin.close()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
