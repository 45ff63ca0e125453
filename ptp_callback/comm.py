"""Gradient communication of data-parallel training: what one optimizer step adds on N GPUs.

DDP all-reduces every gradient once per optimizer step, in buckets, while backward still runs:
only what outlasts the backward is added to the step (and always the last bucket, which waits
for the last gradient). FSDP (full shard) all-gathers the parameters for forward and again for
backward and reduce-scatters the gradients: three collectives of the parameter bytes.

A ring collective moves ``(n-1)/n`` of the bytes per GPU per pass (all-reduce: two passes) over
the slowest link, at an assumed 85% of the link's peak per direction. (For scale: NCCL's
all-reduce bus bandwidth on 8xH100 has been reported at 466-479 GB/s for >= 1 GB messages with
NVLink SHARP; without in-switch reduction a ring gets less.)
Not calibrated against measurements: no multi-GPU data was available.

>>> round(allreduce_seconds(1e9, world_size=8, link_gbs=450.0) * 1e3, 2)   # 1 GB over NVLink on 8 GPUs
4.6
"""

from __future__ import annotations

import math

RING_EFFICIENCY = 0.85  # assumed share of the link's peak a ring reaches (see module doc)
COLLECTIVE_LATENCY_S = 20e-6  # per collective call: launch and ring set-up
DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP's default bucket_cap_mb


def allreduce_seconds(nbytes: float, *, world_size: int, link_gbs: float) -> float:
    """One ring all-reduce of ``nbytes`` per GPU: two passes of ``(n-1)/n`` of the bytes."""
    if world_size <= 1 or nbytes <= 0:
        return 0.0
    traffic = 2.0 * (world_size - 1) / world_size * nbytes
    return COLLECTIVE_LATENCY_S + traffic / (link_gbs * 1e9 * RING_EFFICIENCY)


def ddp_exposed_seconds(grad_bytes: float, backward_s: float, *, world_size: int, link_gbs: float) -> float:
    """Seconds DDP's gradient all-reduce adds to a step after overlapping with the backward."""
    if world_size <= 1:
        return 0.0
    buckets = max(1, math.ceil(grad_bytes / DDP_BUCKET_BYTES))
    total = allreduce_seconds(grad_bytes, world_size=world_size, link_gbs=link_gbs) + (buckets - 1) * COLLECTIVE_LATENCY_S
    last = allreduce_seconds(min(grad_bytes, DDP_BUCKET_BYTES), world_size=world_size, link_gbs=link_gbs)
    return max(last, total - backward_s)


def fsdp_exposed_seconds(param_bytes: float, compute_s: float, *, world_size: int, link_gbs: float) -> float:
    """Seconds FSDP (full shard) adds: 2 all-gathers and 1 reduce-scatter of the parameters,
    each one ring pass, overlapped with the step's compute except the first gather."""
    if world_size <= 1:
        return 0.0
    one_pass = allreduce_seconds(param_bytes, world_size=world_size, link_gbs=link_gbs) / 2.0
    return max(one_pass / 3.0, 3.0 * one_pass - compute_s)
