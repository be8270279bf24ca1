"""The GPU datapath's untuned defaults as data: each rule a measured
decision, cited by its id in docs/decisions.md (rule, number, date, evidence).

CupyBackend.default_config reads them; a re-measurement changes a number
here and its decision entry, never the code that applies it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DatapathDefaults:
    # D5: push copies whose every flow is at least this large run on the copy
    # engines (H200: 0.8-1.0x SM unroll 4 at 2 MiB flows, 1.1-1.2x at 8 MiB,
    # 99-102% of the floor from 32 MiB against SM unroll 4's 96%).
    ce_min_flow_bytes: int = 4 << 20
    # D12: the compiled datapath up to this many bytes in any rank's buffer
    # (1.5-2.2x the interpreter at 8 B-32 KiB, 1.50x down to 1.01x from
    # 256 KiB to 64 MiB; at 256 MiB and 1 GiB the two tie, so the interpreter
    # keeps those and no program is built for them: about a second of NVRTC
    # each on a machine's first use) ...
    compiled_max_bytes: int = 64 << 20
    # ... and up to this many ranks, where it was measured: nvcc's sample of
    # its builds covers 8, and at 12-16 ranks the 16-bit reductions spill.
    compiled_max_ranks: int = 8
    # D13: compiled kernels take 128 threads a block up to this many bytes
    # (64 KiB all-reduce 2.70 -> 1.86 us; within 3% of 512 at 8 B-4 KiB;
    # reductions 4-7% slower at 128 by 1 MiB), 512 above.
    compiled_small_bytes: int = 64 << 10
    compiled_small_threads: int = 128
    # D4: copies keep 4 vectors in flight a thread (single-consumer copies at
    # 256 MiB from 84% to 93-96% of the floor); reductions keep the
    # datapath's 2, which is 0.5 us faster at small sizes.
    copy_unroll: int = 4


DEFAULTS = DatapathDefaults()
