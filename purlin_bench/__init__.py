"""purlin-bench: benchmark and autotune GPU scale-up collectives.

Three layers (see README.md and DESIGN): a collective is a naming of input and
output layouts (``purlin_bench.spec``); a strategy derives a SNAC program from it
(``purlin_bench.strategies`` -> ``purlin_bench.program``); an executor runs the
program on simulated ranks or GPUs (``purlin_bench.executors``).
"""

__version__ = "0.1.0"
