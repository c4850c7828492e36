"""Run check and goal-oracle commands, and guard the assets they read.

A command that exits 0 passes; any other exit is a fail; a command that cannot start
is an error and one that outlives its timeout is a timeout. Only a pass passes.

CHECKING must use assets the worker cannot write. When a run opens, the runner
fingerprints every check's and oracle's assets (its ``assets`` list plus each argv
entry naming an existing file); before a check runs, an asset that changed since
then turns the check into an error naming the file.

A check runs what the worker wrote (a test suite imports its code), so it gets what any
command of the loop gets: a minimal environment plus what it declares, never the
runner's (``loop._isolation``). Its output (stdout and stderr as written) keeps its end.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

from statewright._errors import ExecutorError
from statewright.executors.base import Reason
from statewright.executors.checks import run_command_check
from statewright.loop._isolation import command_env
from statewright.loop.definition import CommandSpec
from statewright.machine.loop.model import CheckOutcome, CheckResult


def run_check(
    spec: CommandSpec,
    *,
    cwd: Path,
    environ: Mapping[str, str],
    variables: Mapping[str, str] | None = None,
    protected: Mapping[str, str] | None = None,
) -> CheckResult:
    """Run one check or oracle; never raises for the command's own trouble.

    It runs with the minimal base taken from ``environ`` (the runner's environment), what
    ``spec`` declares, and the loop's ``variables``."""
    if protected is not None:
        changed = changed_assets(protected, [spec], cwd)
        if changed:
            msg = (
                f"check asset changed since the run opened: {', '.join(changed)};"
                " the worker must not write what checks it. Restore it, or start a new run"
            )
            return CheckResult(spec.name, CheckOutcome.ERROR, msg)
    try:
        env = command_env(spec, environ, variables)
        done = run_command_check(spec.argv, cwd=cwd, env=env, timeout=spec.timeout_seconds, merge_stderr=True)
    except ExecutorError as exc:  # it could not start
        return CheckResult(spec.name, CheckOutcome.ERROR, str(exc))
    if done.passed:
        return CheckResult(spec.name, CheckOutcome.PASS, done.output)
    if done.reason == Reason.TIMEOUT:
        why = f"timed out after {spec.timeout_seconds:g}s"
        return CheckResult(spec.name, CheckOutcome.TIMEOUT, _join(done.output, why))
    return CheckResult(spec.name, CheckOutcome.FAIL, _join(done.output, done.detail))


def asset_paths(spec: CommandSpec, cwd: Path) -> tuple[Path, ...]:
    """The files and directories a command reads that the worker must not write."""
    out: list[Path] = list(spec.assets)
    for arg in spec.argv:
        if arg.startswith("-"):
            continue
        p = Path(arg)
        p = p if p.is_absolute() else cwd / p
        if p.is_file() and p not in out:
            out.append(p)
    return tuple(out)


def fingerprint_assets(specs: Iterable[CommandSpec], cwd: Path) -> dict[str, str]:
    """sha256 per asset path (a directory hashes every file under it)."""
    return {str(p): _hash_path(p) for spec in specs for p in asset_paths(spec, cwd)}


def changed_assets(recorded: Mapping[str, str], specs: Iterable[CommandSpec], cwd: Path) -> list[str]:
    """Asset paths of ``specs`` whose proposal_hash differs from ``recorded``."""
    changed: list[str] = []
    for spec in specs:
        for p in asset_paths(spec, cwd):
            key = str(p)
            if key in recorded and recorded[key] != _hash_path(p):
                changed.append(key)
    return changed


def _hash_path(path: Path) -> str:
    h = hashlib.sha256()
    if path.is_file():
        h.update(path.read_bytes())
    elif path.is_dir():
        for f in sorted(q for q in path.rglob("*") if q.is_file() and "__pycache__" not in q.parts):
            h.update(str(f.relative_to(path)).encode())
            h.update(b"\0")
            h.update(f.read_bytes())
            h.update(b"\0")
    else:
        h.update(b"<missing>")
    return h.hexdigest()


def _join(output: str, tail: str) -> str:
    if not tail:
        return output
    return output + ("\n" if output and not output.endswith("\n") else "") + f"[{tail}]"
