"""purlin-bench: benchmark and autotune GPU scale-up collectives.

Three layers (see README.md and docs/concepts.md): a collective is a naming of input and
output layouts (``purlin_bench.spec``); a strategy derives a SNAC program from it
(``purlin_bench.strategies`` -> ``purlin_bench.program``); an executor runs the
program on simulated ranks or GPUs (``purlin_bench.backends``).
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `purlin_bench.load_plan` without importing the strategies and NumPy on every
    # `import purlin_bench` (the CLI imports the package first thing).
    if name == "load_plan":
        from purlin_bench.plans.load import load_plan

        return load_plan
    raise AttributeError(f"module 'purlin_bench' has no attribute '{name}'")


__all__ = ["__version__", "load_plan"]
