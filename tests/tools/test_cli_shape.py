"""The CLI reads like one tool: -h everywhere, one meaning per short option,
and a `purlin --help` that starts without the heavy imports."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import time

import pytest

import purlin_bench.cli as cli_package
from purlin_bench.cli.main import COMMANDS, load_command, run


def test_commands_table_names_every_command_module():
    modules = {
        m.name.removeprefix("cmd_") for m in pkgutil.iter_modules(cli_package.__path__) if m.name.startswith("cmd_")
    }
    assert set(COMMANDS) == modules


@pytest.mark.parametrize("name", list(COMMANDS))
def test_dash_h_is_help_in_every_command(capsys, name):
    assert run([name, "-h"]) == 0
    assert f"Usage: purlin {name}" in capsys.readouterr().out


def test_dash_h_is_help_at_the_top(capsys):
    assert run(["-h"]) == 0
    out = capsys.readouterr().out
    assert "Usage: purlin" in out and all(name in out for name in COMMANDS)


def test_a_short_option_means_one_thing_in_every_command():
    meaning: dict[str, tuple[set[str], str]] = {}  # -x -> (its long names, the first command seen)
    for name in COMMANDS:
        for param in load_command(name).params:
            opts = list(getattr(param, "opts", ())) + list(getattr(param, "secondary_opts", ()))
            shorts = [o for o in opts if len(o) == 2 and o.startswith("-")]
            longs = {o for o in opts if o.startswith("--")}
            for short in shorts:
                first = meaning.setdefault(short, (longs, name))
                # the same letter shares a long name (bench's -d is --datatype and --dtype)
                assert first[0] & longs, f"{short} is {sorted(first[0])} in {first[1]} but {sorted(longs)} in {name}"


def test_help_starts_without_numpy_or_the_backends():
    code = (
        "import sys; from purlin_bench.cli.main import run; run(['--help']);"
        " print(sorted(m for m in ('numpy', 'ml_dtypes', 'rich', 'purlin_bench.backends') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "[]"


def test_help_starts_fast():
    # 0.3 s measured on a 2-core machine (was 2-3 s with every command
    # imported); the bound is generous for a slow CI runner.
    def once() -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "purlin_bench.cli.main", "--help"], capture_output=True, check=True)
        return time.perf_counter() - start

    assert min(once() for _ in range(3)) < 1.5
