"""Scripted stand-ins for supplier-bank-change.yaml: an evidence analyst and the fixed,
narrow effects around it. Steps share facts through files in the task's workspace.

- ``analyse_evidence(brief, ctx)`` (python agent): classifies the request from the evidence
  kinds, cites only this case's evidence ids, writes ``analysis.json``.
- ``request_clarification(ctx)`` (code): sends the fixed template to the verified contact
  once (``clarification-request.json``); passes at once when nothing is missing.
- ``clarification_settled(ctx)`` (check): passes when nothing is missing or the verified
  contact's answer (``clarification.json``) has arrived.
- ``evidence_sufficient(ctx)`` (code): passes only when the latest analysis is sufficient.
- ``apply_bank_change(ctx)`` (code): one write per idempotency key; a redelivered command
  gets the original receipt back (``ledger.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TEMPLATE = ("Please confirm the change of bank details for supplier {supplier} by calling "
            "the number already on file. Do not reply to the message that requested it.")


def _read(path: Path, default: Any) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


def analyse_evidence(brief: dict[str, Any], ctx: Any) -> dict[str, Any]:
    case = brief["input"]
    workspace = Path(ctx.workspace)
    evidence = list(case["evidence"])
    answer = _read(workspace / "clarification.json", None)
    if answer is not None:
        evidence.append(answer)
    kinds = {e["kind"] for e in evidence}
    refs = [e["id"] for e in evidence]
    verdict: dict[str, Any]
    if "altered_document" in kinds:
        verdict = {"outcome": "suspected_fraud", "missingEvidence": [],
                   "riskFlags": ["document-altered"], "evidenceRefs": refs,
                   "summary": "A submitted document shows signs of alteration."}
    elif "verified_callback" not in kinds:
        verdict = {"outcome": "needs_clarification",
                   "missingEvidence": ["independent contact confirmation"],
                   "riskFlags": ["request-origin-does-not-match-vendor-record"],
                   "evidenceRefs": refs,
                   "summary": "The account is documented, but not confirmed by the verified "
                              "contact."}
    else:
        verdict = {"outcome": "sufficient", "missingEvidence": [], "riskFlags": [],
                   "evidenceRefs": refs,
                   "summary": "The verified contact confirmed the new account."}
    record = {**verdict, "supplier_id": case["supplier_id"],
              "account_fingerprint": case["account_fingerprint"]}
    (workspace / "analysis.json").write_text(json.dumps(record))
    return {
        "verdict": verdict,
        "artifacts": {"account_fingerprint": case["account_fingerprint"]},
        "note": "Looks fine to me.",  # kept as a note, never read as the verdict
    }


def request_clarification(ctx: Any) -> dict[str, Any]:
    workspace = Path(ctx.workspace)
    analysis = _read(workspace / "analysis.json", {})
    if not analysis.get("missingEvidence"):
        return {"ok": True, "output": "nothing to clarify"}
    sent = workspace / "clarification-request.json"
    if not sent.exists():
        sent.write_text(json.dumps({
            "to": "verified-contact-on-file",
            "body": TEMPLATE.format(supplier=analysis["supplier_id"]),
            "missing": analysis["missingEvidence"],
        }))
    return {"ok": True, "output": "clarification requested from the verified contact",
            "artifacts": {"request": str(sent)}}


def clarification_settled(ctx: Any) -> dict[str, Any]:
    workspace = Path(ctx.workspace)
    if not _read(workspace / "analysis.json", {}).get("missingEvidence"):
        return {"passed": True, "detail": "nothing was asked"}
    if (workspace / "clarification.json").exists():
        return {"passed": True, "detail": "the verified contact answered"}
    return {"passed": False, "detail": "no answer from the verified contact yet"}


def evidence_sufficient(ctx: Any) -> dict[str, Any]:
    analysis = _read(Path(ctx.workspace) / "analysis.json", {})
    if analysis.get("outcome") == "sufficient":
        return {"ok": True, "output": "the latest analysis is sufficient"}
    return {"ok": False,
            "output": f"the latest analysis says {analysis.get('outcome')!r}; analyse the new "
                      f"evidence again (missing: {analysis.get('missingEvidence')})"}


def apply_bank_change(ctx: Any) -> dict[str, Any]:
    workspace = Path(ctx.workspace)
    ledger_path = workspace / "ledger.json"
    ledger = _read(ledger_path, {"receipts": {}})
    receipt = ledger["receipts"].get(ctx.idempotency_key)
    if receipt is None:
        analysis = _read(workspace / "analysis.json", {})
        receipt = {"id": f"rcpt-{len(ledger['receipts']) + 1}",
                   "supplier_id": analysis.get("supplier_id"),
                   "account_fingerprint": analysis.get("account_fingerprint")}
        ledger["receipts"][ctx.idempotency_key] = receipt
        ledger_path.write_text(json.dumps(ledger))
    return {"ok": True, "output": f"receipt {receipt['id']}",
            "artifacts": {"receipt": receipt["id"]}}
