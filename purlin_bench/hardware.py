"""Hardware fingerprint: what a timing was measured on.

Plans are only as good as the machine they were tuned on, so every plan
artifact carries a :class:`Fingerprint`, and :func:`purlin_bench.load_plan`
compares its two slugs with the current machine's:

* ``gpu_type``: the GPU model as a short slug ("h200" from "NVIDIA H200",
  "rtx-4090" from "NVIDIA GeForce RTX 4090"), or "cpu" for the numpy reference;
* ``layout``: how the ranks sit on the hardware: "8vr" for 8 virtual ranks on
  one device (or 8 simulated ranks on the CPU), "nvlink-8" for one rank on each
  of 8 GPUs with peer access, "pcie-8" for 8 GPUs without it.

CuPy is imported only inside :func:`detect` for the cupy backend, never at
module import: most machines that read plans have no GPU.
"""

from __future__ import annotations

import platform
import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Sequence

from purlin_bench.errors import PurlinError

# Words in GPU marketing names that say nothing about the model.
_VENDOR_WORDS = {"nvidia", "geforce", "tesla", "quadro", "amd", "radeon", "instinct"}
# A model token such as h200, a100, b200, l40s, v100, mi300x.
_MODEL_TOKEN = re.compile(r"^[a-z]{1,3}\d{2,4}[a-z]?$")


@dataclass(frozen=True)
class Fingerprint:
    backend: str  # numpy | cupy
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


def one_gpu(gpus: Sequence[int] | None) -> bool:
    """Every rank on one GPU (virtual ranks, or ``--gpus`` naming one device):
    the layout one fused launch runs, and the one the copy-engine datapath needs."""
    return not gpus or len(set(gpus)) <= 1


def layout_slug(ranks: int, gpus: int, peer_access: bool) -> str:
    if gpus <= 1:
        return f"{ranks}vr"
    return f"{'nvlink' if peer_access else 'pcie'}-{gpus}"


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


def _cuda_version(value: int) -> str:
    """CUDA encodes versions as 1000 * major + 10 * minor (13000 -> '13.0')."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def _text(value: Any) -> str:
    return value.decode(errors="replace").rstrip("\0") if isinstance(value, (bytes, bytearray)) else str(value)


def detect(backend: str, ranks: int, gpus: tuple[int, ...] | None = None) -> Fingerprint:
    """The fingerprint of this machine for ``backend`` with ``ranks`` ranks
    (virtual ranks on one device), or one rank on each of ``gpus``."""
    if backend == "numpy":
        model = cpu_model()
        return Fingerprint(
            backend="numpy",
            gpu_type="cpu",
            layout=layout_slug(ranks, 1, False),
            ranks=ranks,
            link=f"{ranks} simulated ranks on the CPU (numpy reference)",
            device_name=model,
            cpu_model=model,
        )
    if backend != "cupy":
        raise PurlinError(f"unknown backend '{backend}' (known: numpy, cupy)")
    return _detect_cupy(ranks, tuple(gpus) if gpus else None)


def _detect_cupy(ranks: int, gpus: tuple[int, ...] | None) -> Fingerprint:
    try:
        import cupy  # imported here: machines without a GPU never need it
    except ImportError:
        raise PurlinError("the cupy backend needs CuPy (pip install 'purlin-bench[cuda13]')") from None
    runtime = cupy.cuda.runtime
    devices = gpus or (0,)
    try:
        props = runtime.getDeviceProperties(devices[0])
        driver = _cuda_version(int(runtime.driverGetVersion()))
        runtime_version = _cuda_version(int(runtime.runtimeGetVersion()))
        peer = all(runtime.deviceCanAccessPeer(a, b) for a in devices for b in devices if a != b)
    except Exception as exc:  # CuPy raises its own CUDARuntimeError types
        raise PurlinError(f"cannot read the GPU's properties ({type(exc).__name__}: {exc})") from None
    name = _text(props.get("name", "unknown GPU"))
    ranks = len(devices) if gpus else ranks
    if gpus and len(gpus) > 1:
        link = f"one rank per GPU on {len(gpus)} GPUs ({'peer access' if peer else 'no peer access'})"
    else:
        link = f"{ranks} virtual ranks on GPU {devices[0]}"
    return Fingerprint(
        backend="cupy",
        gpu_type=gpu_type_slug(name),
        layout=layout_slug(ranks, len(gpus) if gpus else 1, peer),
        ranks=ranks,
        link=link,
        device_name=name,
        devices=tuple(devices),
        compute_capability=f"{props.get('major')}.{props.get('minor')}",
        sm_count=int(props["multiProcessorCount"]) if "multiProcessorCount" in props else None,
        memory_bytes=int(props["totalGlobalMem"]) if "totalGlobalMem" in props else None,
        driver_version=driver,
        cuda_runtime_version=runtime_version,
        cpu_model=cpu_model(),
    )
