"""A step's list of flags (atoms/flags.cu: purlin_release, purlin_wait) runs
as one warp instruction over per-thread addresses, not one branch a thread.
With a branch a thread a warp took them in turn: a release of 7 flags was 7
system fences in a row and a wait on 7 flags 7 polls one after another, at 8
processes under MPS most of a flag hop (issue 30, session 18). Read from the
PTX nvcc emits for a generated kernel."""

from __future__ import annotations

import re

import pytest

from purlin_bench.backends.cupy.codegen.atoms import compile_options, source_text
from purlin_bench.backends.cupy.codegen.compiled import BaseLayout, generate
from purlin_bench.backends.cupy.codegen.lower import flag_id, lower
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.strategies.derive import derive_program
from tests.kernels.released import released
from tests.nvcc_build import ptx_of

pytestmark = pytest.mark.nvcc


@pytest.mark.parametrize(("collective", "strategy"), [("reduce-scatter", "direct"), ("all-reduce", "push-parity")])
def test_a_list_of_flags_is_one_release_and_one_poll_loop(collective, strategy, tmp_path):
    # One rank's launch at 8 ranks (a process's kernel): its waits and releases name 7 peers each.
    inst = instantiate(load_builtin(collective), 8, 4096, 4)
    program = derive_program(inst, strategy, "float32", "sum")
    low = lower(program, [0], False, "sm", flag_id)
    source = generate(low, 8, 1, source_text(), BaseLayout.of(program, 4))
    body = source.split('extern "C"', 1)[1]  # the generated kernel, past the primitives
    releases = [released(line) for line in body.splitlines() if released(line)]
    waits = re.findall(r"purlin_wait<(\d+)>\(w,", body)
    assert max(len(r) for r in releases) == 7 and max(int(n) for n in waits) == 7
    path = tmp_path / "kernel.cu"
    path.write_text(source)
    options = list(compile_options("float32", "sum", 2, 128, True, False))
    ptx = ptx_of(path, options, "sm_90", tmp_path / "kernel.ptx")
    # One bump instruction a release, whatever its flags; a poll loop a wait (peeled once: 2 loads).
    assert ptx.count("red.release.sys") == len(releases)
    assert ptx.count("ld.acquire.sys") <= 2 * len(waits)
    # The lists stay in registers (an index by thread would put them in local memory).
    assert "st.local" not in ptx and "ld.local" not in ptx


def test_each_thread_bumps_and_polls_its_own_flag_and_a_timeout_names_it(tmp_path):
    """The helpers run on the host one thread at a time (tests/kernels/host/
    flags_harness.cpp): a thread of the list bumps and polls its own flag and
    no other, after its release fence; a thread past it none; a timed-out
    wait reports its flag's id, and a wait whose call already aborted leaves
    at its first check with its report untouched; lists of 1, 2, 7, 31 and 32
    flags."""
    import shutil
    import subprocess
    from pathlib import Path

    from purlin_bench.base.resources import data_dir

    harness = Path(__file__).parent / "host" / "flags_harness.cpp"
    binary = tmp_path / "flags_harness"
    flags = data_dir("atoms") / "flags.cu"
    build = [shutil.which("nvcc"), "-x", "c++", "-std=c++17", f'-DFLAGS_CU="{flags}"', "-o", str(binary), str(harness)]
    built = subprocess.run(build, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-2000:]
    ran = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and ran.stdout.strip() == "0 failures", ran.stdout[-2000:]
