"""Entry point of the ``purlin`` command.

Every command lives in its own ``cmd_<name>.py`` module with a
``register(app)`` function and an ``ORDER`` number (its place in --help).
Errors a user can cause (:class:`~purlin_bench.errors.PurlinError`, bad
options) print one line on stderr and exit non-zero; a traceback means a bug.
"""

from __future__ import annotations

import errno
import importlib
import os
import pkgutil
import sys

import typer

try:  # typer >= 0.22 carries its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # older typer depends on click itself
    from click import exceptions as click_exceptions

import purlin_bench
from purlin_bench.cli import common
from purlin_bench.errors import PurlinError

app = typer.Typer(
    name="purlin",
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
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Benchmark and autotune GPU scale-up collectives."""


def _register_commands() -> None:
    import purlin_bench.cli as package

    modules = [importlib.import_module(f"purlin_bench.cli.{m.name}") for m in pkgutil.iter_modules(package.__path__) if m.name.startswith("cmd_")]
    for module in sorted(modules, key=lambda m: getattr(m, "ORDER", 100)):
        module.register(app)


_register_commands()


def run(argv: list[str] | None = None) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the exit code."""
    common.invocation[:] = list(sys.argv[1:] if argv is None else argv)
    try:
        result = app(args=argv, prog_name="purlin", standalone_mode=False)
        code = result if isinstance(result, int) else 0
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
    except KeyboardInterrupt:
        common.error("interrupted")
        code = 130
    if argv is None:
        sys.exit(code)
    return code


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
