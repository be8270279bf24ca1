"""``--procs N``: one process per rank, started by us or by torchrun.

In the process a user starts, ``--procs 2,4`` starts one run per count
(dist/launch.py), each of the same command line less ``--procs`` and
``--gpus`` (the launcher maps ranks to GPUs round-robin), and exits with the
first failure's code. Inside a run (ours, or ``torchrun --nproc-per-node N
-m purlin_bench ...``), :func:`enter` joins it before any command runs: rank
0 then runs the command with one rank per process, and every other rank
serves rank 0's commands (backends/procs.py) instead.
"""

from __future__ import annotations

import sys

from purlin_bench.errors import PurlinError

# Options the launcher consumes: the children get the command without them.
_LAUNCH_OPTIONS = ("--procs", "--gpus")
PROCS_HELP = "one process per rank: comma list of process counts, one run each (ranks on --gpus round-robin, several per GPU allowed); under torchrun leave it out"


def enter() -> int | None:
    """Join this process's run if it is one of a run's processes: None for
    rank 0 (go on with the command), else the worker's exit code."""
    from purlin_bench.dist import from_environ

    env = from_environ()
    if env is None:
        return None
    from purlin_bench.backends import procs

    if procs.current() is not None:
        return None
    run = procs.join(env)
    if run.rank == 0:
        return None
    try:
        return procs.serve(run)
    finally:
        procs.leave()


def leave() -> None:
    # Only a process that joined a run has anything to leave; `purlin --help`
    # must not import the backends for nothing.
    joined = sys.modules.get("purlin_bench.backends.procs")
    if joined is not None:
        joined.leave()


def in_run() -> int | None:
    """The number of processes of the run this process is rank 0 of, if any."""
    joined = sys.modules.get("purlin_bench.backends.procs")
    run = joined.current() if joined is not None else None
    return run.size if run else None


def ranks_for(given: list[int] | None, default: list[int]) -> list[int]:
    """Rank counts a command runs: the run's size inside a run (where
    ``--ranks`` may only repeat it), else ``given`` or ``default``."""
    size = in_run()
    if size is None:
        return given or default
    if given and given != [size]:
        raise PurlinError(f"--ranks {','.join(map(str, given))}: this run has {size} processes, one rank each")
    return [size]


def check_procs(counts: list[int], backend, ranks: str | None) -> None:
    """Bounds of --procs, before any process starts."""
    from purlin_bench.cli.limits import check_ranks

    check_ranks(counts, "--procs")
    if not backend.runs_in_procs:
        raise PurlinError(f"--procs: backend {backend.name} cannot run one process per rank")
    if ranks is not None:
        raise PurlinError("--procs N runs N ranks, one per process: leave out --ranks")


def launch(counts: list[int], gpus: list[int] | None, argv: list[str]) -> int:
    """Run ``purlin ARGV`` (less --procs and --gpus) once per count in
    ``counts``, each as that many processes; the first failure's exit code."""
    from purlin_bench.dist.launch import launch as start

    if in_run() is not None:
        raise PurlinError("--procs starts its own processes; under torchrun (or inside a run) leave it out")
    child = [a for a in _without(argv, _LAUNCH_OPTIONS)]
    code = 0
    for n in counts:
        rc = start(["-m", "purlin_bench", *child], n, gpus)
        sys.stdout.flush()
        code = code or rc
    return code


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in options:
            skip = True
            continue
        if any(arg.startswith(f"{o}=") for o in options):
            continue
        out.append(arg)
    return out
