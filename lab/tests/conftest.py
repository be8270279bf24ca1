"""The lab's tests run apart from the product's (``python -m pytest lab/tests``
from the repository root): lab/scripts/ and the root go on sys.path, so a
test imports a script by its module name and the product tests' nvcc helper
as ``tests.nvcc_build``. Tests marked ``nvcc`` or ``gpu`` skip where those
are missing, as in tests/conftest.py."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parent.parent
for path in (LAB.parent, LAB / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("nvcc") is not None and not shutil.which("nvcc"):
            item.add_marker(pytest.mark.skip(reason="needs nvcc on PATH"))
        if item.get_closest_marker("gpu") is not None:
            from purlin_bench.backends import backend_class

            why = backend_class("cupy").available()
            if why is not None:
                item.add_marker(pytest.mark.skip(reason=f"needs a GPU: {why}"))
