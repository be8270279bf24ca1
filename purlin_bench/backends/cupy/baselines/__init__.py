"""The GPU's baselines' code: what each one runs (registered in purlin_bench/baselines/).

torch_code.py and cupy_code.py: the shortest torch and CuPy code over one
[R, ...] tensor; ipc.py: one kernel per process over CUDA IPC; nccl.py: NCCL
through cupy.cuda.nccl on several GPUs."""
