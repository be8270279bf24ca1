"""The configuration a backend really runs, from the one a trial sampled.

Two sampled configurations that a backend runs identically must count as one:
the tuner keys repeated configurations, and plans store winners, by this
*effective* configuration. It differs from the sampled one in two ways:

* strategy parameter a strategy declares but the trial did not sample take
  the strategy's default (``ring`` and ``ring(slice_bytes=0)`` are one);
* datapath parameters are those of the backend: ones it does not accept are
  dropped (the numpy reference has none, so ``blocks=4`` and ``blocks=8`` are
  one configuration there), and the ones it accepts get their defaults.
"""

from __future__ import annotations

import json
from typing import Sequence

from purlin_bench.backends import backend_class
from purlin_bench.base.config import Param, RunConfig
from purlin_bench.base.errors import ProgramError
from purlin_bench.strategies import STRATEGIES
from purlin_bench.strategies.base import check_params


def effective_config(config: RunConfig, exec_params: Sequence[Param] | None, variable: bool = False) -> RunConfig:
    """``config`` as a backend whose datapath parameters are ``exec_params``
    runs it; ``None`` keeps every datapath parameter as given. ``variable``:
    for a program whose sizes come per call, each parameter within the values
    such a program runs with (Param.variable_choices)."""
    plan = dict(config.plan_params)
    strategy = STRATEGIES.get(config.strategy)
    if strategy is not None:
        try:
            plan = check_params(config.strategy, plan, strategy.params)
        except ProgramError:
            pass  # left as given: planning rejects it, and the trial records why
    given = dict(config.exec_params)
    if exec_params is None:
        datapath = given
    else:
        datapath = {p.name: given.get(p.name, p.default) for p in exec_params}
        if variable:
            for p in exec_params:
                if p.variable_choices and datapath[p.name] not in p.variable_choices:
                    datapath[p.name] = p.variable_choices[0]
    return RunConfig.make(config.strategy, plan, datapath)


def config_key(config: RunConfig) -> str:
    """A canonical text of a configuration (equal configurations, equal keys)."""
    return json.dumps(config.to_dict(), sort_keys=True)


def for_backend(config: RunConfig, backend: str) -> RunConfig:
    """``config`` as ``backend`` runs it (see :func:`effective_config`)."""
    return effective_config(config, backend_class(backend).params)
