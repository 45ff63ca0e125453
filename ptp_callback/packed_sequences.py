"""Packed sequences (``nn.utils.rnn.pack_padded_sequence`` / ``pad_packed_sequence``), traced as ATen runs them.

A recurrent model that skips its padding packs each batch by the lengths of its sequences: the
packed data holds ``sum(lengths)`` rows, and ``batch_sizes`` says how many sequences are still
running at each time step. Those sizes come from the lengths' values, which a fake tensor does not
have, so such a step could not be traced. The lengths are a host tensor (``pack_padded_sequence``
requires them on the CPU) made from the batch, whose values the trace keeps (``known_values.py``),
so the sizes are exact.

ATen implements the two ops on the host, in C++ that reads the sizes, and launches one small kernel
per piece; here they run the same pieces as traceable ops, so that each kernel is recorded:

* packing copies each run of time steps that keep the same sequences (``contiguous`` of a slice
  of the time-major input: one copy per distinct length, none for a slice that is contiguous
  already), then concatenates them (one ``cat``);
* its backward fills a zero gradient of the padded input and copies each time step's rows into
  it: one copy per time step (a 512-step batch launches 512);
* unpacking fills the padded output with the padding value and copies each run of time steps with
  the same batch size into it.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .known_values import known_ints

_PACK = torch._C._VariableFunctions._pack_padded_sequence
_PAD = torch._C._VariableFunctions._pad_packed_sequence


def is_packing(func: Any) -> bool:
    """True for the functions ``pack_padded_sequence`` and ``pad_packed_sequence`` call."""
    return func is _PACK or func is _PAD


def run_packing(func: Any, args: tuple, kwargs: dict) -> Any:
    """Pack or unpack as ATen does, from the sizes' known values; where they are not known, the
    call runs as it is (and stops the trace with the op that needed them)."""
    if func is _PACK:
        names = ("input", "lengths", "batch_first")
        bound = {**dict(zip(names, args)), **kwargs}
        lengths = known_ints(bound["lengths"])
        if lengths is not None and bound["input"].dim() >= 2:
            _check_lengths(lengths)
            return _Pack.apply(bound["input"], tuple(lengths), bool(bound["batch_first"]))
    else:
        names = ("data", "batch_sizes", "batch_first", "padding_value", "total_length")
        bound = {**dict(zip(names, args)), **kwargs}
        sizes = known_ints(bound["batch_sizes"])
        if sizes:
            return _pad(bound["data"], sizes, bool(bound["batch_first"]), bound["padding_value"],
                        int(bound["total_length"]))
    return func(*args, **kwargs)


def _check_lengths(lengths: list[int]) -> None:
    # ATen's own checks, which a real step would fail the same way.
    if any(length <= 0 for length in lengths):
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' "
                           "that is <= 0")
    if any(a < b for a, b in zip(lengths, lengths[1:])):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                           "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
                           "to sidestep this requirement if you do not need ONNX exportability.")


def _batch_sizes(lengths: tuple[int, ...]) -> list[int]:
    """How many sequences are still running at each time step (``lengths`` sorted longest first)."""
    return [sum(1 for length in lengths if length > step) for step in range(max(lengths, default=0))]


class _Pack(torch.autograd.Function):
    """``_pack_padded_sequence`` forward and backward, piece by piece (see the module doc)."""

    @staticmethod
    def forward(ctx: Any, padded: torch.Tensor, lengths: tuple[int, ...], batch_first: bool) -> tuple[torch.Tensor, ...]:
        steps_major = padded.transpose(0, 1) if batch_first else padded
        batch, rest = len(lengths), steps_major.shape[2:]
        pieces, previous = [], 0
        for i in range(batch):  # from the shortest sequence to the longest
            length = lengths[batch - 1 - i]
            if length > previous:
                pieces.append(steps_major[previous:length, :batch - i].contiguous().view(-1, *rest))
                previous = length
        sizes = _batch_sizes(lengths)
        batch_sizes = torch.tensor(sizes, dtype=torch.int64)
        ctx.mark_non_differentiable(batch_sizes)
        ctx.shape, ctx.sizes, ctx.batch_first = tuple(steps_major.shape), sizes, batch_first
        return torch.cat(pieces), batch_sizes

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _unused: Any) -> tuple[Any, ...]:
        grad_input = grad.new_zeros(ctx.shape)
        offset = 0
        for step, size in enumerate(ctx.sizes):
            grad_input[step, :size].copy_(grad[offset:offset + size])
            offset += size
        return (grad_input.transpose(0, 1) if ctx.batch_first else grad_input), None, None


def _pad(data: torch.Tensor, sizes: list[int], batch_first: bool, padding_value: float,
         total_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``_pad_packed_sequence``: the padded output (time-major unless ``batch_first``) and the lengths."""
    batch, steps, rest = sizes[0], len(sizes), data.shape[1:]
    out = torch.full((max(steps, total_length), batch, *rest), padding_value, dtype=data.dtype, device=data.device)
    lengths = [0] * batch
    offset, run_start, run_batch, shorter = 0, 0, batch, batch - 1
    for step in range(steps + 1):
        size = sizes[step] if step < steps else 0
        if size != run_batch:  # a run of steps with the same batch size ends here: one copy
            count = run_batch * (step - run_start)
            out[run_start:step, :run_batch].copy_(data[offset:offset + count].view(step - run_start, run_batch, *rest))
            offset, run_start = offset + count, step
        for _ in range(run_batch - size):  # the sequences that ended at this step
            lengths[shorter] = step
            shorter -= 1
        run_batch = size
    return (out.transpose(0, 1) if batch_first else out), torch.tensor(lengths, dtype=torch.int64)


_RNN_MODULES = os.path.join("nn", "modules", "rnn.py")
_RNN_UTILS = os.path.join("nn", "utils", "rnn.py")


def failed_over_packed_sequences(exc: BaseException) -> bool:
    """Whether a failed trace stopped while packing or unpacking, or in a recurrent layer run over a
    packed batch: a CPU target's trace, where PyTorch's CPU kernels walk the time steps by the
    sizes' values (which ``run_packing`` only supplies for a GPU target's cuDNN call)."""
    tb = exc.__traceback__
    while tb is not None:
        code, frame = tb.tb_frame.f_code, tb.tb_frame
        if code.co_filename.endswith(_RNN_UTILS) and code.co_name in ("pack_padded_sequence", "pad_packed_sequence"):
            return True
        if code.co_filename.endswith(_RNN_MODULES) and frame.f_locals.get("batch_sizes") is not None:
            return True
        tb = tb.tb_next
    return False
