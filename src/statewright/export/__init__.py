"""Exports of a workflow: Mermaid (renders on GitHub) and Amazon States Language."""

from statewright.export.asl import to_asl
from statewright.export.mermaid import to_mermaid

__all__ = ["to_asl", "to_mermaid"]
