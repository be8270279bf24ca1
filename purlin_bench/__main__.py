"""``python -m purlin_bench``: the ``purlin`` command (what --procs and torchrun start)."""

from purlin_bench.cli.main import run

if __name__ == "__main__":
    run()
