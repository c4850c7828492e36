"""Shared pytest setup. Test helpers live in ``tests/strategies.py``; this directory is on
``sys.path`` because pytest imports this conftest from it (rootdir-based import mode)."""
