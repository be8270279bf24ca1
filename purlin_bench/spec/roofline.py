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


def read_seconds_per_byte(copy_rate: float, write_rate: float) -> float:
    """What reading a byte takes when a copy moves ``copy_rate`` bytes a
    second (read plus written) and writes alone run at ``write_rate``:
    2/copy = read + 1/write, and never below 0."""
    return max(0.0, 2 / copy_rate - 1 / write_rate)


def fanout_share(copy_rate: float, write_rate: float, consumers: int) -> float:
    """The share of the copy floor a 1-to-``consumers`` fan-out can reach
    when device memory writes alone run at ``write_rate`` (bytes/s) and a
    copy at ``copy_rate`` (bytes read plus written a second): reads then run
    at r with 2/copy = 1/r + 1/write, and the fan-out of S bytes takes at
    least S/r + consumers*S/write against the floor's (1 + consumers)*S/copy.
    A copy (one consumer) is at its floor by definition; writes faster
    than a copy's mix give more than 1, and below half its rate the reads
    would have to be free (their time is taken as 0)."""
    if copy_rate <= 0 or write_rate <= 0 or consumers < 1:
        raise ValueError("rates must be positive and consumers at least 1")
    return (1 + consumers) / copy_rate / (read_seconds_per_byte(copy_rate, write_rate) + consumers / write_rate)
