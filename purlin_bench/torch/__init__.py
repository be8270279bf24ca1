"""purlin's collectives in a torch.distributed job: a Communicator, one process per rank.

In a serving stack's tensor-parallel group, CUDA IPC between the processes.

    comm = Communicator(tp_group)              # collective: every rank of the group
    if comm.should_use(x):
        y = comm.all_reduce(x)                 # on torch's current stream
    else:
        torch.distributed.all_reduce(x, group=tp_group)

Every call is asynchronous on ``torch.cuda.current_stream()`` and can be
captured in a CUDA graph: copy ``x`` into this rank's shared input buffer,
launch the prepared program, copy this rank's output buffer into ``out``.
Tensors that are those buffers (``comm.buffers``) are not copied: a call with
them is one kernel launch.

    x, y = comm.buffers("all-reduce", t * h, torch.bfloat16)   # once, eagerly, every rank
    torch.matmul(a, w, out=x.view(t, h))                        # the layer writes x in place
    comm.all_reduce(x, out=y)                                   # no copy in or out

They are this communicator's shared buffers, which every call of any
collective goes through: read ``y`` before the next call, and expect ``x``
overwritten by a call not given it.

The first call of each (collective, size, dtype, op, root) prepares it and is
collective (every rank, same order, like torch.distributed itself), so it
must happen once eagerly, before any graph capture that uses it.

Torch is imported when a Communicator is made, not with this module.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from purlin_bench.base.errors import ExecutionError, PurlinError, WatchdogTimeout
from purlin_bench.spec.loader import resolve

__all__ = ["Communicator"]

DTYPES = ("float32", "float16", "bfloat16", "int32")
REDOPS = ("sum", "prod", "max", "min")
_ALIGN = 16


def _torch():
    try:
        import torch
        import torch.distributed as tdist
    except ImportError as exc:
        raise PurlinError(f"purlin_bench.torch needs torch (in a checkout: pip install -e '.[torch]'): {exc}") from None
    return torch, tdist


class _Prepared:
    """One prepared collective: its runner (a StreamRunner of the port) and
    what a call of this rank checks before enqueueing it."""

    def __init__(self, inst, runner, rank: int):
        self.inst, self.runner, self.rank = inst, runner, rank
        self.out_count = inst.out_counts[rank]
        # A variable collective's counts a call takes (one per chunk name).
        self.ncounts = len(inst.count_keys)


class _DeviceBytes:
    """Bytes of device memory another object owns, as the CUDA array
    interface describes them (version 2: no stream, so torch adds no sync)."""

    def __init__(self, ptr: int, nbytes: int, owner: Any):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 2}


class Communicator:
    """purlin's eight collectives over the ranks of a torch ProcessGroup
    (default: the default group), each rank a process on a GPU of one host."""

    def __init__(
        self,
        group: Any = None,
        max_bytes: int = 8 << 20,
        plan_dir: Any = None,
        timeout_s: float = 20.0,
        debug: bool = False,
    ):
        torch, tdist = _torch()
        if not tdist.is_available() or not tdist.is_initialized():
            raise PurlinError(
                "Communicator needs torch.distributed initialized first (torch.distributed.init_process_group)"
            )
        if not torch.cuda.is_available():
            raise PurlinError("Communicator needs a CUDA GPU visible to torch")
        from purlin_bench.backends.procs import Procs
        from purlin_bench.torch._setup import Configs, gpu_backend, join_group

        self._torch, self._tdist = torch, tdist
        self.pg, self.max_bytes, self.timeout_s, self.debug = group, int(max_bytes), float(timeout_s), debug
        self.rank, self.size = tdist.get_rank(group), tdist.get_world_size(group)
        self.device = torch.cuda.current_device()
        self._prepared: dict[tuple, _Prepared] = {}  # (collective, count, dtype, redop, root) -> runner
        self._idents: dict[tuple, tuple] = {}  # (collective, x and out sizes, dtype, op, root) -> that key
        self._specs: dict[str, Any] = {}
        self._closed = False
        self._failure: str | None = None  # set once a call failed: every later call raises it
        self._dtype_names = {getattr(torch, name): name for name in DTYPES}
        # The current stream's raw handle without a Stream object a call (as
        # Triton's launcher asks it); torch's public call where that is absent.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._current_stream = raw or (lambda device: torch.cuda.current_stream(device).cuda_stream)
        cls = gpu_backend()  # before any rank waits on another: every rank fails alike here
        self.group, self._server = join_group(tdist, group, self.rank, self.size, self.timeout_s)
        try:
            procs = Procs(
                self.group,
                self.rank,
                self.size,
                self.device,
                Path(tempfile.gettempdir()),
                "torch",
                watchdog_s=self.timeout_s,
            )
            self.backend = cls(self.size, None, 0, procs=procs)
            with self.backend.guard():
                # Collective: the backend's world exchanges every rank's device.
                self.layout = self.backend.fingerprint().layout
                self._configs = Configs(self.backend, self.size, plan_dir) if self.rank == 0 else None
        except BaseException:
            self.close()
            raise

    # -- lifetime --------------------------------------------------------------
    def close(self) -> None:
        """Let go of every runner, the group and (rank 0) its store; idempotent."""
        if self._closed:
            return
        self._closed = True
        prepared, self._prepared = self._prepared, {}
        try:
            for p in prepared.values():
                try:
                    p.runner.close()
                except Exception:  # a failed device: closing must not raise
                    pass
        finally:
            group = getattr(self, "group", None)
            if group is not None:
                group.close()  # closes the store server it owns (rank 0)

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check(self) -> None:
        """Wait for torch's current stream, then raise WatchdogTimeout if any
        call of any prepared collective timed out or was aborted (a peer
        that never came). Syncs: call it outside hot paths; every call
        checks the same without a sync, for the calls enqueued before it."""
        if self._torch.cuda.is_current_stream_capturing():
            raise PurlinError("Communicator.check synchronizes: not during CUDA graph capture")
        self._torch.cuda.current_stream(self.device).synchronize()
        self._raise_if_failed(scan=True)

    def _raise_if_failed(self, scan: bool = False) -> None:
        """Raise the first failure a call of this communicator recorded; once
        one did, this communicator is spent (its peers' flags are in an
        unknown state), as a torch NCCL communicator is after a watchdog
        abort. The process's summary word says when to look (one memory
        read a call); ``scan`` looks at every runner's words regardless."""
        if self._failure is None and (scan or self.backend.faulted()):
            # A count out of range first: that call ran clamped with sound
            # flags, so it is raised (CountsError) and the communicator goes on.
            for p in self._prepared.values():
                if p.ncounts:
                    p.runner.raise_counts_error()
            # Only this communicator's own runners latch it: another
            # communicator's failure in this process is that one's to raise.
            self._failure = next((f for f in (p.runner.failure() for p in self._prepared.values()) if f), None)
        if self._failure is not None:
            raise WatchdogTimeout(
                f"rank {self.rank}: an earlier call failed ({self._failure}); its outputs are not data, and this"
                " communicator cannot run more calls: make a new one"
            )

    # -- dispatch --------------------------------------------------------------
    def should_use(self, tensor: Any, collective: str = "all-reduce") -> bool:
        """Whether this communicator takes ``tensor`` for ``collective``: a
        contiguous CUDA tensor on this device, of a supported dtype, 16-byte
        aligned, at most ``max_bytes``, whose size fits the collective on
        this many ranks. Never raises."""
        try:
            if self._closed or not self._torch.is_tensor(tensor) or not tensor.is_cuda:
                return False
            if tensor.get_device() != self.device or tensor.dtype not in self._dtype_names:
                return False
            if not tensor.is_contiguous() or tensor.data_ptr() % _ALIGN or tensor.numel() == 0:
                return False
            if tensor.numel() * tensor.element_size() > self.max_bytes:
                return False
            from purlin_bench.torch._setup import count_for

            count_for(self._spec(collective), self.size, self.rank, 0, tensor.element_size(), tensor.numel(), None)
            return True
        except Exception:
            return False

    # -- the collectives ---------------------------------------------------------
    def all_reduce(self, x, out=None, op: str = "sum"):
        return self._call("all-reduce", x, out, 0, op)

    def all_gather(self, x, out=None):
        return self._call("all-gather", x, out, 0, None)

    def reduce_scatter(self, x, out=None, op: str = "sum"):
        return self._call("reduce-scatter", x, out, 0, op)

    def all_to_all(self, x, out=None):
        return self._call("all-to-all", x, out, 0, None)

    def broadcast(self, x, out=None, root: int = 0):
        """``x`` is read on ``root`` only; elsewhere it gives the size (the root's)."""
        return self._call("broadcast", x, out, root, None)

    def reduce(self, x, out=None, root: int = 0, op: str = "sum"):
        """The output is empty on every rank but ``root``."""
        return self._call("reduce", x, out, root, op)

    def gather(self, x, out=None, root: int = 0):
        """The output is empty on every rank but ``root``."""
        return self._call("gather", x, out, root, None)

    def scatter(self, x, out=None, root: int = 0):
        """``x`` (the root's R chunks) is read on ``root`` only; elsewhere it gives the size."""
        return self._call("scatter", x, out, root, None)

    # Sizes per call (issue 31). ``x`` and ``out`` are buffers at a capacity
    # (every chunk's most elements: a serving stack's largest batch), and a
    # call fills their front, each chunk packed after the one before (as
    # torch's split sizes lay them out); what lies past it is not the call's.
    # ``counts`` is an int64 CUDA tensor, the same on every rank (the whole
    # call's, as after an all-gather of the routing counts), read by the
    # kernel itself: counts computed on the GPU need no sync, and a captured
    # graph replays with whatever counts the tensor then holds. A count
    # outside 0..capacity is clamped on the GPU and raised (CountsError) at
    # the next call, as a timeout is.
    def all_gather_v(self, x, counts, out=None):
        """``counts[r]``: the elements rank r contributes (x holds the capacity; out R of them)."""
        return self._call("all-gather-v", x, out, 0, None, counts)

    def reduce_scatter_v(self, x, counts, out=None, op: str = "sum"):
        """``counts[r]``: the elements rank r ends with (x holds R capacities; out one)."""
        return self._call("reduce-scatter-v", x, out, 0, op, counts)

    def all_to_all_v(self, x, counts, out=None):
        """``counts[i * R + j]``: the elements rank i sends rank j (x and out hold R capacities)."""
        return self._call("all-to-all-v", x, out, 0, None, counts)

    # -- zero-copy -------------------------------------------------------------
    def buffers(self, collective: str, numel: int, dtype: Any, op: str = "sum", root: int = 0):
        """This rank's shared input and output buffers of ``collective`` with
        an input of ``numel`` elements of ``dtype``, as tensors ``(x, out)``
        (purlin's, as torch's symmetric memory allocates its own). A call
        given them copies no data in or out (a variable collective still
        copies its counts): it reads ``x`` where it is, leaves it as it was,
        and writes ``out``. They are views of the communicator's shared
        buffers, which calls of every collective go through: ``out`` holds
        its values until the next call of any collective on this
        communicator, and a call not given ``x`` may copy its input over it.
        Both stay valid until ``close()``. A rank with no input
        (broadcast's and scatter's non-roots) gets an empty ``x``, passed as
        is with ``out``. Prepares the collective when it is not yet
        (collective: every rank, the same calls in the same order, eagerly)."""
        if self._closed:
            raise PurlinError("this Communicator is closed")
        torch = self._torch
        name = self._dtype_names.get(dtype)
        if name is None:
            raise PurlinError(f"buffers: dtype {dtype}; purlin_bench.torch takes {', '.join(DTYPES)}")
        if isinstance(numel, bool) or not isinstance(numel, int) or numel < 1:
            raise PurlinError(f"buffers: numel must be a positive int, got {numel!r}")
        reduces = self._spec(collective).op == "reduce"
        if reduces and op not in REDOPS:
            raise PurlinError(f"unknown reduction '{op}' (known: {', '.join(REDOPS)})")
        # Not a hot path: _prepare finds a prepared collective itself (and records this key for it).
        key = (collective, numel, None, name, op if reduces else None, root)
        prepared = self._prepare(key, torch.empty(0, dtype=dtype).element_size())
        in_ptr, in_bytes, out_ptr, out_bytes = prepared.runner.buffers(prepared.rank)
        return self._tensor(in_ptr, in_bytes, dtype, prepared), self._tensor(out_ptr, out_bytes, dtype, prepared)

    def _tensor(self, ptr: int, nbytes: int, dtype: Any, owner: _Prepared):
        """A tensor over ``nbytes`` of this device's memory at ``ptr`` (torch
        reads the CUDA array interface; it keeps ``owner`` referenced)."""
        torch = self._torch
        if not nbytes:
            return torch.empty(0, dtype=dtype, device=f"cuda:{self.device}")
        raw = _DeviceBytes(ptr, nbytes, owner)
        return torch.as_tensor(raw, device=f"cuda:{self.device}").view(dtype)

    # -- internals -------------------------------------------------------------
    def _spec(self, collective: str):
        if collective not in self._specs:
            self._specs[collective] = resolve(collective)
        return self._specs[collective]

    def _check(self, t, what: str) -> str:
        # Per call: plain attribute reads and one dict lookup (a torch.device
        # object or a dtype's string a call would cost host time every layer).
        if not self._torch.is_tensor(t) or not t.is_cuda or t.get_device() != self.device:
            raise PurlinError(f"{what} must be a CUDA tensor on GPU {self.device}")
        dtype = self._dtype_names.get(t.dtype)
        if dtype is None:
            raise PurlinError(f"{what} is {t.dtype}; purlin_bench.torch takes {', '.join(DTYPES)}")
        if not t.is_contiguous():
            raise PurlinError(f"{what} must be contiguous")
        return dtype

    def _call(self, collective: str, x, out, root: int, op: str | None, counts=None):
        if self._closed:
            raise PurlinError("this Communicator is closed")
        # An earlier call's failure first: one memory read, no sync.
        self._raise_if_failed()
        dtype = self._check(x, "x")
        if out is not None and (self._check(out, "out") != dtype):
            raise PurlinError(f"out is {out.dtype}, x is {x.dtype}: they must match")
        if op is not None and op not in REDOPS:
            raise PurlinError(f"unknown reduction '{op}' (known: {', '.join(REDOPS)})")
        key = (collective, x.numel(), None if out is None else out.numel(), dtype, op, root)
        ident = self._idents.get(key)
        prepared = self._prepared.get(ident) if ident is not None else None
        if prepared is None:
            prepared = self._prepare(key, x.element_size())
        torch = self._torch
        counts = self._counts(prepared, collective, counts)
        if out is None:
            out = torch.empty(prepared.out_count, dtype=x.dtype, device=x.device)
        self._enqueue(prepared, x, out, self._current_stream(self.device), counts)
        return out

    def _counts(self, p: _Prepared, collective: str, counts):
        """A variable call's counts as int64 on this device, checked in shape (their values are the kernel's)."""
        if not p.ncounts:
            return None
        torch = self._torch
        if not torch.is_tensor(counts) or not counts.is_cuda or counts.device.index != self.device:
            raise PurlinError(f"{collective}: counts must be a CUDA tensor on GPU {self.device}")
        if counts.dtype not in (torch.int64, torch.int32) or counts.numel() != p.ncounts:
            raise PurlinError(f"{collective} on {self.size} ranks takes {p.ncounts} int64 counts (one per chunk), "
                              f"got {counts.numel()} of {counts.dtype}")
        return counts.to(torch.int64).contiguous()  # no copy when it already is

    def _prepare(self, key: tuple, itemsize: int) -> _Prepared:
        """Plan and prepare one collective: collective over the group."""
        from purlin_bench.torch._setup import count_for

        collective, n_in, n_out, dtype, op, root = key
        spec = self._spec(collective)
        redop = op if spec.op == "reduce" else None
        # Every rank says what it prepares (or why it cannot); rank 0 adds
        # the configuration. A rank that calls another collective or size
        # here, or whose tensors fit none, stops every rank at once.
        inst, config, failed = None, None, None
        try:
            inst = count_for(spec, self.size, self.rank, root, itemsize, n_in, n_out)
            ident = (collective, inst.count, dtype, redop, root)
        except PurlinError as exc:
            ident, failed = (collective, None, dtype, redop, root), str(exc)
        else:
            # The same call asked with or without out= (or by buffers()):
            # prepared already, so a graph may capture it.
            self._idents[key] = ident
            if ident in self._prepared:
                return self._prepared[ident]
        if self._torch.cuda.is_current_stream_capturing():
            raise PurlinError(
                f"{collective} of {n_in} {dtype} elements is not prepared: call it once eagerly (on every rank) "
                f"before CUDA graph capture"
            )
        if failed is None and self.rank == 0:
            try:
                config = self._configs.config(inst, dtype)
            except PurlinError as exc:
                failed = str(exc)
        said = self.group.allgather((ident, config, failed), "torch-prepare")
        errors = [(r, f) for r, (_, _, f) in enumerate(said) if f]
        if errors:
            raise PurlinError("; ".join(f"rank {r}: {f}" for r, f in errors))
        if any(i != ident for i, _, _ in said):
            which = "; ".join(
                f"rank {r}: {i[0]} count {i[1]} {i[2]} {i[3] or ''} root {i[4]}" for r, (i, _, _) in enumerate(said)
            )
            raise PurlinError(
                f"the ranks prepared different collectives at the same point ({which}): every rank must make the "
                f"same calls in the same order"
            )
        config = said[0][1]
        from purlin_bench.measure.service import MeasurementService

        program = MeasurementService(self.backend).program(inst, config, dtype, redop)
        with self.backend.guard():
            runner = self.backend.prepare(program, 1, **dict(config.exec_params))
            prepared = _Prepared(inst, runner, self.rank)
        self._prepared[ident] = prepared
        return prepared

    def _enqueue(self, p: _Prepared, x, out, stream: int, counts=None) -> None:
        try:
            with self.backend.guard():
                p.runner.enqueue(stream, p.rank, x.data_ptr(), out.data_ptr(), counts.data_ptr() if p.ncounts else 0)
                if self.debug and not self._torch.cuda.is_current_stream_capturing():
                    self._torch.cuda.current_stream(self.device).synchronize()
                    self._raise_if_failed(scan=True)
        except PurlinError:
            raise
        except RuntimeError as exc:  # torch's own CUDA errors
            raise ExecutionError(f"{type(exc).__name__}: {exc}") from None
