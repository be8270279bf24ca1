"""Entry point of the ``purlin`` command.

Every command lives in its own ``cmd_<name>.py`` module with a
``register(app)`` function; ``COMMANDS`` below names them in --help's order
with their one-line help. A module is imported only when its command runs (or
shows its own --help): the commands pull in NumPy, ml_dtypes and the backends,
which take seconds to import on a slow machine, and ``purlin --help`` needs
none of them. tests/tools/test_cli.py checks COMMANDS against the modules.
Errors a user can cause (:class:`~purlin_bench.base.errors.PurlinError`, bad
options) print one line on stderr and exit non-zero; a traceback means a bug.
"""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys
import threading

import typer
import typer.core
import typer.main

try:  # typer >= 0.22 carries its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # older typer depends on click itself
    from click import exceptions as click_exceptions

import purlin_bench
from purlin_bench.cli import common, procs
from purlin_bench.base.errors import PurlinError

# name -> one line for `purlin --help` (the command's docstring says more).
COMMANDS = {
    "list": "List the built-in collectives and --spec files: op, rootedness, count mode, strategies.",
    "show": "Show the SNAC program a strategy derives, step by step, and a summary.",
    "check": "Check collectives against their reference semantics, every combination asked for.",
    "bench": "Measure collectives like nccl-tests: time, algbw, busbw, #wrong, in and out of place.",
    "plot": "Plot bus bandwidth and latency against size, one line per strategy and baseline.",
    "tune": "Tune strategies and datapath parameters per message-size bucket.",
    "export": "Export a tuned plan: json, csv or a C/C++ header.",
}
# -h is --help in every command (nccl-tests' -h too); click inherits it
# from the group's context into each command's.
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}


def load_command(name: str):
    """The click command of ``purlin NAME``, importing its module now."""
    module = importlib.import_module(f"purlin_bench.cli.cmd_{name}")
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    module.register(holder)
    return typer.main.get_command(holder)


class _LazyGroup(typer.core.TyperGroup):
    """Lists COMMANDS without importing them; builds one when it is called."""

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, cmd_name: str):
        if cmd_name not in COMMANDS:
            return None
        if cmd_name not in self.commands:
            self.commands[cmd_name] = load_command(cmd_name)
        return self.commands[cmd_name]

    def format_commands(self, ctx, formatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl(list(COMMANDS.items()))


app = typer.Typer(
    name="purlin",
    cls=_LazyGroup,
    context_settings=HELP_OPTIONS,
    help="Benchmark and autotune GPU scale-up collectives (specs as layouts, SNAC programs, Atom datapaths).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        print(f"purlin-bench {purlin_bench.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Benchmark and autotune GPU scale-up collectives."""


def run(argv: list[str] | None = None) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the exit code."""
    common.invocation[:] = list(sys.argv[1:] if argv is None else argv)
    if sys.stdout is None:
        # Started with stdout closed (`>&-`): Python then has no sys.stdout,
        # and the first table or print would be an AttributeError traceback.
        common.error("cannot write to stdout: it is closed (redirect it to a file or /dev/null)")
        if argv is None:
            sys.exit(1)
        return 1
    try:
        # One of a run's processes (--procs, torchrun): the workers serve
        # rank 0 here and never parse the command line.
        worker = procs.enter(common.invocation)
        if worker is None and "PURLIN_COMMAND" in os.environ:
            common.invocation[:] = procs.original_command()
        _on_sigterm_interrupt()
        result = worker if worker is not None else app(args=argv, prog_name="purlin", standalone_mode=False)
        code = result if isinstance(result, int) else 0
        if _signalled:  # typer returned 130 for the KeyboardInterrupt it caught, without a word
            code = _interrupted(_signalled[-1])
        sys.stdout.flush()  # here, not at exit: a full disk is then caught below
    except BrokenPipeError:  # stdout's reader went away (`| head`)
        code = _stdout_lost("the reader of stdout closed it")
    except OSError as exc:
        # Files purlin writes go through atomic.py (one WriteError line); an
        # OSError of these kinds reaching here is stdout's own (> /dev/full).
        if exc.errno not in _STDOUT_ERRNOS:
            raise
        code = _stdout_lost(exc.strerror or str(exc))
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        common.error("aborted")
        code = 130
    except click_exceptions.ClickException as exc:  # usage errors: unknown option, bad value
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `purlin`: the help is the answer
            print(exc.format_message())
            code = 0
        else:
            common.error(" ".join(exc.format_message().split()))
            code = exc.exit_code
    except PurlinError as exc:
        common.error(str(exc))
        code = 2
    except KeyboardInterrupt as exc:
        code = _interrupted(exc)
    finally:
        _restore_signals()
        procs.leave()
    if argv is None:
        sys.exit(code)
    return code


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is, so that it unwinds as Ctrl-C does
    (a bench keeps the rows it wrote, a tune its trials) and says so."""


# The interrupts this run received. typer catches a KeyboardInterrupt inside
# a command and returns 130 without a word (typer.core: Exit(130), returned
# as the result when not standalone), so the handlers note it here first.
_signalled: list[KeyboardInterrupt] = []


_replaced: dict[int, object] = {}


def _on_sigterm_interrupt() -> None:
    # Only handlers nobody else replaced (the launcher of --procs sets its
    # own), and only from the main thread (signal.signal's rule). Put back by
    # _restore_signals when run() returns (run() is also called in-process).
    if threading.current_thread() is not threading.main_thread():
        return
    _signalled.clear()
    for signum, default, kind in ((signal.SIGTERM, signal.SIG_DFL, Terminated),
                                  (signal.SIGINT, signal.default_int_handler, KeyboardInterrupt)):
        if signal.getsignal(signum) is default:
            _replaced[signum] = default
            signal.signal(signum, _raise(kind))


def _restore_signals() -> None:
    while _replaced:
        signum, handler = _replaced.popitem()
        signal.signal(signum, handler)


def _raise(kind: type[KeyboardInterrupt]):
    def handler(signum, frame) -> None:
        exc = kind()
        _signalled.append(exc)
        raise exc

    return handler


def _interrupted(exc: BaseException) -> int:
    """One line for Ctrl-C (exit 130) or SIGTERM (exit 143), from rank 0 only."""
    terminated = isinstance(exc, Terminated)
    if not procs.is_worker():  # rank 0 says it, once for the run
        common.error("terminated (SIGTERM)" if terminated else "interrupted")
    return 143 if terminated else 130


_STDOUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EPIPE}


def _stdout_lost(why: str) -> int:
    """One line for output that could not be written; stdout is pointed at
    /dev/null so the interpreter's last flush at exit cannot fail again."""
    common.error(f"cannot write to stdout: {why}")
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout has no file descriptor (captured in a test): nothing to flush at exit
    return 1


if __name__ == "__main__":
    run()
