"""Scripted stand-ins for supplier-bank-change.yaml: an evidence analyst, and the fixed,
narrow effects around it. The facts of the case live in the task's state: each step
reads the input and earlier results (``ctx.input``, ``ctx.results``) and returns its own.

Two outside systems are files in the task's workspace, as a mailbox and an accounting
system would be services: ``mailbox.json`` (the verified contact's answers) and
``vendors.json`` (the supplier master: each supplier's account fingerprint and record
version, and the receipts of the writes it took).

- ``analyse_evidence(brief, ctx)`` (python agent): classifies the request from the evidence
  kinds (the input's, and a callback the mailbox holds), citing only this case's ids.
- ``request_clarification(ctx)`` (code): sends the fixed template to the verified contact
  once; passes at once when nothing is missing.
- ``clarification_settled(ctx)`` (check): passes when nothing is missing or the verified
  contact has answered.
- ``evidence_sufficient(ctx)`` (code): passes only when the latest analysis is sufficient.
- ``prepare_change(ctx)`` (code): the canonical proposal: supplier id, current and proposed
  account fingerprints, the supplier record's version, evidence ids and risk flags.
- ``apply_bank_change(ctx)`` (code): one write per idempotency key, sent with the record
  version the approval saw; a record that changed since answers ConflictError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from statewright import ConflictError

TEMPLATE = ("Please confirm the change of bank details for supplier {supplier} by calling "
            "the number already on file. Do not reply to the message that requested it.")


def _read(path: Path, default: Any) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


def _vendors(ctx: Any) -> tuple[Path, dict[str, Any]]:
    path = Path(ctx.workspace) / "vendors.json"
    return path, _read(path, {"suppliers": {}, "receipts": {}})


def analyse_evidence(brief: dict[str, Any], ctx: Any) -> dict[str, Any]:
    case = brief["input"]
    evidence = list(case["evidence"])
    answer = _read(Path(ctx.workspace) / "mailbox.json", {}).get(case["supplier_id"])
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
    return {"verdict": verdict, "note": "Looks fine to me."}  # a note, never read as the verdict


def request_clarification(ctx: Any) -> dict[str, Any]:
    missing = ctx.results["analyse"]["missingEvidence"]
    if not missing:
        return {"output": {"sent": False}}
    outbox = Path(ctx.workspace) / "outbox.json"
    sent = _read(outbox, {})
    if ctx.idempotency_key not in sent:  # once per attempt, whatever the redeliveries
        sent[ctx.idempotency_key] = {
            "to": "verified-contact-on-file",
            "body": TEMPLATE.format(supplier=ctx.input["supplier_id"]),
            "missing": missing,
        }
        outbox.write_text(json.dumps(sent))
    return {"output": {"sent": True, "missing": missing}}


def clarification_settled(ctx: Any) -> dict[str, Any]:
    if not ctx.results["analyse"]["missingEvidence"]:
        return {"passed": True, "detail": "nothing was asked"}
    if ctx.input["supplier_id"] in _read(Path(ctx.workspace) / "mailbox.json", {}):
        return {"passed": True, "detail": "the verified contact answered"}
    return {"passed": False, "detail": "no answer from the verified contact yet"}


def evidence_sufficient(ctx: Any) -> dict[str, Any]:
    analysis = ctx.results["analyse"]
    if analysis["outcome"] == "sufficient":
        return {"ok": True, "output": "the latest analysis is sufficient"}
    return {"ok": False,
            "output": f"the latest analysis says {analysis['outcome']!r}; analyse the new "
                      f"evidence again (missing: {analysis['missingEvidence']})"}


def prepare_change(ctx: Any) -> dict[str, Any]:
    supplier_id = ctx.input["supplier_id"]
    record = _vendors(ctx)[1]["suppliers"].get(supplier_id)
    if record is None:
        return {"ok": False, "output": f"supplier {supplier_id} is not in the supplier master"}
    analysis = ctx.results["analyse"]
    return {"output": {
        "supplier_id": supplier_id,
        "current_account_fingerprint": record["account_fingerprint"],
        "proposed_account_fingerprint": ctx.input["account_fingerprint"],
        "record_version": record["version"],
        "evidence_ids": analysis["evidenceRefs"],
        "risk_flags": analysis["riskFlags"],
    }}


def apply_bank_change(ctx: Any) -> dict[str, Any]:
    change = ctx.results["prepare"]
    path, vendors = _vendors(ctx)
    receipt = vendors["receipts"].get(ctx.idempotency_key)
    if receipt is None:
        record = vendors["suppliers"][change["supplier_id"]]
        if record["version"] != change["record_version"]:
            raise ConflictError(f"supplier {change['supplier_id']} is at version {record['version']}; "
                                f"the approved change was built on version {change['record_version']}")
        record.update(account_fingerprint=change["proposed_account_fingerprint"], version=record["version"] + 1)
        receipt = {"id": f"rcpt-{len(vendors['receipts']) + 1}", "version": record["version"]}
        vendors["receipts"][ctx.idempotency_key] = receipt
        path.write_text(json.dumps(vendors))
    return {"output": {"receipt": receipt["id"], "record_version": receipt["version"]}}
