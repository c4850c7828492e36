"""Canonical proposals and the hash an approval binds to."""

from statewright.approvals.proposal import build_proposal, proposal_hash

__all__ = ["build_proposal", "proposal_hash"]
