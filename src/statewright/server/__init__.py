"""The HTTP API (``statewright serve``): tasks, reviews, approvals, the operator queue,
outer-loop runs, metrics and signed webhooks, over one store. Needs the ``[web]`` extra."""

from statewright.server.app import ROUTE_FACTORIES, create_app
from statewright.server.hooks import Hook, load_hooks, sign
from statewright.server.http import Api

__all__ = ["ROUTE_FACTORIES", "Api", "Hook", "create_app", "load_hooks", "sign"]
