"""Tracing a stack of identical blocks 1 and 2 deep: the same step as tracing every block."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ptp_callback import TraceError, predict_step, trace_step
from ptp_callback.repeated_blocks import extrapolate, find_run


class Block(nn.Module):
    def __init__(self, width: int, index: int = 0, index_dependent: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.index = index
        self.index_dependent = index_dependent

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.gelu(self.fc(self.norm(x)))
        if self.index_dependent and self.index % 2:
            y = y * torch.sigmoid(y)  # every other block does more work: not a repeat
        return x + y


class Stack(nn.Module):
    def __init__(self, depth: int = 8, width: int = 64, index_dependent: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Linear(32, width)
        self.blocks = nn.ModuleList(Block(width, i, index_dependent) for i in range(depth))
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def batch(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 32), torch.randint(0, 10, (n,))


def ce_step(model: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(model(b[0]), b[1])


def shortened(trace) -> bool:
    return any("identical blocks" in m for m in trace.mappings)


def work(trace) -> list[tuple]:
    """What the cost model prices, op by op (the grown optimizer ops keep shorter shape lists)."""
    return [(op.name, op.phase, op.cost, op.views, op.module_calls, op.params) for op in trace.ops]


@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-true"])
@pytest.mark.parametrize("optimizer", [
    None,  # AdamW, multi-tensor on CUDA
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),  # one op per parameter
    lambda p: torch.optim.Adam(p, fused=True),
])
def test_extrapolated_trace_equals_the_full_trace(precision, optimizer):
    model = Stack(depth=9)
    quick = trace_step(model, batch(), ce_step, optimizer, precision, target_type="cuda", trace_on="cpu")
    full = trace_step(model, batch(), ce_step, optimizer, precision, target_type="cuda", trace_on="cpu",
                      extrapolate_repeats=False)
    assert shortened(quick) and not shortened(full)
    assert work(quick) == work(full)
    assert (quick.param_count, quick.param_tensors, quick.trainable_tensors, quick.param_bytes) == (
        full.param_count, full.param_tensors, full.trainable_tensors, full.param_bytes)
    assert quick.optimizer_state_bytes == full.optimizer_state_bytes
    assert quick.peak_new_bytes == full.peak_new_bytes > 0  # each block's activations held to backward


def test_multi_tensor_launches_are_recounted_not_grown():
    # 60 blocks of 2 tensors each: AdamW's lists pass a launch's tensor limit, so the launch count
    # is not linear in the depth.
    model = Stack(depth=60, width=16)
    quick = trace_step(model, batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu")
    full = trace_step(model, batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu",
                      extrapolate_repeats=False)
    assert shortened(quick)
    launches = [op.cost.kernels for op in full.ops if op.cost.op_class == "optimizer"]
    assert max(launches) > 1
    assert work(quick) == work(full)


def test_prediction_says_how_the_step_was_traced():
    quick = predict_step(Stack(depth=12), batch(), ce_step, None, "bf16-mixed", "h100-sxm", trace_on="cpu")
    assert quick.step_s > 0
    assert any("12 identical blocks from Stack.blocks.0 on" in n for n in quick.notes)


def test_blocks_whose_work_depends_on_their_index_are_traced_in_full():
    model = Stack(depth=8, index_dependent=True)
    trace = trace_step(model, batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu")
    full = trace_step(model, batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu",
                      extrapolate_repeats=False)
    assert not shortened(trace)
    assert work(trace) == work(full)
    assert sum(op.name == "aten.sigmoid.default" for op in trace.ops) == 4


def test_validation_forward_is_extrapolated_too():
    model = Stack(depth=10)
    quick = trace_step(model, batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu", train=False)
    full = trace_step(model, batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu", train=False,
                      extrapolate_repeats=False)
    assert shortened(quick) and work(quick) == work(full)


class MaskedStack(Stack):
    """A random share of the rows replaced by a learned embedding before the blocks, the mask
    drawn with NumPy (as Wav2Vec2's SpecAugment does): the masked ops' sizes follow the draw."""

    def __init__(self, depth: int = 8) -> None:
        super().__init__(depth)
        self.mask_embed = nn.Parameter(torch.zeros(64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        mask = torch.from_numpy(np.random.rand(x.shape[0]) < np.random.uniform(0.1, 0.9))
        x = x.clone()
        x[mask] = self.mask_embed
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_a_trace_draws_what_the_step_would_draw_and_leaves_every_generator_as_it_found_it():
    model, b = MaskedStack(depth=9), batch(64)
    np.random.seed(3), random.seed(3), torch.manual_seed(3)
    quick = trace_step(model, b, ce_step, None, "32-true", target_type="cuda", trace_on="cpu")
    # The user's next draws are those they would have been without the trace.
    after = (np.random.rand(), random.random(), torch.rand(()).item())
    np.random.seed(3), random.seed(3), torch.manual_seed(3)
    assert after == (np.random.rand(), random.random(), torch.rand(()).item())
    # The one- and two-block traces drew the same mask as the full trace: the same ops, none
    # extrapolated from two different draws (which gave a sum of -27,648 bytes in Wav2Vec2).
    np.random.seed(3)
    full = trace_step(model, b, ce_step, None, "32-true", target_type="cuda", trace_on="cpu",
                      extrapolate_repeats=False)
    assert shortened(quick) and work(quick) == work(full)
    assert all(op.cost.bytes >= 0 and op.cost.flops >= 0 for op in quick.ops)


def test_an_op_that_shrank_from_one_block_to_two_is_not_extrapolated():
    trace = trace_step(Stack(depth=4), batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu",
                       extrapolate_repeats=False)
    op = next(op for op in trace.ops if op.cost.op_class == "reduction")
    smaller = dataclasses.replace(op, cost=dataclasses.replace(op.cost, bytes=op.cost.bytes / 2))
    assert extrapolate([op], [smaller], 12) is None  # traced in full instead: never negative bytes
    assert extrapolate([smaller], [op], 12)[0].cost.bytes == smaller.cost.bytes * 12


def test_short_shared_or_unlike_stacks_are_not_repeats():
    assert find_run(Stack(depth=3)) is None  # too short to save anything
    tied = Stack(depth=8)
    tied.blocks = nn.ModuleList([tied.blocks[0]] * 8)  # one block applied 8 times: shared parameters
    assert find_run(tied) is None
    hooked = Stack(depth=8)
    hooked.blocks[7].register_forward_hook(lambda module, args, out: out * 2)
    assert find_run(hooked) is None or find_run(hooked).length == 7
    strided = nn.Sequential(*[nn.Conv2d(8, 8, 3, stride=1 + (i == 5), padding=1) for i in range(8)])
    run = find_run(strided)  # same weights, but the sixth convolution has another stride
    assert run is None or run.length < 8


def test_the_model_is_restored_after_the_trace_and_after_a_failure():
    model = Stack(depth=8)
    children = list(model.blocks)
    trace_step(model, batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu")
    assert list(model.blocks) == children

    def broken(m: nn.Module, b) -> torch.Tensor:
        if len(m.blocks) < 8:
            raise RuntimeError("this step only runs the full model")
        return ce_step(m, b)

    trace = trace_step(model, batch(), broken, None, "32-true", target_type="cuda", trace_on="cpu")
    assert not shortened(trace) and list(model.blocks) == children

    def always_broken(m: nn.Module, b) -> torch.Tensor:
        raise RuntimeError("no step")

    with pytest.raises(TraceError, match="no step"):
        trace_step(model, batch(), always_broken, None, "32-true", target_type="cuda", trace_on="cpu")
    assert list(model.blocks) == children


def test_gpt2_layers_are_extrapolated_exactly():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=8, n_embd=64, n_head=4, n_positions=64, vocab_size=500)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 500, (2, 32))

    def step(m: nn.Module, b: torch.Tensor):
        return m(input_ids=b, labels=b).loss

    for precision in ("32-true", "bf16-mixed"):
        quick = trace_step(model, ids, step, None, precision, target_type="cuda", trace_on="cpu")
        full = trace_step(model, ids, step, None, precision, target_type="cuda", trace_on="cpu",
                          extrapolate_repeats=False)
        assert shortened(quick) and work(quick) == work(full)
        assert quick.peak_new_bytes == pytest.approx(full.peak_new_bytes, rel=0.01)


@torch.library.custom_op("ptp_test::block_shift", mutates_args=())
def block_shift(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@block_shift.register_fake
def _(x):
    return torch.empty_like(x)


block_shift.register_autograd(lambda ctx, grad: grad)


class ShiftedBlock(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(block_shift(x))


def test_ops_without_a_rule_are_counted_and_warned_once_for_the_whole_stack():
    model = Stack(depth=9)
    model.blocks = nn.ModuleList(ShiftedBlock(64, i) for i in range(9))
    with pytest.warns(UserWarning) as caught:
        quick = trace_step(model, batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu")
    with pytest.warns(UserWarning):
        full = trace_step(model, batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu",
                          extrapolate_repeats=False)
    assert shortened(quick)
    assert quick.unknown_ops == full.unknown_ops == {"ptp_test.block_shift.default": 9}
    assert [str(w.message) for w in caught if "no rule" in str(w.message)] == [f"ptp: {full.unknown_ops_note}"]
    assert "making 9 of" in full.unknown_ops_note
    with pytest.warns(UserWarning, match="making 9 of"):
        pred = predict_step(model, batch(), ce_step, None, "32-true", "h100-sxm", trace_on="cpu")
    assert full.unknown_ops_note in pred.warnings


class SelectingBlock(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = torch.where(x[:, 0] > 0)[0]  # rows decided by the model's numbers: taken at their largest
        return super().forward(x).index_add(0, kept, x[kept])


def test_sizes_taken_at_their_largest_are_counted_for_the_whole_stack():
    model = Stack(depth=9)
    model.blocks = nn.ModuleList(SelectingBlock(64, i) for i in range(9))
    with pytest.warns(UserWarning, match="taken at their largest"):
        quick = trace_step(model, batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu")
    with pytest.warns(UserWarning, match="taken at their largest"):
        full = trace_step(model, batch(), ce_step, None, "32-true", target_type="cuda", trace_on="cpu",
                          extrapolate_repeats=False)
    assert shortened(quick)
    assert quick.taken_largest == full.taken_largest == {"aten.nonzero.default": 9}
