"""The runtime: runners, launches, buffers, worlds, CUDA IPC, status words and timing.

runner.py prepares and runs a program (launch.py: one launch object per
kernel kind); buffers.py, world.py and ipc.py hold where ranks and their
buffers live; status.py, occupancy.py and sizing.py keep every wait bounded
and every launch resident; timing.py and device.py time and describe the GPU;
reference.py checks outputs on the device."""
