"""The ``purlin`` command line: one module per command (``cmd_*.py``)."""
