"""Ops that ``FakeTensorMode`` decomposes in Python, run on meta tensors instead.

``FakeTensorMode`` has no C++ shape rule for batch norm, layer norm and the backward of most
activations: the first time it meets a shape it runs the op's Python decomposition, a few dozen
sub-ops each dispatched through the fake mode again (10-20 ms per op on 2 CPU cores; a quarter
of a MobileNetV3 trace on the CPU proxy; on a GPU machine, whose trace runs cuDNN's batch norm
on fake CUDA tensors, 1.8 of its 2.1 s). The same decomposition on plain meta tensors, outside
the fake mode, takes a quarter of that, and its result is remembered per input signature so a shape seen
before costs a dictionary lookup. Only the outputs' shapes, strides and dtypes matter to the
trace, and those are what the meta kernels compute.

The norms' meta kernels follow CUDA, not the CPU: their saved statistics are fp32 for half
inputs, where the CPU kernels keep the input's dtype. So the norms take this path only when the
step is traced for a CUDA target, whose kernels these are; the activations behave the same on
every device.

Views are the other Python path: ``FakeTensorMode`` sizes every ``view`` and ``_unsafe_view`` with
the reference implementation of reshape, a dozen primitive ops each dispatched through the fake
mode again (about 3 ms per new shape on 2 CPU cores: 2,470 views and 1.5 s of a MaxViT trace), and
``_reshape_alias`` (what ``reshape`` is on a CPU) with a decomposition. Here a view's strides come
from the same view of a meta tensor (C++, microseconds), and the fake output is the input's
storage seen with them (``as_strided``), as the fake mode's own result is.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils._pytree import tree_flatten, tree_map

aten = torch.ops.aten

# Decomposed in Python by FakeTensorMode, device-independent outputs.
_ACTIVATIONS = frozenset({
    aten.hardswish.default, aten.hardsigmoid.default,
    aten.gelu_backward.default, aten.hardswish_backward.default, aten.hardsigmoid_backward.default,
    aten.threshold_backward.default, aten.silu_backward.default, aten.sigmoid_backward.default,
    aten.tanh_backward.default,
})
# Decomposed in Python by FakeTensorMode; outputs as CUDA's kernels give them.
_NORMS = frozenset({
    aten.native_batch_norm.default, aten.native_batch_norm_backward.default,
    aten.native_layer_norm.default, aten.native_layer_norm_backward.default,
    # what batch norm dispatches to on a fake CUDA device (a trace on a GPU machine)
    aten.cudnn_batch_norm.default, aten.cudnn_batch_norm_backward.default,
})

# Views the fake mode sizes in Python: ``view``'s shape argument, ``_reshape_alias``'s shape and strides.
_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default})
_RESHAPE_ALIAS = aten._reshape_alias.default

Signature = tuple[Any, ...]


class _Layout(NamedTuple):
    """What the trace needs of an output tensor."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype


class MetaShortcut:
    """Runs the ops above on meta tensors, with outputs remembered per input signature.

    ``cuda_target``: whether the step is traced for a CUDA device (the norms take this path then).
    """

    def __init__(self, cuda_target: bool) -> None:
        self.ops = _ACTIVATIONS | _NORMS if cuda_target else _ACTIVATIONS
        self._outputs: dict[Signature, Any] = {}

    def run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """The op's fake outputs, or ``NotImplemented`` when it must go through the fake mode."""
        if func in _VIEWS or func is _RESHAPE_ALIAS:
            return _view(func, args, kwargs)
        if func not in self.ops:
            return NotImplemented
        leaves, _ = tree_flatten((args, kwargs))
        fakes = [t for t in leaves if isinstance(t, torch.Tensor)]
        if not fakes or not all(isinstance(t, FakeTensor) and t.constant is None for t in fakes):
            return NotImplemented  # real or value-carrying tensors: the fake mode handles them
        device = fakes[0].fake_device
        if any(t.fake_device != device for t in fakes):
            return NotImplemented
        key = (func, device, _signature((args, kwargs)))
        layouts = self._outputs.get(key)
        if layouts is None:
            with unset_fake_temporarily():
                out = func(*tree_map(as_meta, args), **tree_map(as_meta, kwargs))
            layouts = tree_map(_layout, out)
            self._outputs[key] = layouts
        mode = fakes[0].fake_mode
        return tree_map(lambda layout: _fake(mode, layout, device) if _is_layout(layout) else layout, layouts,
                        is_leaf=_is_layout)


def _signature(value: Any) -> Signature:
    leaves, spec = tree_flatten(value)
    return (str(spec), tuple((tuple(t.shape), t.stride(), t.dtype, t.storage_offset()) if isinstance(t, torch.Tensor)
                             else t for t in leaves))


def as_meta(value: Any) -> Any:
    """A tensor's meta twin (shape, strides, dtype); anything else as it is."""
    if not isinstance(value, torch.Tensor):
        return value
    return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")


def _layout(value: Any) -> Any:
    return _Layout(tuple(value.shape), value.stride(), value.dtype) if isinstance(value, torch.Tensor) else value


def _is_layout(value: Any) -> bool:
    return isinstance(value, _Layout)


def _fake(mode: Any, layout: _Layout, device: torch.device) -> FakeTensor:
    with unset_fake_temporarily():
        meta = torch.empty_strided(layout.shape, layout.stride, dtype=layout.dtype, device="meta")
    return mode.fake_tensor_converter.from_meta_and_device(mode, meta, device)


def _view(func: Any, args: tuple, kwargs: dict) -> Any:
    """A view of a fake tensor without values, strided as ATen strides the same view of a meta
    tensor (the fake mode's answer, but for the strides of size-1 dims, which address nothing: ATen's,
    as in a real run); ``NotImplemented`` for anything else or a shape the input cannot be viewed
    as, which the fake mode then reports as it would."""
    if kwargs or not args or not isinstance(args[0], FakeTensor) or args[0].constant is not None:
        return NotImplemented
    base = args[0]
    if func is _RESHAPE_ALIAS:
        if len(args) != 3:
            return NotImplemented
        shape, stride = args[1], args[2]
    else:
        if len(args) != 2:
            return NotImplemented
        try:
            with unset_fake_temporarily():
                meta = as_meta(base).view(args[1])
        except RuntimeError:
            return NotImplemented
        shape, stride = meta.shape, meta.stride()
    return aten.as_strided.default(base, shape, stride, base.storage_offset())
