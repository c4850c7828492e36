"""GitHub: labels as a projection of task state (``labels``), over a small REST client
(``client``), and ``statewright github`` (``cli``)."""
