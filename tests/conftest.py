"""Test-session settings shared by every test module."""

import os

import torch

# Under pytest-xdist each worker is its own process; with every worker's intra-op pool as wide as
# the machine, a 16-core host ran 8 x 16 threads, and timing probes read noise (an in-cache copy
# at 0.1 GB/s, a forked worker's page copies at nothing). Each worker gets its share of the cores
# (two threads at least: the probes' tests compare multi-threaded kernels).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    torch.set_num_threads(max(2, (os.cpu_count() or 1) // _WORKERS))
