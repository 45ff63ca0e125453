"""Values the trace gives fake tensors, so that a step which reads them can be traced.

Some training steps read values, not only shapes: a CTC loss checks ``labels.max()`` and keeps the
valid labels with ``masked_select``; wav2vec 2.0's SpecAugment draws a time mask with NumPy and
indexes the hidden states with it; LED asks whether any token attends globally. A fake tensor
has no values, so such a step could not be traced and the callback fell back to measured timing.

On the CPU proxy the batch's integer and boolean tensors (token ids, labels, masks, lengths) keep
their values, and so do integer and boolean tensors the step makes from host data
(``torch.tensor(numpy_mask)``). ``FakeTensorMode`` already runs an op for real when every input
has a value ("constant propagation"); here that holds for results of up to :data:`VALUE_LIMIT`
elements, not only for single numbers. So a length, a mask or an index that depends on the batch
alone is known, and a size it decides is exact. Of floating-point tensors
the batch's small ones keep their values (up to :data:`FLOAT_VALUE_LIMIT` elements: a detection
batch's boxes and keypoints), so a detector's check of its target boxes and their rescaling are
known, and so do those computed from values alone or filled with them, up to the integer limit
(an attention mask turned into ``(1 - mask) * finfo.min`` or ``where(mask, 0.0, finfo.min)``, as
LED and Longformer build before asking whether any token attends globally; JetMoE's expert counts,
scattered into ``torch.zeros``). A float fill shaped like another tensor (``zeros_like``: an
optimizer's state, an activation's buffer) never carries values. An op without values that
writes into a valued tensor takes its values away; no activation, weight or gradient is ever
computed. An op whose output would exceed the limit (a 4-D mask of a long padded batch) runs on
the fake tensors without its inputs' values, as before, and is not computed for real. An op
whose output memory is uninitialized (``new_empty`` of a valued tensor, which ``index``'s meta
kernel starts with) never carries values.

Values that come from the model's own numbers cannot be known, so four kinds are given typical
or bounding ones, stated here:

* a one-element uniform draw reads as 0.5, the median of U(0, 1): LayerDrop (M2M100, NLLB, LED,
  wav2vec 2.0 configs) skips a layer while training when ``torch.rand([]) < p``, so each layer
  with ``p < 0.5`` is traced as run, its likelier outcome (over a fit it runs a share ``1 - p``).
  A one-element ``uniform_(a, b)`` reads as ``(a + b) / 2``: torchvision's detection transform
  picks its training image size with one;
* the indices ``topk`` picks (a mixture-of-experts router's choice of experts) are spread
  evenly: row ``r`` picks ``(r * k + j) mod n`` for ``j < k`` of ``n``, so every expert gets the
  same number of tokens, what a router trained with a load-balancing loss aims for. A loop over
  experts (transformers' eager experts, ``torch.where(expert_mask[e])``) then runs with exact,
  balanced sizes. A skewed router makes the real step slower. A top-1 router's ``argmax`` (or
  ``max(dim)``) is spread the same way: row ``r`` picks ``r mod n`` (Switch Transformers);
* what ``nonzero`` (``torch.where(mask)``, ``x[mask]``), ``masked_select`` and torchvision's
  ``nms`` keep of an input without values is taken at its largest: every element. A detector's
  proposal filters keep nearly all in training, its samplers then draw their fixed counts (512
  regions, 256 anchors per image), and NMS is followed by a fixed top-N, so two-stage detectors
  trace with about their real training sizes; a mask or keypoint head is run on every sampled
  region, not only the positive ones (an over-prediction). The trace warns, listing these ops;
* a ``randperm`` (a sampler's random choice of regions) is a random permutation, a different one
  for each draw of the trace, from fixed seeds: torchvision's ``BalancedPositiveNegativeSampler``
  then picks its positive and negative regions from the proposals as it does in training. Its
  positives and negatives, both every proposal here, overlap where they picked the same ones:
  of its 512 regions an image about 490 (2,000 proposals) remain.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily
from torch.utils._pytree import tree_leaves, tree_map

from .meta_dispatch import as_meta
from .value_reads import STAND_IN

VALUE_LIMIT = 1 << 22  # elements: 32 MB of int64, a few milliseconds of real work per op


# Floating-point elements a batch or host tensor may keep: a detection batch's boxes and keypoints,
# per-sample weights; never an image, a feature map or a parameter.
FLOAT_VALUE_LIMIT = 4096


def _small(t: torch.Tensor) -> bool:
    """A tensor computed from values alone (or filled) that is small enough to keep them."""
    return not t.is_complex() and not t.is_sparse and t.numel() <= VALUE_LIMIT


def carries_value(t: torch.Tensor) -> bool:
    """A batch or host tensor whose values the trace keeps: integer or boolean, or a small
    floating-point one."""
    return _small(t) and (not t.is_floating_point() or t.numel() <= FLOAT_VALUE_LIMIT)


class ValuedFakeTensorMode(FakeTensorMode):
    """``FakeTensorMode`` whose tensors keep their values as the module doc says (the batch's within
    :func:`carries_value`, results and fills up to :data:`VALUE_LIMIT` elements); ops sized by values
    it does not have are taken at their largest, counted in ``taken_largest``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.taken_largest: dict[str, int] = {}

    def may_turn_const(self, t: torch.Tensor) -> bool:
        # Outputs of ops whose inputs all had values, and host data: masks built from the batch's
        # attention mask are floats (``(1 - mask) * finfo.min``), kept up to the integer limit.
        return super().may_turn_const(t) or (not self.is_our_fake(t) and t.device.type == "cpu" and _small(t))

    def _dispatch_impl(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func in _SIZED_BY_VALUES or is_nms(func):
            sized = sized_without_values(self, func, args, kwargs)
            if sized is not NotImplemented:
                out, assumed = sized
                if assumed:
                    self.taken_largest[str(func)] = self.taken_largest.get(str(func), 0) + 1
                return out
        fakes = [t for t in tree_leaves((args, kwargs)) if isinstance(t, FakeTensor)]
        if fakes and all(t.constant is not None for t in fakes) and _too_big(func, args, kwargs):
            # The fake mode would compute the op for real before finding its output too big to
            # keep: run it on value-less stand-ins instead.
            args, kwargs = tree_map(lambda v: _without_value(self, v) if isinstance(v, FakeTensor) else v,
                                    (args, kwargs))
        out = super()._dispatch_impl(func, types, args, kwargs)
        if func in _UNINITIALIZED and isinstance(out, FakeTensor) and out.constant is not None:
            # Constant propagation ran ``new_empty`` of a valued tensor for real: its "value" is
            # uninitialized memory (the meta kernel of ``index`` starts with one), never a value.
            out.constant = None
        if isinstance(out, FakeTensor) and out.constant is None and out.dtype == torch.bool and self._keeps_values(func, out):
            finite = _as_finite(func, args)
            if finite is not None:  # a check of the model's numbers: finite, and keeping their invariants
                with unset_fake_temporarily():
                    give_values(out, torch.full(out.shape, finite, dtype=torch.bool))
                out._ptp_checks_the_model = True  # read on a GPU, it waits for the model's numbers
        elif isinstance(out, FakeTensor) and out.constant is not None and any(map(checks_the_model, fakes)):
            out._ptp_checks_the_model = True  # computed from such an answer (``all`` of ``x == x``)
        if func in _FILLS and isinstance(out, FakeTensor) and out.constant is None and self._keeps_values(func, out):
            # A tensor filled with known values (``one_hot`` starts from zeros): keep them.
            with unset_fake_temporarily():
                real = tree_map(lambda v: torch.zeros(v.shape, dtype=v.dtype) if isinstance(v, FakeTensor) else v, args)
                options = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory")}
                give_values(out, func(*real, **options).to(out.dtype))
        return out

    def _keeps_values(self, func: Any, t: FakeTensor) -> bool:
        """Whether a filled fake output may carry values (a mask's fill values, a router's count
        buffer): its fill stays its value until an op without values writes into it. Never a float
        fill shaped like another tensor (an optimizer's ``zeros_like(param)`` state, an activation's
        buffer): no real allocation the size of the model's state."""
        if t.fake_device.type != "cpu" or (t.is_floating_point() and func in _SHAPED_LIKE):
            return False
        return _small(t)


_aten = torch.ops.aten
# Ops that fill a new tensor with values independent of any input's values.
_FILLS = frozenset(op for op in (
    _aten.zeros.default, _aten.ones.default, _aten.full.default, _aten.zeros_like.default, _aten.ones_like.default,
    _aten.full_like.default, _aten.new_zeros.default, _aten.new_ones.default, _aten.new_full.default,
    _aten.arange.default, _aten.arange.start, _aten.arange.start_step, _aten.scalar_tensor.default,
))


# ``torch._is_all_true``: ``torch.distributions`` checks its arguments' constraints with it by default.
_ALL = frozenset((_aten.all.default, _aten.all.dim, _aten.all.dims, _aten._is_all_true.default))
# A comparison of one number the model computed with a Python number (Adafactor's ``max(eps, rms)``).
_COMPARE = {_aten.gt.Scalar: float.__gt__, _aten.lt.Scalar: float.__lt__, _aten.ge.Scalar: float.__ge__,
            _aten.le.Scalar: float.__le__, _aten.eq.Scalar: float.__eq__, _aten.ne.Scalar: float.__ne__}
_NOT_FINITE = frozenset((_aten.isnan.default, _aten.isinf.default, _aten.isposinf.default, _aten.isneginf.default))


def checks_the_model(t: FakeTensor) -> bool:
    """Whether ``t``'s value answers a check of the model's numbers (:func:`_as_finite`): reading it
    on a GPU copies it from the device once the work before it is done."""
    return getattr(t, "_ptp_checks_the_model", False)


def _as_finite(func: Any, args: tuple) -> bool | None:
    """What a check of the model's numbers answers when they are finite and keep the invariants the
    step checks: ``isnan``/``isinf`` False; ``isfinite``, which is ``(x == x) * (x.abs() != inf)``,
    True (``x == x`` and ``x != inf`` True); ``all`` of a condition on them True (DETR's matcher
    checks that its predicted boxes' corners are in order, torchmetrics that its inputs are
    probabilities); a comparison of one such number with a Python number as the number would read
    (``value_reads.STAND_IN``). ``None`` for any other op, or an input with values."""
    x = args[0] if args else None
    if func in _ALL and isinstance(x, FakeTensor) and x.constant is None and x.dtype == torch.bool:
        return True  # a check that the model's numbers keep an invariant (DETR: boxes' corners in order)
    if not isinstance(x, FakeTensor) or x.constant is not None or not x.is_floating_point():
        return None
    if func in _NOT_FINITE:
        return False
    other = args[1] if len(args) > 1 else None
    if func in (_aten.eq.Tensor, _aten.ne.Tensor) and other is x:
        return func is _aten.eq.Tensor
    if func in (_aten.eq.Scalar, _aten.ne.Scalar) and isinstance(other, float) and math.isinf(other):
        return func is _aten.ne.Scalar
    if func in _COMPARE and x.numel() == 1 and isinstance(other, (int, float)) and not isinstance(other, bool):
        return _COMPARE[func](STAND_IN, float(other))  # as the number would read (value_reads.STAND_IN)
    return None


_SHAPED_LIKE = frozenset(op for op in (
    _aten.zeros_like.default, _aten.ones_like.default, _aten.full_like.default, _aten.new_zeros.default,
    _aten.new_ones.default, _aten.new_full.default,
))
# Ops whose output size the values of their input decide (torchvision's ``nms`` too: ``is_nms``).
_SIZED_BY_VALUES = frozenset((_aten.nonzero.default, _aten.masked_select.default))
# Ops whose output memory is left uninitialized.
_UNINITIALIZED = frozenset(op for op in (
    _aten.empty.memory_format, _aten.empty_like.default, _aten.empty_strided.default, _aten.new_empty.default,
    _aten.new_empty_strided.default, _aten.empty_permuted.default,
))


def _too_big(func: Any, args: Any, kwargs: Any) -> bool:
    """Whether the op's outputs would hold more than :data:`VALUE_LIMIT` elements (its meta kernel's
    shapes; an op the meta kernel cannot size, such as ``nonzero``, is bounded by its inputs)."""
    try:
        with unset_fake_temporarily():
            out = func(*tree_map(as_meta, args), **tree_map(as_meta, kwargs))
    except Exception:  # noqa: BLE001 - data-dependent shapes: bounded by the (small) inputs
        return False
    return sum(t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor)) > VALUE_LIMIT


def _without_value(mode: FakeTensorMode, t: FakeTensor) -> FakeTensor:
    return t if t.constant is None else _value_less(mode, t.shape, t.dtype, t.fake_device, t.stride())


def _value_less(mode: FakeTensorMode, shape: Any, dtype: torch.dtype, device: torch.device,
                stride: Any = None) -> FakeTensor:
    """A fake tensor without values, made from a meta tensor outside the fake mode."""
    with unset_fake_temporarily():
        meta = (torch.empty(shape, dtype=dtype, device="meta") if stride is None
                else torch.empty_strided(shape, stride, dtype=dtype, device="meta"))
    return mode.fake_tensor_converter.from_meta_and_device(mode, meta, device)


def valued_fake(mode: FakeTensorMode, t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """A CPU fake of the batch tensor ``t`` (converted to ``dtype``) that keeps a copy of its values
    (an op running for real on them may write to them), or ``None`` for a tensor that carries none."""
    if not carries_value(t) or t.device.type == "meta" or isinstance(t, FakeTensor):
        return None  # no values to keep
    with unset_fake_temporarily():
        real = t.detach().to("cpu", dtype=dtype or t.dtype, copy=True)
    return mode.fake_tensor_converter.from_real_tensor(mode, real, make_constant=True)


_CTC = {getattr(torch.ops.aten._ctc_loss, name) for name in ("default", "Tensor")}
_CTC_BACKWARD = {getattr(torch.ops.aten._ctc_loss_backward, name) for name in ("default", "Tensor")}


def known_ints(value: Any) -> list[int] | None:
    """The integers a fake tensor with known values (or a list of numbers) holds, else ``None``."""
    if isinstance(value, FakeTensor):
        if value.constant is None:
            return None
        with unset_fake_temporarily():  # the value is a real tensor: read it outside the fake mode
            return [int(v) for v in value.constant.reshape(-1).tolist()]
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else None


def sized_by_values(func: Any, args: tuple, kwargs: dict) -> Any:
    """The fake outputs of an op whose output sizes the fake mode leaves to the values (the CTC
    loss: its forward's trellis is ``batch x time x (2 x longest target + 1)``), from the lengths'
    known values; ``NotImplemented`` for any other op or unknown lengths."""
    if func not in _CTC and func not in _CTC_BACKWARD:
        return NotImplemented
    log_probs = args[1] if func in _CTC_BACKWARD else args[0]
    if not isinstance(log_probs, FakeTensor):
        return NotImplemented
    def fake(shape: tuple[int, ...]) -> FakeTensor:
        return _value_less(log_probs.fake_mode, shape, log_probs.dtype, log_probs.fake_device)

    if func in _CTC_BACKWARD:
        return fake(tuple(log_probs.shape))
    target_lengths = known_ints(args[3] if len(args) > 3 else kwargs.get("target_lengths"))
    if target_lengths is None:
        return NotImplemented
    batched = log_probs.dim() == 3
    batch = log_probs.shape[1] if batched else 1
    trellis = (batch, log_probs.shape[0], 2 * max(target_lengths, default=0) + 1)
    return fake((batch,) if batched else ()), fake(trellis)


def sized_without_values(mode: FakeTensorMode, func: Any, args: tuple, kwargs: dict) -> Any:
    """``(fake output, assumed)`` for ``nonzero``, ``masked_select`` or torchvision's ``nms`` of an
    input without values: every element kept (``assumed``), or a ``masked_select`` sized exactly by
    its mask's values; ``NotImplemented`` for any other call (see module doc)."""
    first = args[0] if args else None
    if not isinstance(first, FakeTensor) or first.constant is not None or first.fake_device.type != "cpu":
        return NotImplemented
    if func is _aten.masked_select.default:
        mask = args[1] if len(args) > 1 else kwargs["mask"]
        shape = torch.broadcast_shapes(first.shape, mask.shape)
        known = isinstance(mask, FakeTensor) and mask.constant is not None
        with unset_fake_temporarily():
            size = int(mask.constant.expand(shape).sum()) if known else math.prod(shape)
        return _value_less(mode, (size,), first.dtype, first.fake_device), not known
    if func is _aten.nonzero.default:
        with unset_fake_temporarily():
            kept = torch.ones(first.shape, dtype=torch.bool).nonzero()
    elif is_nms(func):
        with unset_fake_temporarily():
            kept = torch.arange(first.shape[0])
    else:
        return NotImplemented
    return mode.fake_tensor_converter.from_real_tensor(mode, kept, make_constant=kept.numel() <= VALUE_LIMIT), True


def is_nms(func: Any) -> bool:
    """torchvision's non-maximum suppression (its CUDA kernel copies a mask to the host: a sync)."""
    return getattr(func, "namespace", "aten") == "torchvision" and func.overloadpacket.__name__ == "nms"


def give_values(t: FakeTensor, value: torch.Tensor) -> None:
    """Give fake tensor ``t`` the values ``value`` (a real tensor of its shape), registered with its
    fake mode as the mode's own constants are: an op without values that later writes into ``t``
    (``mask[indices] = 1``) takes them away, where a kept stale value would say what ``t`` no
    longer holds (a sampler's mask still all zeros: no regions sampled)."""
    t.constant = value
    t.fake_mode.fake_tensor_converter.add_constant_storage_mapping(t)


def known_number(t: Any) -> int | float | bool | None:
    """The number a zero-dimensional fake tensor with a known value holds, else ``None``."""
    if isinstance(t, FakeTensor) and t.dim() == 0 and t.constant is not None:
        with unset_fake_temporarily():
            return t.constant.item()
    return None


def reads_as_median(draw: Any, low: float = 0.0, high: float = 1.0) -> None:
    """Give a one-element draw from U(low, high) on the CPU proxy its median (see module doc)."""
    if isinstance(draw, FakeTensor) and draw.numel() == 1 and draw.constant is None and draw.fake_device.type == "cpu":
        with unset_fake_temporarily():
            give_values(draw, torch.full(draw.shape, (low + high) / 2, dtype=draw.dtype))


def spread_evenly(indices: Any, dim: int | None, choices: int) -> None:
    """Give the indices ``topk`` picked along ``dim`` of ``choices`` values spread evenly over them
    (see module doc), on the CPU proxy and up to :data:`VALUE_LIMIT` elements. ``dim=None``: one
    pick per row, the picked dimension dropped (``argmax``, ``max(dim)``); row ``r`` picks ``r mod n``."""
    if (not isinstance(indices, FakeTensor) or indices.constant is not None or indices.fake_device.type != "cpu"
            or indices.numel() > VALUE_LIMIT or indices.dim() == 0 or choices < 1):
        return
    with unset_fake_temporarily():
        if dim is None:
            value = (torch.arange(indices.numel()) % choices).reshape(indices.shape).to(indices.dtype)
        else:
            moved = list(indices.movedim(dim, -1).shape)
            k = moved[-1]
            rows = indices.numel() // max(1, k)
            picks = (torch.arange(rows).unsqueeze(-1) * k + torch.arange(k)) % choices
            value = picks.reshape(moved).movedim(-1, dim).to(indices.dtype).contiguous()
        give_values(indices, torch.empty_strided(indices.shape, indices.stride(), dtype=indices.dtype).copy_(value))


def permutes_at_random(perm: Any, draw: int) -> None:
    """Give a ``randperm`` on the CPU proxy (up to :data:`VALUE_LIMIT` elements) the values of a
    random permutation, the ``draw``-th of the trace (see module doc)."""
    if (not isinstance(perm, FakeTensor) or perm.constant is not None or perm.fake_device.type != "cpu"
            or perm.numel() > VALUE_LIMIT or perm.dim() != 1):
        return
    with unset_fake_temporarily():
        generator = torch.Generator().manual_seed(draw)
        give_values(perm, torch.randperm(perm.numel(), generator=generator).to(perm.dtype))
