"""Helpers shared by the commands: consoles, one-line errors, list options."""

from __future__ import annotations

import shlex
import sys

from typing import TYPE_CHECKING, Any

from purlin_bench.base.errors import PurlinError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

_consoles: dict[str, Any] = {}


def __getattr__(name: str) -> Console:
    """``console`` (stdout) and ``err_console`` (stderr), made on first use:
    rich costs a tenth of a second to import, and `purlin --help` and
    a bad option's error line need no console."""
    if name not in ("console", "err_console"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _consoles:
        from rich.console import Console

        # Piped or redirected output keeps whole table rows; a terminal
        # gets rich's own fitting.
        if name == "err_console":
            _consoles[name] = Console(stderr=True)
        else:
            _consoles[name] = Console() if sys.stdout.isatty() else Console(width=220)
    return _consoles[name]


# The arguments of this invocation (set by main.run): what a result file
# records as its command, also when run() is called from Python.
invocation: list[str] = []


def command_line() -> str:
    return " ".join(["purlin", *(shlex.quote(a) for a in invocation)])


def progress_bar(rows_on_stdout: bool = False) -> Progress:
    """A transient bar, only on a terminal: a log or a pipe gets the tables
    and the error line, no bar redraws. Nothing of it is left when it ends.

    ``rows_on_stdout``: the command prints its rows to stdout while the bar
    runs (bench). When stdout is a terminal the bar is drawn there, on the
    rows' own console, so rich prints each row above the bar; a bar on stderr
    and rows on stdout are two writers to one screen, and rows landed on the
    bar's line under a stale copy of it. Otherwise the bar goes to stderr
    when that is a terminal (the rows then go to a file or a pipe)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    out_console, err_console = __getattr__("console"), __getattr__("err_console")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    if rows_on_stdout and out_console.is_terminal:
        # print() and notes on stderr while the bar runs go above it too.
        return Progress(*columns, console=out_console, transient=True, redirect_stdout=True, redirect_stderr=True)
    # Lines printed to stdout while the bar runs: on a terminal rich moves
    # them above the bar; when stdout is a file they must go straight there,
    # not through the bar's stderr console.
    return Progress(*columns, console=err_console, transient=True, disable=not err_console.is_terminal,
                    redirect_stdout=sys.stdout.isatty())


def error(message: str) -> None:
    """One line on stderr, no markup interpretation."""
    print(f"purlin: error: {message}", file=sys.stderr)


def note(message: str) -> None:
    """One line on stderr: soft_wrap stops rich from breaking it at 80
    columns when stderr is not a terminal."""
    from rich.markup import escape

    __getattr__("err_console").print(f"[yellow]note:[/yellow] {escape(message)}", highlight=False, soft_wrap=True)


def int_list(text: str, what: str, minimum: int = 0, once: bool = True) -> list[int]:
    """'1,2,8' -> [1, 2, 8]; a clear error for anything else. With ``once`` a value given
    twice is kept once (as check's name lists are): `--ranks 2,2` ran every row twice."""
    values = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise PurlinError(f"{what} must be whole numbers separated by commas, got '{text}'") from None
        if value < minimum:
            raise PurlinError(f"{what} must be >= {minimum}, got {value}")
        values.append(value)
    if not values:
        raise PurlinError(f"{what} is empty")
    return list(dict.fromkeys(values)) if once else values


def name_list(text: str) -> list[str]:
    return list(dict.fromkeys(p.strip() for p in str(text).split(",") if p.strip()))


def param_help(name: str) -> str:
    """A datapath parameter's help as its backends give it, with the values
    it takes and who takes it: a user should not have to read the source to
    learn that --datapath takes sm | ce."""
    from purlin_bench.backends import all_params

    param, owners = all_params()[name]
    values = " | ".join(map(str, param.choices)) if param.choices else ""
    if not values and param.minimum is not None:
        values = f"{param.minimum}..{param.maximum}" if param.maximum is not None else f">= {param.minimum}"
    return f"{param.help}; {values} ({', '.join(owners)})" if values else f"{param.help} ({', '.join(owners)})"


def refuse_foreign_params(backend, given: dict[str, Any]) -> dict[str, Any]:
    """The datapath parameters given on the command line (None: not given),
    or a PurlinError for the first that ``backend`` does not take."""
    from purlin_bench.backends import all_params

    asked = {k: v for k, v in given.items() if v is not None}
    taken = {p.name for p in backend.params}
    for name in asked:
        if name not in taken:
            raise PurlinError(f"--{name} is a datapath parameter of {', '.join(all_params()[name][1])}, not of backend "
                              f"{backend.name}")
    return asked


def gpu_devices(text: str | None, backend) -> list[int] | None:
    """--gpus for commands that run on ``backend`` (a Backend class):
    '0,1,2,3', or 'all' (every device the backend sees). Only backends with
    devices take it."""
    if text is None:
        return None
    if not backend.has_devices:
        raise PurlinError(f"--gpus needs a backend that runs on GPUs; {backend.name} simulates its ranks")
    if text.strip() == "all":
        count = backend.device_count()
        if count < 1:
            raise PurlinError(f"--gpus all: backend {backend.name} sees no device")
        return list(range(count))
    return int_list(text, "--gpus", once=False)  # rank i on the i-th: `--procs 4 --gpus 0,0,1,1` pairs them
