"""The datapath's settings for one backend instance (KernelSettings)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from purlin_bench.base.errors import PurlinError


@dataclass(frozen=True)
class KernelSettings:
    """Datapath settings scoped to one backend instance: the measured
    defaults users run, and the test mode's jitter. Each default was measured
    once and settled (docs/decisions.md); switches measured and rejected
    (load and store hints, a software pipeline, 1024-thread copy builds,
    pruned parameters) were deleted with their kernel branches."""

    # Auto block count: one block per this many bytes a step moves (read plus
    # written), so that small steps stay on few SMs and large ones fill the GPU.
    # On the H200 256 KiB left 1 MiB collectives latency-bound (all-to-all 48 us);
    # 8 KiB (about one pass of a 512-thread block) gave 15 us, with no change at
    # 4-64 KiB (docs/decisions.md).
    auto_block_bytes: int = 8 * 1024
    # Programs that never reduce run a build without the reduce code.
    copy_only_build: bool = True
    # A requested block count is a ceiling at what the data can use.
    cap_blocks: bool = True
    # Test mode: every block sleeps up to this many ns at random points of
    # every step (atoms/snac.cu, jitter()), keyed by ``jitter_seed``, so a race
    # between blocks or ranks shows on a quiet GPU. 0: off (the default
    # build has no such code). From PURLIN_JITTER / PURLIN_JITTER_SEED.
    jitter_ns: int = 0
    jitter_seed: int = 1

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> "KernelSettings":
        """The defaults, with the jitter PURLIN_JITTER (ns, 0-1000000) and
        PURLIN_JITTER_SEED (an integer) ask for; a bad value is one line."""
        env = os.environ if environ is None else environ
        ns = _int_env(env, "PURLIN_JITTER", 0, 1_000_000)
        seed = _int_env(env, "PURLIN_JITTER_SEED", 0, 2**31 - 1, default=1)
        return cls(jitter_ns=ns, jitter_seed=seed)

    def defines(self, copy_only: bool = False, threads: int = 512) -> tuple[str, ...]:
        """The nvrtc options these settings add to a variant's build."""
        if not self.jitter_ns:
            return ()
        return (f"-DPURLIN_JITTER_NS={self.jitter_ns}", f"-DPURLIN_JITTER_SEED={self.jitter_seed}")


def _int_env(env: Mapping[str, str], name: str, lo: int, hi: int, default: int = 0) -> int:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = lo - 1
    if not lo <= value <= hi:
        raise PurlinError(f"{name} must be an integer from {lo} to {hi}, got {text!r}")
    return value
