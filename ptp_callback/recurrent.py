"""Recurrent layers (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) recorded as cuDNN runs them on a GPU.

A CUDA GPU runs a whole ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` call as one cuDNN RNN call
(``aten._cudnn_rnn``) forward and one backward, whatever the number of layers. A CPU traces the
same call through whatever its build and instruction set offer: oneDNN's ``mkldnn_rnn_layer``
(one opaque op per layer, no FLOPs) on CPUs with native low-precision support, or a
per-timestep decomposition into thousands of small GEMMs and pointwise ops elsewhere (a 3-layer
GRU over 512 steps took a minute to trace). Neither is what the GPU runs, and they differ from
host to host. So for a CUDA target the call is intercepted and recorded as the cuDNN call, with
its shapes and dtypes: the prediction then depends on the model, the precision and the target
only, and the trace takes no longer than for any other layer.

Under autocast CUDA casts the input, the hidden state and every weight to fp16 (also under
bf16 autocast: PyTorch's ``_cudnn_rnn`` autocast wrapper casts to ``kHalf``) and copies the cast
weights into one flat buffer; the cuDNN call then runs in fp16. Those casts are traced as the
casts they are. fp32 RNNs use TF32 tensor cores where cuDNN's TF32 flag allows it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .costs import DTYPE_KEYS, OpCost, rnn_flops

# The functions nn.LSTM / nn.GRU / nn.RNN call (torch._VF.*), with their gate count.
_MODES: dict[Any, tuple[str, int]] = {
    torch.lstm: ("lstm", 4), torch.gru: ("gru", 3), torch.rnn_tanh: ("rnn_tanh", 1), torch.rnn_relu: ("rnn_relu", 1),
}
NAMES = {False: "aten._cudnn_rnn.default", True: "aten._cudnn_rnn_backward.default"}


def is_rnn(func: Any) -> bool:
    """True for the functions an ``nn.RNNBase`` forward calls."""
    return func in _MODES


@dataclass(frozen=True)
class RnnCall:
    """One cuDNN RNN call: ``dims = (gates, layers, directions, batch, seq, input, hidden, proj)``."""

    mode: str
    dims: tuple[int, int, int, int, int, int, int, int]
    dtype: torch.dtype
    tf32: bool

    @property
    def dtype_key(self) -> str:
        key = DTYPE_KEYS.get(self.dtype, "fp32")
        return "tf32" if key == "fp32" and self.tf32 else key

    def flops(self, backward: bool) -> float:
        return rnn_flops(self.dims, backward)


def _weights_per_layer(mode: str, params: list, layers: int, dirs: int) -> tuple[int, bool]:
    per = len(params) // max(1, layers * dirs)
    has_proj = mode == "lstm" and per in (3, 5)
    return per, has_proj


def parse_call(func: Any, args: tuple, tf32: bool) -> tuple[RnnCall, torch.Tensor, list[torch.Tensor], list, bool, bool] | None:
    """The call's shapes from ``torch.lstm(...)``-style arguments (padded or packed input)."""
    mode, gates = _MODES[func]
    packed = isinstance(args[1], torch.Tensor) and not args[1].is_floating_point()  # batch_sizes, not hx
    if packed:  # (data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional)
        data, batch_sizes, hx, params, _bias, layers, _drop, train, bidirectional = args[:9]
        seq = int(batch_sizes.shape[0])
        batch = max(1, math.ceil(data.shape[0] / max(1, seq)))
        batch_first = False
    else:  # (input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        data, hx, params, _bias, layers, _drop, train, bidirectional, batch_first = args[:9]
        if data.dim() != 3:
            return None
        batch, seq = (data.shape[0], data.shape[1]) if batch_first else (data.shape[1], data.shape[0])
    dirs = 2 if bidirectional else 1
    hidden_states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    params = list(params)
    _per, has_proj = _weights_per_layer(mode, params, layers, dirs)
    w_hh = params[1]
    hidden = int(w_hh.shape[0]) // gates
    proj = int(params[-1].shape[0]) if has_proj else 0
    call = RnnCall(mode, (gates, int(layers), dirs, int(batch), int(seq), int(data.shape[-1]), hidden, proj),
                   data.dtype, tf32)
    return call, data, hidden_states, params, packed, bool(batch_first)


def _nbytes(tensors: Any) -> float:
    return float(sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)))


def rnn_cost(call: RnnCall, inputs: tuple, outputs: tuple, backward: bool) -> OpCost:
    """The record of one cuDNN RNN call. Its training reserve (the gate activations of every step,
    written forward and read backward) counts as traffic."""
    gates, layers, dirs, batch, seq, _inp, hidden, _proj = call.dims
    reserve = gates * hidden * batch * seq * layers * dirs * torch.empty((), dtype=call.dtype).element_size()
    return OpCost("recurrent", call.flops(backward), _nbytes(inputs) + _nbytes(outputs) + reserve, 1, call.dtype_key,
                  backward=backward, kernel=call.mode, dims=call.dims)


class _CudnnRnn(torch.autograd.Function):
    """One cuDNN RNN call: records itself forward and backward, allocates its outputs."""

    @staticmethod
    def forward(ctx: Any, call: RnnCall, recorder: Any, packed: bool, batch_first: bool, n_hidden: int,
                data: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden_states = tensors[:n_hidden]
        _g, layers, dirs, _b, _s, _i, hidden, proj = call.dims
        width = dirs * (proj or hidden)
        with recorder.paused():
            out = data.new_empty((*data.shape[:-1], width))
            states = [h.new_empty(h.shape) for h in hidden_states]
        outputs = (out, *states)
        recorder.record(NAMES[False], rnn_cost(call, (data, *tensors), outputs, backward=False), (data, *tensors), outputs)
        ctx.call, ctx.recorder, ctx.inputs = call, recorder, (data, *tensors)
        return outputs

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> tuple[Any, ...]:
        inputs = ctx.inputs
        with ctx.recorder.paused():
            grads = tuple(torch.empty_like(t) if need else None for t, need in zip(inputs, ctx.needs_input_grad[5:]))
        present = tuple(g for g in grad_outputs if isinstance(g, torch.Tensor))
        made = tuple(g for g in grads if g is not None)
        ctx.recorder.record(NAMES[True], rnn_cost(ctx.call, (*present, *inputs), made, backward=True),
                            (*present, *inputs), made)
        return (None, None, None, None, None, *grads)


def run_rnn(func: Any, args: tuple, kwargs: dict, recorder: Any, tf32: bool) -> Any:
    """``torch.lstm`` / ``torch.gru`` / ``torch.rnn_*`` as one cuDNN call (see module doc)."""
    if kwargs:
        return func(*args, **kwargs)
    parsed = parse_call(func, args, tf32)
    if parsed is None:
        return func(*args, **kwargs)
    call, data, hidden_states, params, packed, batch_first = parsed
    device_type = data.device.type
    tensors = [data, *hidden_states, *params]
    if torch.is_autocast_enabled(device_type) and data.is_floating_point():
        # CUDA autocast's _cudnn_rnn wrapper: everything to fp16, weights re-flattened into one buffer.
        tensors = [t.to(torch.float16) if t.is_floating_point() and t.dtype != torch.float16 else t for t in tensors]
        weights = tensors[1 + len(hidden_states):]
        recorder.record("aten._cudnn_rnn_flatten_weight.default",
                        OpCost("elementwise", 0.0, 2.0 * _nbytes(weights), 1, "fp16"), tuple(weights), ())
        call = RnnCall(call.mode, call.dims, torch.float16, tf32)
    with torch.autocast(device_type, enabled=False):
        outputs = _CudnnRnn.apply(call, recorder, packed, batch_first, len(hidden_states), *tensors)
    out, states = outputs[0], outputs[1:]
    if call.mode == "lstm":
        return out, states[0], states[1]
    return out, states[0]
