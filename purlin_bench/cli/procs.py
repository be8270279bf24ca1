"""``--procs N``: one process per rank, started by us or by torchrun.

In the process a user starts, ``--procs 2,4`` starts one run per count
(procs/launch.py), each of the same command line less ``--procs`` and
``--gpus`` (the launcher maps ranks to GPUs round-robin), and exits with the
first failure's code. Inside a run (ours, or ``torchrun --nproc-per-node N
-m purlin_bench ...``), :func:`enter` joins it before any command runs: rank
0 then runs the command with one rank per process, and every other rank
serves rank 0's commands (backends/procs.py) instead.
"""

from __future__ import annotations

import json
import os
import sys

from purlin_bench.base.errors import PurlinError

# Options the launcher consumes: the children get the command without them.
_LAUNCH_OPTIONS = ("--procs", "--gpus")
_LAUNCH_FLAGS = ("--mps",)
PROCS_HELP = (
    "one process per rank: comma list of process counts, one run each (ranks on --gpus round-robin, several per GPU"
    " allowed); under torchrun leave it out"
)
MPS_HELP = (
    "with --procs: run the ranks under a CUDA MPS daemon of this run's own (private pipe and log folders, stopped at"
    " the end), so processes sharing a GPU run concurrently instead of time-sliced"
)


# The commands that run one process per rank; any other command line, even
# with RANK and WORLD_SIZE in its environment, runs as the one process it is.
RUN_COMMANDS = ("check", "bench", "tune")


def _started_as_rank(argv: list[str]) -> bool:
    """Whether this process was started as one rank of a run: by our
    launcher (PURLIN_STORE), or by torchrun (TORCHELASTIC_RUN_ID, which it
    sets and a shell's leftover RANK does not), for a command that runs so."""
    if "PURLIN_STORE" not in os.environ and "TORCHELASTIC_RUN_ID" not in os.environ:
        return False
    command = next((a for a in argv if not a.startswith("-")), None)
    return command in RUN_COMMANDS


def enter(argv: list[str]) -> int | None:
    """Join this process's run if it is one of a run's processes: None for
    rank 0 (go on with the command), else the worker's exit code."""
    if not _started_as_rank(argv):
        return None
    from purlin_bench.procs import from_environ

    env = from_environ()
    if env is None:
        return None
    from purlin_bench.spec.instance import MAX_RANKS, MAX_RANKS_WHY

    if env.size > MAX_RANKS:
        # Before any rendezvous: a run this size would wait for processes
        # that never come, then refuse the rank count anyway.
        raise PurlinError(f"WORLD_SIZE={env.size}: purlin runs at most {MAX_RANKS} ranks ({MAX_RANKS_WHY})")
    from purlin_bench.backends import procs

    if procs.current() is not None:
        return None
    run = procs.join(env)
    if run.rank == 0:
        return None
    try:
        return procs.serve(run)
    except KeyboardInterrupt:
        return 130  # quietly: rank 0 says it for the run
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


def is_worker() -> bool:
    """Whether this process serves rank 0 (it stays quiet on an interrupt)."""
    joined = sys.modules.get("purlin_bench.backends.procs")
    run = joined.current() if joined is not None else None
    return run is not None and run.rank != 0


def original_command() -> list[str]:
    """The command line the user typed, which the launcher passed on."""
    try:
        argv = json.loads(os.environ["PURLIN_COMMAND"])
    except ValueError:
        return []
    return [str(a) for a in argv] if isinstance(argv, list) else []


def ranks_for(given: list[int] | None, default: list[int]) -> list[int]:
    """Rank counts a command runs: the run's size inside a run (where
    ``--ranks`` may only repeat it), else ``given`` or ``default``."""
    size = in_run()
    if size is None:
        return given or default
    if given and given != [size]:
        raise PurlinError(f"--ranks {','.join(map(str, given))}: this run has {size} processes, one rank each")
    return [size]


def check_mps(mps: bool, procs: str | None) -> None:
    """--mps serves the processes --procs starts; alone it has none to serve."""
    if mps and procs is None:
        raise PurlinError(
            "--mps runs the ranks of --procs under CUDA MPS: give --procs too (under torchrun, start MPS yourself)"
        )


def check_procs(counts: list[int], backend, ranks: str | None, outputs: dict[str, object] | None = None) -> None:
    """Bounds of --procs, before any process starts; ``outputs`` (option ->
    value) are written once per run, so they take one count only."""
    from purlin_bench.backends.procs import watchdog_s
    from purlin_bench.cli.limits import check_ranks

    check_ranks(counts, "--procs")
    watchdog_s()  # a bad PURLIN_WATCHDOG_S is one line here, before any process
    given = [name for name, value in (outputs or {}).items() if value]
    if given and len(counts) > 1:
        raise PurlinError(f"{given[0]} is written by one run: give one --procs count with it, not {len(counts)}")
    if not backend.runs_in_procs:
        raise PurlinError(f"--procs: backend {backend.name} cannot run one process per rank")
    if ranks is not None:
        raise PurlinError("--procs N runs N ranks, one per process: leave out --ranks")


def launch(counts: list[int], gpus: list[int] | None, argv: list[str], mps: bool = False) -> int:
    """Run ``purlin ARGV`` (less --procs, --gpus and --mps) once per count in
    ``counts``, each as that many processes (under a private MPS daemon
    with ``mps``); the first failure's exit code."""
    if in_run() is not None:
        raise PurlinError("--procs starts its own processes; under torchrun (or inside a run) leave it out")
    if not mps:
        return _launch(counts, gpus, argv)
    from purlin_bench.procs.mps import PrivateMps

    with PrivateMps():
        return _launch(counts, gpus, argv)


def _launch(counts: list[int], gpus: list[int] | None, argv: list[str]) -> int:
    from purlin_bench.procs.launch import launch as start

    child = [a for a in _without(argv, _LAUNCH_OPTIONS) if a not in _LAUNCH_FLAGS]
    # Rank 0 records the command a user typed (results files say it).
    environ = {**os.environ, "PURLIN_COMMAND": json.dumps(argv)}
    from purlin_bench.backends.procs import watchdog_s

    grace = watchdog_s() + 10  # a rank's own watchdog names what it waited on first
    code = 0
    for n in counts:
        rc = start(["-m", "purlin_bench", *child], n, gpus, grace_s=grace, environ=environ)
        sys.stdout.flush()
        code = code or rc
        if rc in (130, 143):  # interrupted or terminated: not the next count either
            break
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
