"""The floor under a collective: the fewest bytes it must move over the
copy bandwidth measured in the same run.

On one GPU (virtual ranks) every byte crosses device memory: each input
element that feeds an output must be read once and each output element written
once; the bandwidth is a large cudaMemcpyAsync, counting bytes read plus
written. Across GPUs the limit is the links: nccl-tests' bus bandwidth is
defined so that it compares with a link, so the floor there is the time at
which busbw equals the measured peer copy bandwidth."""

from __future__ import annotations

from dataclasses import dataclass

from purlin_bench.spec.instance import Instance


def min_bytes(inst: Instance) -> int:
    """Input bytes that feed some output, read once, plus every output byte."""
    read = sum(s.count for flow in inst.flows for s in flow.sources)
    written = sum(inst.out_counts)
    return (read + written) * inst.itemsize


@dataclass(frozen=True)
class Bandwidth:
    bytes_per_s: float  # local: read + written; peer: bytes delivered to the peer
    kind: str  # "local" or "peer"

    def floor_us(self, inst: Instance, size_bytes: int) -> float:
        if self.kind == "local":
            return min_bytes(inst) / self.bytes_per_s * 1e6
        return size_bytes * inst.busbw_factor() / self.bytes_per_s * 1e6
