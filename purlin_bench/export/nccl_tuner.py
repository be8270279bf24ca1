"""NCCL's example tuner plugin CSV (ext-tuner/example in the NCCL sources):

    collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff

Only plans whose entries are NCCL configurations (strategy "nccl" with
``algorithm``, ``protocol`` and optionally ``channels``) can be expressed:
NCCL picks among its own algorithms and protocols, and has no way to run our
SNAC strategies or datapath. Every other plan is refused, with the reason.
"""

from __future__ import annotations

from purlin_bench.export import ExportError
from purlin_bench.tune.artifact import PlanArtifact

HEADER = "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff"
NCCL_STRATEGY = "nccl"
# Our collective names -> NCCL's tuner names (NCCL's tuner has no others).
COLLECTIVES = {"all-reduce": "allreduce", "all-gather": "allgather", "reduce-scatter": "reducescatter", "broadcast": "broadcast", "reduce": "reduce"}
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
# The tuner parses max_bytes with strtoull into a size_t: the largest value is "no bound".
UNBOUNDED = 2**64 - 1


def render(plan: PlanArtifact, source: str) -> str:
    cant = f"cannot export {source} as nccl-tuner"
    ours = sorted({e.config.strategy for e in plan.entries if e.config.strategy != NCCL_STRATEGY})
    if ours:
        raise ExportError(f"{cant}: its entries use purlin strategies ({', '.join(ours)}) on purlin's own datapath, which NCCL cannot express; only plans tuned over NCCL's algorithm/protocol/channels (strategy 'nccl') export to this format")
    if plan.collective not in COLLECTIVES:
        raise ExportError(f"{cant}: NCCL's tuner has no rules for {plan.collective} (it tunes {', '.join(COLLECTIVES)})")
    lines = [
        f"# NCCL tuner rules from purlin-bench plan {source}: {plan.collective} {plan.dtype}, {plan.ranks} ranks on {plan.fingerprint.gpu_type} ({plan.fingerprint.layout})",
        f"# {HEADER}",
    ]
    for e in plan.entries:
        params = {**dict(e.config.plan_params), **dict(e.config.exec_params)}
        algorithm = str(params.get("algorithm", "")).lower()
        protocol = str(params.get("protocol", "")).lower()
        if algorithm not in ALGORITHMS:
            raise ExportError(f"{cant}: bucket {e.min_bytes}: algorithm {params.get('algorithm')!r} is not one of NCCL's ({', '.join(ALGORITHMS)})")
        if protocol not in PROTOCOLS:
            raise ExportError(f"{cant}: bucket {e.min_bytes}: protocol {params.get('protocol')!r} is not one of NCCL's ({', '.join(PROTOCOLS)})")
        channels = params.get("channels", -1)
        if isinstance(channels, bool) or not isinstance(channels, int) or channels < -1 or channels == 0:
            raise ExportError(f"{cant}: bucket {e.min_bytes}: channels must be a positive whole number (or -1 for NCCL's default), got {channels!r}")
        upper = UNBOUNDED if e.max_bytes is None else e.max_bytes
        # One node (scale-up), this plan's rank count; any numPipeOps, any regBuff.
        lines.append(f"{COLLECTIVES[plan.collective]},{e.min_bytes},{upper},{algorithm},{protocol},{channels},1,{plan.ranks},-1,-1")
    return "\n".join(lines) + "\n"
