"""`purlin tune`: search strategies and datapath parameters per message size.

One idea per module:

* ``sweep``: search spaces as data (``sweeps/*.yaml``), validated on load;
* ``space``: the define-by-run space with its conditions;
* ``effective``: the configuration a backend really runs (dedupe key);
* ``tuner``: one Optuna study with injected check/measure (the core rules);
* ``storage``: study storage from a URL (SQLite by default, any RDB);
* ``measure``: check/measure through a Session on a backend;
* ``artifact``: plan artifacts in ``results/``, atomic and validated;
* ``driver``: from a request to studies and artifacts (the CLI's engine).

Nothing here imports Optuna at module import; it loads when a study runs.
"""
