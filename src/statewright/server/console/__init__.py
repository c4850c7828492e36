"""The web console (``statewright serve``): server-rendered pages for approvers and operators
over the same engine as the HTTP API. See pages.py for the routes, sessions.py for signing in
and CSRF, views.py for what each page reads, loop_runs.py for the loop runs it shows."""

from statewright.server.console.pages import Console, console_routes

__all__ = ["Console", "console_routes"]
