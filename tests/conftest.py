"""Tests by what they need, one folder each: unit/ (no backend), conformance/
(the port's contract over every registered backend), reference/ (the CPU
reference's results), tools/ (the commands through the numpy backend and the
fake device), procs/ (one process per rank), gpu/ (a CUDA GPU), kernels/ (the
device sources, compiled by nvcc where it is). Helpers sit here, beside this file.

Markers that need hardware or services skip cleanly where those are missing:

* ``gpu``: a usable CUDA GPU and CuPy (the cupy backend's ``available``);
* ``nvcc``: the CUDA compiler on PATH;
* ``postgres``: a server at ``PURLIN_TEST_POSTGRES_URL``. Where
  ``PURLIN_REQUIRE_POSTGRES=1`` (set by .ci/start-postgres.sh) a missing
  server fails those tests instead, so CI cannot pass by skipping them.

Hypothesis runs without a deadline (a 2-core CI box is slow and noisy) and
without its example database (no .hypothesis/ folder left in the checkout).
"""

from __future__ import annotations

import os
import shutil
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("purlin", deadline=None, database=None)
settings.load_profile("purlin")


@lru_cache(maxsize=1)
def _gpu() -> tuple[bool, str]:
    # Imported lazily and asked once: probing CUDA costs time on every call.
    from purlin_bench.backends import backend_class

    why = backend_class("cupy").available()
    return why is None, why or ""


def _missing(marker: str) -> str | None:
    """Why tests with ``marker`` cannot run here, or None if they can."""
    if marker == "gpu":
        ok, why = _gpu()
        return None if ok else f"needs a GPU: {why}"
    if marker == "nvcc":
        return None if shutil.which("nvcc") else "needs nvcc on PATH"
    if marker == "postgres":
        url = os.environ.get("PURLIN_TEST_POSTGRES_URL")
        return None if url else "needs PURLIN_TEST_POSTGRES_URL (a PostgreSQL server)"
    return None


def _require_postgres() -> bool:
    return os.environ.get("PURLIN_REQUIRE_POSTGRES") == "1"


TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        # Tests live by what they need (unit, conformance, reference, tools,
        # procs, gpu, kernels): everything under gpu/ needs a GPU, marked or not.
        if Path(item.path).resolve().is_relative_to(TESTS / "gpu") and item.get_closest_marker("gpu") is None:
            item.add_marker(pytest.mark.gpu)
        for marker in ("gpu", "nvcc", "postgres"):
            if item.get_closest_marker(marker) is None or (marker == "postgres" and _require_postgres()):
                continue
            why = _missing(marker)
            if why is not None:
                item.add_marker(pytest.mark.skip(reason=why))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("postgres") is not None and _require_postgres():
        why = _missing("postgres")
        if why is not None:
            pytest.fail(f"PURLIN_REQUIRE_POSTGRES=1 but this test {why}: the PostgreSQL server did not start")
