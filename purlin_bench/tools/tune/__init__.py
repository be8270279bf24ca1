"""`purlin tune`: search strategies and datapath parameters per message size.

One idea per module:

* ``sweep``: search spaces as data (``sweeps/*.yaml``), validated on load;
* ``space``: the define-by-run space with its conditions;
* ``effective``: the configuration a backend really runs (dedupe key);
* ``tuner``: one Optuna study with injected check/measure (the core rules);
* ``storage``: study storage from a URL (SQLite by default, any RDB);
* ``measure``: check/measure through the measurement service;
* ``finals``: the finalists and the default side by side, and the guard;
* ``driver``: from a request to studies and plan files (the CLI's engine),
  written and read through :mod:`purlin_bench.plans`.

Nothing here imports Optuna at module import; it loads when a study runs.
"""
