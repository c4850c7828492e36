"""``python -m statewright.loop``: the loop CLI on its own."""

from statewright.loop.cli import main

main()
