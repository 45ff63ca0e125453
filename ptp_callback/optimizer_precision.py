"""Optimizer settings that cannot train in the parameters' precision.

Adam-style optimizers divide by ``sqrt(running average of squared gradients) + eps``. PyTorch's
per-parameter and for-each implementations do that arithmetic in the parameters' dtype. In
float16 the default ``eps=1e-8`` rounds to 0 (the smallest float16 above 0 is 6e-8), and a
squared gradient below about 3e-5 underflows to 0 too, so the update divides by zero: the weights
become inf or NaN. Adam, AdamW, NAdam, RMSprop, Adagrad and Adamax do it at the first step, RAdam
once its warm-up ends. ``fused=True`` runs the same math in float32 and trains.

A run in that state still takes time, but trains nothing. Its GPU kernels also run faster on NaN
weights than on real numbers, so its step times are not those of a run that trains.
"""

from __future__ import annotations

import torch


def rounds_to_zero(value: float, dtype: torch.dtype) -> bool:
    """True when ``value`` (> 0) is stored as 0 in ``dtype``: below half its smallest subnormal."""
    info = torch.finfo(dtype)
    return value <= info.tiny * info.eps / 2


def eps_underflow(optimizer: torch.optim.Optimizer) -> str | None:
    """One sentence saying why this optimizer's updates divide by zero, or ``None`` when they don't."""
    for group in optimizer.param_groups:
        eps = group.get("eps")
        if not isinstance(eps, float) or eps <= 0.0 or group.get("fused"):
            continue
        for dtype in (torch.float16, torch.bfloat16):
            if rounds_to_zero(eps, dtype) and any(p.dtype == dtype for p in group["params"]):
                name = str(dtype).removeprefix("torch.")
                return (f"{type(optimizer).__name__}(eps={eps:g}) on {name} parameters: eps is 0 in {name}, so "
                        f"where the average of squared gradients underflows the update divides by zero and "
                        f"the weights become inf/NaN; train in bf16-true or 16-mixed, pass fused=True, or use "
                        f"an eps {name} can hold (e.g. 1e-4)")
    return None
