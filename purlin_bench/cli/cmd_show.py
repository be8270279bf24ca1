"""``purlin show``: the SNAC program of one collective, strategy and size."""

from __future__ import annotations

from typing import Optional

import typer

from purlin_bench.cli.common import console
from purlin_bench.cli.limits import check_plan_param, check_ranks
from purlin_bench.cli.targets import one_spec
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import PurlinError
from purlin_bench.strategies import STRATEGIES
from purlin_bench.strategies.default import untuned_config
from purlin_bench.strategies.derive import derive_program
from purlin_bench.program.render import render_rich
from purlin_bench.base.sizes import parse_bytes
from purlin_bench.spec.instance import instantiate

ORDER = 20


def show(
    collective: Optional[str] = typer.Argument(
        None, help="A built-in collective (see 'purlin list') or a path to a .yaml spec."
    ),
    ranks: int = typer.Option(4, "--ranks", help="Number of ranks."),
    strategy: str = typer.Option(
        "auto", "--strategy", "-s", help=f"{', '.join(STRATEGIES)}, or auto (the untuned default)."
    ),
    slice_bytes: str = typer.Option(
        "0", "--slice-bytes", help="Bytes per slice, e.g. 4K or 1M; 0 lets the strategy choose."
    ),
    channels: int = typer.Option(1, "--channels", help="Step lists per rank."),
    count: int = typer.Option(1024, "--count", help="Elements (per chunk or per buffer, as the spec's 'count' says)."),
    dtype: str = typer.Option("float32", "--dtype", "-d",
                              help="float32, float64, float16, bfloat16, int32, float8_e4m3fn or float8_e5m2."),
    root: int = typer.Option(0, "--root", help="Root rank of a rooted collective."),
    inplace: bool = typer.Option(False, "--inplace", help="Show the in-place program (nccl-tests' in-place buffers)."),
    as_json: bool = typer.Option(False, "--json", help="Print the program as JSON (Program.to_json) instead."),
    spec_file: Optional[str] = typer.Option(
        None, "--spec", help="A user's collective spec (.yaml) instead of COLLECTIVE."
    ),
    source: bool = typer.Option(
        False,
        "--source",
        help="Print the device code the GPU backend generates for the program (the compiled datapath) instead.",
    ),
    blocks: int = typer.Option(
        0, "--blocks", help="With --source: thread blocks per (rank, channel) list; 0 sizes them from the data."
    ),
    unroll: int = typer.Option(2, "--unroll", help="With --source: 16-byte vectors in flight per thread (1, 2, 4)."),
) -> None:
    """Show the SNAC program a strategy derives: per rank and channel, every step
    with its peer, buffer slice [lo:hi), flag and role; then a summary."""
    spec = one_spec(collective, spec_file)
    if ranks < 1:
        raise PurlinError(f"--ranks must be >= 1, got {ranks}")
    if count < 0:
        raise PurlinError(f"--count must be >= 0, got {count}")
    if channels < 1:
        raise PurlinError(f"--channels must be >= 1, got {channels}")
    check_ranks([ranks])
    check_plan_param("channels", channels, "--channels")
    name, np_dtype = resolve_dtype(dtype)
    inst = instantiate(spec, ranks, count, np_dtype.itemsize, root if spec.rooted else 0)
    if strategy == "auto":
        strategy = untuned_config(inst).strategy
    params = {"slice_bytes": parse_bytes(slice_bytes, "--slice-bytes"), "channels": channels}
    program = derive_program(inst, strategy, name, params=params, inplace=inplace)
    if as_json:
        print(program.to_json(indent=2))
        return
    if source:
        from purlin_bench.backends import AUTO_ORDER, backend_class
        from purlin_bench.backends.port import unsupported

        gpu = backend_class(AUTO_ORDER[0])  # the GPU backend; its source needs no GPU
        why = unsupported(gpu, program)  # sizes per call, fp8: lowered as fixed ones they would print wrong code
        if why:
            raise PurlinError(f"--source: {why}")
        print(gpu(ranks).source(program, blocks=blocks, unroll=unroll, kernel="compiled"), end="")
        return
    console.print(render_rich(program))


def register(app: typer.Typer) -> None:
    app.command("show")(show)
