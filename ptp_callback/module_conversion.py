"""``module.to(...)`` / ``.float()`` / ``.half()`` called inside a traced step.

Some models convert a submodule while they run: SwitchTransformers' router runs
``self.classifier = self.classifier.to(float32)`` in every forward. On a real GPU, ``Module._apply``
changes each parameter's data in place (``param.data = converted``): the Parameter stays the same
object, only its dtype or device changes, and a conversion to the dtype it already has changes
nothing. During a trace the parameters are fake tensors, and ``Module._apply`` swaps fake
parameters with ``torch.utils.swap_tensors``, which refuses a tensor that anything else still
holds (the trace's own bookkeeping does): "_apply(): Couldn't swap Linear.weight", and the trace
stopped.

Inside :func:`conversions_keep_fake_parameters` a module holding fake parameters is converted
without swapping: a conversion that returns the parameter itself keeps it, and a real one puts
the converted fake tensor in the parameter's place for the rest of the step, so the ops after it
see the dtype a GPU run would. The real model is never touched: its parameters were replaced by
fakes for the trace and are put back afterwards. (The optimizer's copy still holds the
parameter as it was before the conversion, so that parameter's update is left out of the
step: a router's few weights.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensor


@contextlib.contextmanager
def conversions_keep_fake_parameters() -> Iterator[None]:
    """Let ``Module._apply`` (``.to``, ``.float``, ``.half``, ``.type``) convert fake parameters."""
    original = torch.nn.Module._apply

    def _apply(module: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True):
        if not any(isinstance(p, FakeTensor) for p in module._parameters.values()):
            return original(module, fn, recurse)
        if recurse:
            for child in module.children():
                child._apply(fn)
        for key, param in module._parameters.items():
            if param is None:
                continue
            with torch.no_grad():
                converted = fn(param)
            if converted is not param:
                module._parameters[key] = torch.nn.Parameter(converted, requires_grad=param.requires_grad)
        for key, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[key] = fn(buffer)
        return module

    torch.nn.Module._apply = _apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module._apply = original  # type: ignore[method-assign]
