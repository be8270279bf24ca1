"""What the commands share about naming collectives: a built-in name, a path
to a user's YAML (as COLLECTIVE or through ``--spec``), or ``all``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from purlin_bench.base.errors import PurlinError
from purlin_bench.spec.loader import CollectiveSpec, load_all_builtin, load_spec_file, resolve


def one_spec(collective: str | None, spec_file: str | None) -> CollectiveSpec:
    """Exactly one collective: COLLECTIVE (a name or a .yaml path) or --spec."""
    if collective and spec_file:
        raise PurlinError(f"give COLLECTIVE or --spec, not both (got '{collective}' and '{spec_file}')")
    if spec_file:
        return load_spec_file(spec_file)
    if not collective:
        raise PurlinError("missing COLLECTIVE (a built-in name, see 'purlin list', or a path to a .yaml spec)")
    if collective == "all":
        raise PurlinError("this command takes one collective, not 'all'")
    return resolve(collective)


def many_specs(collective: str | None, spec_files: Sequence[str]) -> list[CollectiveSpec]:
    """COLLECTIVE (a name, a .yaml path, a comma list of them, or ``all``)
    plus every ``--spec`` file."""
    if not collective and not spec_files:
        raise PurlinError(
            "missing COLLECTIVE (a built-in name, 'all', or a path to a .yaml spec; or use --spec FILE.yaml)"
        )
    specs: list[CollectiveSpec] = []
    if collective == "all":
        specs.extend(load_all_builtin())
    elif collective and "," in collective and not Path(collective).exists():
        # A comma list of names or paths: 'all-gather-v,reduce-scatter-v,all-to-all-v'.
        specs.extend(resolve(part.strip()) for part in collective.split(",") if part.strip())
    elif collective:
        specs.append(resolve(collective))
    specs.extend(load_spec_file(path) for path in spec_files)
    # 'all-gather,all-gather' (or one file twice, however spelt): its rows once; two files of one
    # name stay two.
    return list({(spec.name, os.path.realpath(spec.source)): spec for spec in specs}.values())
