"""Attention-mask shortcuts that depend on the batch's values, decided on the real batch.

Hugging Face transformers builds no attention mask when the padding mask is all ones and the
positions are not packed: SDPA then runs with ``is_causal=True`` (an encoder: with no mask) and a
GPU runs its flash kernel. These checks read tensor values, which fake tensors do not have, so
transformers treats a fake tensor as a compiler trace and always builds the mask. Traced that way,
a decoder's attention became SDPA with a boolean mask and no causal flag, which a GPU runs on its
memory-efficient kernel at 1.5-2x the causal flash time. That is what happens in the common
cases: ``attention_mask`` in the batch, and ``use_cache=False``, set for training and by gradient
checkpointing.

While a step is traced, :func:`real_mask_checks` answers these checks from values: a padding mask
whose values the trace kept (the batch's own, or one the model fills itself, such as BART's
all-ones decoder mask beside a padded encoder input) by them; any other from the real batch the
trace started from, all ones when every attention mask in the batch is. Positions are packed only
when the batch's own ``position_ids`` say so. Nothing changes for a
library that is not imported, or for a batch whose values cannot be read (meta tensors).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from .batches import batch_leaves

_MASKING = "transformers.masking_utils"


class _BatchValues:
    """What the batch's values say about masks: whether any attention mask pads, whether its
    ``position_ids`` (if it has them) pack several sequences into one row."""

    def __init__(self, batch: Any) -> None:
        with unset_fake_temporarily():  # the trace's fake mode would make every answer a fake tensor
            self._read(batch)

    def _read(self, batch: Any) -> None:
        leaves = [(path, x) for path, x in batch_leaves(batch) if _readable(x)]
        named = [x for path, x in leaves if path.rsplit(".", 1)[-1] == "attention_mask"]
        # Without a name (a tuple batch), a 2-D integer or boolean tensor of only 0s and 1s is a mask
        masks = named or [x for _, x in leaves if x.dim() == 2 and _zeros_and_ones(x)]
        self.padded = any(not bool(m.bool().all()) for m in masks)
        # transformers' rule: a sequence starts wherever a position is not the previous one plus 1
        positions = [x for path, x in leaves if path.rsplit(".", 1)[-1] == "position_ids"]
        self.packed = any(bool((torch.diff(p, dim=-1) != 1).any()) for p in positions)

    def facts(self) -> str:
        return f"padded={self.padded}|packed={self.packed}"


def _readable(x: Any) -> bool:
    return (isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor) and x.device.type != "meta"
            and not x.is_floating_point() and not x.is_complex())


def _zeros_and_ones(x: torch.Tensor) -> bool:
    return x.numel() > 0 and bool(((x == 0) | (x == 1)).all())


def _pads(mask: FakeTensor, batch_pads: bool) -> bool:
    """Whether a fake padding mask pads: its own values when the trace kept them (a mask the model
    fills itself, BART's all-ones decoder mask beside a padded encoder batch, or the batch's mask
    itself), else what the batch's masks say."""
    value = getattr(mask, "constant", None)
    if isinstance(value, torch.Tensor) and value.shape == mask.shape:
        with unset_fake_temporarily():
            return not bool(value.bool().all())
    return batch_pads


def mask_facts(batch: Any) -> str:
    """What :func:`real_mask_checks` would decide for this batch (the trace cache keys on it)."""
    try:
        return _BatchValues(batch).facts()
    except Exception:  # noqa: BLE001 - values that cannot be read decide nothing
        return "unread"


# transformers' checks whose first argument is the padding mask: a causal mask (decoders) and a
# bidirectional one (encoders) can be skipped when it is all ones
_PADDING_CHECKS = ("_ignore_causal_mask_sdpa", "_ignore_bidirectional_mask_sdpa")


@contextlib.contextmanager
def real_mask_checks(batch: Any) -> Iterator[None]:
    """While active, transformers' mask shortcuts read the real batch instead of fake tensors."""
    masking = sys.modules.get(_MASKING)
    originals = {name: getattr(masking, name) for name in (*_PADDING_CHECKS, "find_packed_sequence_indices")
                 if hasattr(masking, name)}
    if not originals:
        yield
        return
    try:
        values = _BatchValues(batch)
    except Exception:  # noqa: BLE001
        yield
        return

    def padding_check(check: Any) -> Any:
        def answered(padding_mask: Any, *args: Any, **kwargs: Any) -> bool:
            if isinstance(padding_mask, FakeTensor):
                if _pads(padding_mask, values.padded):
                    return False
                padding_mask = None  # all ones: the same as none
            return check(padding_mask, *args, **kwargs)
        return answered

    def packed_sequences(position_ids: Any) -> Any:
        if isinstance(position_ids, FakeTensor) and not values.packed:
            return None  # also for positions the model makes itself (an arange): never packed
        return originals["find_packed_sequence_indices"](position_ids)

    for name, original in originals.items():
        setattr(masking, name, packed_sequences if name == "find_packed_sequence_indices" else padding_check(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(masking, name, original)
