"""Hardware fingerprint: what a timing was measured on.

Plans are only as good as the machine they were tuned on, so every plan
artifact carries a :class:`Fingerprint`, and :func:`purlin_bench.load_plan`
compares its two slugs with the current machine's:

* ``gpu_type``: the GPU model as a short slug ("h200" from "NVIDIA H200",
  "rtx-4090" from "NVIDIA GeForce RTX 4090"), or "cpu" for the numpy reference;
* ``layout``: how the ranks sit on the hardware: "8vr" for 8 virtual ranks on
  one device (or 8 simulated ranks on the CPU), "nvlink-8" for one rank on each
  of 8 GPUs with peer access, "pcie-8" for 8 GPUs without it; with one process
  per rank "2proc-1gpu" (2 processes on one GPU), "8proc-8gpu", "3proc-cpu".

Each backend detects its own fingerprint (Backend.fingerprint); this module
holds what they share and imports no backend.
"""

from __future__ import annotations

import platform
import re
from dataclasses import asdict, dataclass, fields
from typing import Any


# Words in GPU marketing names that say nothing about the model.
_VENDOR_WORDS = {"nvidia", "geforce", "tesla", "quadro", "amd", "radeon", "instinct"}
# A model token such as h200, a100, b200, l40s, v100, mi300x.
_MODEL_TOKEN = re.compile(r"^[a-z]{1,3}\d{2,4}[a-z]?$")


@dataclass(frozen=True)
class Fingerprint:
    backend: str  # the backend's registry name
    gpu_type: str  # slug: h200, a100, cpu, ...
    layout: str  # slug: 8vr, nvlink-8, pcie-8
    ranks: int
    link: str  # how ranks are linked, in words
    device_name: str  # "NVIDIA H200", or the CPU model on numpy
    devices: tuple[int, ...] = ()  # CUDA device ordinals used (empty on numpy)
    compute_capability: str | None = None  # "9.0"
    sm_count: int | None = None
    memory_bytes: int | None = None
    driver_version: str | None = None  # CUDA driver API version, e.g. "13.0"
    cuda_runtime_version: str | None = None  # e.g. "13.0"
    cpu_model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["devices"] = list(self.devices)
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "Fingerprint":
        known = {f.name for f in fields(Fingerprint)}
        values = {k: v for k, v in data.items() if k in known}
        values["devices"] = tuple(values.get("devices", ()))
        return Fingerprint(**values)

    def describe(self) -> str:
        return f"{self.gpu_type} ({self.device_name}), {self.layout}"

    def differences(self, other: "Fingerprint") -> list[str]:
        """What makes a plan tuned on ``self`` unfit for ``other``: the GPU
        type and the rank layout (drivers and versions only inform)."""
        out = []
        if self.gpu_type != other.gpu_type:
            out.append(f"GPU type {self.gpu_type} ({self.device_name}) vs {other.gpu_type} ({other.device_name})")
        if self.layout != other.layout:
            out.append(f"rank layout {self.layout} vs {other.layout}")
        return out


def gpu_type_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200'; 'NVIDIA A100-SXM4-80GB' -> 'a100';
    'NVIDIA GeForce RTX 4090' -> 'rtx-4090'."""
    tokens = [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t and t not in _VENDOR_WORDS]
    if not tokens:
        return "unknown-gpu"
    if _MODEL_TOKEN.match(tokens[0]):
        return tokens[0]
    # No model token first (RTX 4090, RTX A6000): keep the first two words.
    return "-".join(tokens[:2])


def layout_slug(ranks: int, gpus: int, peer_access: bool) -> str:
    if gpus <= 1:
        return f"{ranks}vr"
    return f"{'nvlink' if peer_access else 'pcie'}-{gpus}"


def procs_layout_slug(procs: int, gpus: int | None) -> str:
    """One process per rank: N processes on M GPUs (None: on the CPU). A plan
    for 2 processes time-sliced on one GPU says nothing of 2 on 2 GPUs."""
    return f"{procs}proc-{'cpu' if gpus is None else f'{gpus}gpu'}"


def is_procs_layout(layout: str) -> bool:
    """Whether ``layout`` (a slug) is one of procs_layout_slug's."""
    return re.fullmatch(r"[0-9]+proc-([0-9]+gpu|cpu)", layout) is not None


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
