"""Shared test fakes: a scripted OpenAI-compatible server and a stand-in CLI agent.

Importable as ``fakes`` (``tests/`` is on sys.path; see tests/executors/conftest.py).
"""
