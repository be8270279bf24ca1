"""One nvcc build with ptxas's report, for the tests that hold CUDA code to
no warnings and no register spills (the Atom interpreter, the compiled
datapath's generated sources)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path


def assert_builds_without_spills(source: Path, options: list[str], arch: str, where: str, out: Path) -> None:
    """nvcc -Werror builds ``source`` for ``arch``; ptxas reports no spill."""
    cmd = [
        shutil.which("nvcc"),
        f"-arch={arch}",
        "-c",
        "-Xptxas",
        "-v",
        "-Werror",
        "all-warnings",
        *options,
        "-o",
        str(out),
        str(source),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    log = done.stdout + done.stderr
    print(
        f"[{arch} {where}]",
        " | ".join(line.strip() for line in log.splitlines() if "registers" in line or "spill" in line),
    )
    assert done.returncode == 0, f"nvcc failed for {arch} {where}:\n{log[-3000:]}"
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    assert spills and max(spills) == 0, f"register spills for {arch} {where}:\n{log[-2000:]}"


def ptx_of(source: Path, options: list[str], arch: str, out: Path) -> str:
    """The PTX nvcc emits for ``source`` (what a test reads instruction by instruction)."""
    done = subprocess.run(
        [shutil.which("nvcc"), f"-arch={arch}", "-ptx", *options, "-o", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out.read_text()
