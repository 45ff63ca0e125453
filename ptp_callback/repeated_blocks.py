"""Trace a stack of identical blocks at depth one and two instead of at its full depth.

A transformer's 12-48 layers run the same ops on the same shapes, so a full trace spends most
of its time on repeats: every op costs a fake-tensor dispatch (about half a millisecond on a
2-core host), cached shapes or not. When a model holds a run of structurally identical blocks in
one ``ModuleList`` or ``Sequential``, the step is traced twice, with the run cut to one block (A)
and to two (B). B minus A is one block's ops: its forward, its backward and its share of every
optimizer op over all parameters. The full step is A plus that difference ``run - 1`` times: the
ops B inserted are repeated, and the ops B grew (multi-tensor optimizer ops over a longer
parameter list, gradient-scaler checks, per-parameter host loops) grow linearly.

The shortcut is taken only where it is exact in structure, otherwise the full model is traced:

* the blocks have the same class, parameters, buffers, hooks and submodule tree (``repr``
  included, so a stride or a dropout rate that differs counts), and share no parameters;
* in B the second block ran the same forward ops on the same shapes as the first (a block whose
  work depends on its index, such as alternating local and global attention, fails here);
* B holds every op of A in order, and the ops that grew are priced by bytes and launches only.

The user's model is cut in place for the two traces and restored afterwards, on any exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .costs import foreach_launches

if TYPE_CHECKING:
    from .tracer import OpRecord, Trace

# Traces A and B together run two blocks more than the run's first one and every op outside the
# run twice: only worth it when that is well under the full trace (module counts as the proxy).
_MAX_COST_SHARE = 0.6
_MIN_RUN = 4
# Classes whose kernels are priced from bytes, launches and latency alone (kernels.py): an op of
# these may grow with the parameter count and still be priced exactly when extrapolated.
_GROWABLE = ("optimizer", "scaler", "elementwise", "reduction", "cast", "host", "embedding")


@dataclass(frozen=True)
class BlockRun:
    """``length`` identical consecutive children of ``container``, from child index ``start``."""

    container: torch.nn.Module
    names: tuple[str, ...]  # the container's child names, in order
    start: int
    length: int
    path: str  # the first block's module path as the tracer names it ("GPT2LMHeadModel.transformer.h.0")
    second_path: str


def _signature(module: torch.nn.Module) -> tuple:
    params = tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in module.named_parameters())
    buffers = tuple((n, tuple(b.shape), b.dtype) for n, b in module.named_buffers())
    # A hook on one block (a user's probe on the last layer, say) makes that block unlike the rest.
    hooks = tuple(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
                  + len(m._backward_pre_hooks) for m in module.modules())
    return type(module), params, buffers, hooks, repr(module)


def _modules_in(module: torch.nn.Module) -> int:
    return sum(1 for _ in module.modules())


def find_run(model: torch.nn.Module) -> BlockRun | None:
    """The run of identical blocks whose shortcut saves the most trace time, if one is worth it."""
    root = type(model).__name__
    total = _modules_in(model)
    best: tuple[float, BlockRun] | None = None
    for name, container in model.named_modules():
        if not isinstance(container, (torch.nn.ModuleList, torch.nn.Sequential)) or len(container._modules) < _MIN_RUN:
            continue
        names = tuple(container._modules)
        children = [container._modules[n] for n in names]
        signatures = [_signature(c) if c is not None else None for c in children]
        i = 0
        while i < len(children):
            j = i + 1
            while j < len(children) and signatures[j] is not None and signatures[j] == signatures[i]:
                j += 1
            length = j - i
            if signatures[i] is not None and length >= _MIN_RUN and _distinct(children[i:j]):
                block = _modules_in(children[i])
                rest = total - length * block
                share = (2 * rest + 3 * block) / max(1, total)
                if share <= _MAX_COST_SHARE and (best is None or share < best[0]):
                    prefix = f"{root}.{name}." if name else f"{root}."
                    best = (share, BlockRun(container, names, i, length, prefix + names[i], prefix + names[i + 1]))
            i = j
    return None if best is None else best[1]


def _distinct(blocks: list[torch.nn.Module]) -> bool:
    """No block appears twice and no two blocks share a parameter (tied blocks are not repeats)."""
    seen: set[int] = set()
    for block in blocks:
        ids = {id(block)} | {id(p) for p in block.parameters()}
        if ids & seen:
            return False
        seen |= ids
    return True


@contextlib.contextmanager
def cut_to(run: BlockRun, keep: int) -> Iterator[None]:
    """The container with only ``keep`` blocks of the run (the children around it stay)."""
    original = run.container._modules
    kept = run.names[:run.start + keep] + run.names[run.start + run.length:]
    run.container._modules = OrderedDict((n, original[n]) for n in kept)
    try:
        yield
    finally:
        run.container._modules = original


def trace_repeated(model: torch.nn.Module, trace: Callable[[], Trace]) -> Trace | None:
    """The full step's trace from two shortened ones, or ``None`` where the shortcut does not hold
    (see module doc); ``trace()`` traces ``model`` as it is at the time of the call."""
    started = time.perf_counter()
    run = find_run(model)
    if run is None:
        return None
    with cut_to(run, 1):
        one = trace()
    with cut_to(run, 2):
        two = trace()
    if not _same_forward(two.ops, run.path, run.second_path):
        return None
    ops = extrapolate(one.ops, two.ops, run.length)
    if ops is None:
        return None
    copies = run.length - 1

    def counts(one_deep: dict[str, int], two_deep: dict[str, int]) -> dict[str, int]:
        return {k: _extrapolated(one_deep.get(k, 0), two_deep.get(k, 0), copies) for k in two_deep}

    return dataclasses.replace(
        two, ops=ops, trace_s=time.perf_counter() - started, unknown_ops=counts(one.unknown_ops, two.unknown_ops),
        taken_largest=counts(one.taken_largest, two.taken_largest),
        numbers_read=_extrapolated(one.numbers_read, two.numbers_read, copies),
        optimizer_state_bytes=_extrapolated(one.optimizer_state_bytes, two.optimizer_state_bytes, copies),
        peak_new_bytes=_extrapolated(one.peak_new_bytes, two.peak_new_bytes, copies),
        mappings=(*two.mappings, f"{run.length} identical blocks from {run.path} on: traced 1 and 2 deep, the rest extrapolated"))


def _in_block(module: str, path: str) -> bool:
    return module == path or module.startswith(path + ".")


def _key(op: OpRecord) -> tuple:
    """An op as the diff compares it: everything but its module path and replay recipe."""
    return (op.name, op.phase, op.cost, op.in_shapes, op.in_dtypes, op.out_shapes, op.out_dtypes, op.views,
            op.module_calls, op.params)


def _work(op: OpRecord) -> tuple:
    return op.name, op.cost, op.in_shapes, op.in_dtypes, op.out_shapes, op.out_dtypes


def _same_forward(ops: list[OpRecord], first: str, second: str) -> bool:
    a = [_work(op) for op in ops if op.phase == "forward" and _in_block(op.module, first)]
    b = [_work(op) for op in ops if op.phase == "forward" and _in_block(op.module, second)]
    return bool(a) and a == b


def extrapolate(one: list[OpRecord], two: list[OpRecord], length: int) -> list[OpRecord] | None:
    """The ops of ``length`` blocks from those of one block (``one``) and of two (``two``)."""
    copies = length - 1
    matcher = difflib.SequenceMatcher(None, [_key(op) for op in one], [_key(op) for op in two], autojunk=False)
    out: list[OpRecord] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(one[i1:i2])
            continue
        # "insert" or "replace"; a "delete" (an op of one block that two blocks do not run) leaves
        # an op of ``one`` unmatched, and there is nothing to extrapolate from.
        merged = _merge(one[i1:i2], two[j1:j2], copies)
        if merged is None:
            return None
        out.extend(merged)
    return out


def _merge(old: list[OpRecord], new: list[OpRecord], copies: int) -> list[OpRecord] | None:
    """A stretch where the diff found changes: each op of ``old`` grew into the next op of ``new``
    with its name and phase; each run of ops of ``new`` left between them was inserted by the
    second block, and is repeated as a run."""
    out: list[OpRecord] = []
    pending = list(old)
    inserted: list[OpRecord] = []
    for op in new:
        if pending and (pending[0].name, pending[0].phase) == (op.name, op.phase):
            grown = _grow(pending.pop(0), op, copies)
            if grown is None:
                return None
            out.extend(inserted * copies)
            inserted = []
            out.append(grown)
        else:
            inserted.append(op)
    out.extend(inserted * copies)
    return None if pending else out


def _extrapolated(one_deep: Any, two_deep: Any, copies: int) -> Any:
    """A count or size at full depth from its values one and two blocks deep: ``copies`` more
    times the growth the second block added (a whole number stays one)."""
    value = one_deep + copies * (two_deep - one_deep)
    return round(value) if isinstance(one_deep, int) else value


def _grow(a: OpRecord, b: OpRecord, copies: int) -> OpRecord | None:
    """``a`` with every count and size moved on by ``copies`` times its growth from ``a`` to ``b``."""
    ca, cb = a.cost, b.cost
    multi_tensor = a.name.startswith("aten._foreach_") and ca.op_class == "optimizer" and len(ca.dims) == len(cb.dims) == 3
    if (ca.op_class != cb.op_class or ca.op_class not in _GROWABLE or (ca.dims != cb.dims and not multi_tensor)
            or ca.gemm != cb.gemm or ca.gemms != cb.gemms or ca.dtype != cb.dtype):
        return None

    if any(y < x for x, y in ((ca.flops, cb.flops), (ca.bytes, cb.bytes), (ca.kernels, cb.kernels))):
        # An op that shrank from one block to two did not grow with the blocks: its size came from
        # something else (a random mask drawn differently), and a line through it goes negative.
        return None

    def step(x: Any, y: Any) -> Any:
        return _extrapolated(x, y, copies)

    dims = tuple(step(x, y) for x, y in zip(ca.dims, cb.dims))
    # A multi-tensor op's launches follow its tensor and chunk counts in steps: recounted, not grown.
    kernels = foreach_launches(a.name, *dims) if multi_tensor else step(ca.kernels, cb.kernels)
    cost = dataclasses.replace(cb, flops=step(ca.flops, cb.flops), bytes=step(ca.bytes, cb.bytes), kernels=kernels,
                               dims=dims, aux_bytes=step(ca.aux_bytes, cb.aux_bytes),
                               layout_bytes=step(ca.layout_bytes, cb.layout_bytes))
    # The shapes stay those of two blocks (a list of shapes cannot be extrapolated), so the op
    # cannot be replayed at its full size: no replay recipe.
    return dataclasses.replace(b, cost=cost, views=step(a.views, b.views), module_calls=step(a.module_calls, b.module_calls),
                               params=step(a.params, b.params), replay=None)
