"""Mixture-of-experts grouped GEMMs (``torch._grouped_mm``): traced in every precision, priced as
the GPU runs them (one grouped kernel for bf16 on Hopper, else a synchronized loop of GEMMs)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ptp_callback import get_device, predict_step, trace_step
from ptp_callback.coefficients import HOPPER
from ptp_callback.kernels import kernel_seconds, memory_seconds, streamed_seconds, wave_seconds
from ptp_callback.tracer import TraceWarning

if not hasattr(torch, "_grouped_mm"):
    pytest.skip("this PyTorch has no grouped GEMM", allow_module_level=True)

TOKENS, DIM, HIDDEN, EXPERTS, TOP_K = 64, 32, 48, 4, 2


class TinyMoE(nn.Module):
    """Top-2 routing to stacked experts' weights, as transformers' experts do it."""

    def __init__(self, dim: int = DIM, hidden: int = HIDDEN, experts: int = EXPERTS) -> None:
        super().__init__()
        self.dim, self.experts = dim, experts
        self.inp = nn.Linear(dim, dim)
        self.router = nn.Linear(dim, experts, bias=False)
        self.up = nn.Parameter(torch.randn(experts, dim, hidden) * 0.02)
        self.down = nn.Parameter(torch.randn(experts, hidden, dim) * 0.02)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        weights, experts = self.router(x).softmax(-1).topk(TOP_K, dim=-1)
        order = experts.flatten().argsort()
        rows = x[order // TOP_K]
        counts = torch.histc(experts.flatten().float(), bins=self.experts, min=0, max=self.experts - 1)
        offsets = counts.cumsum(0).to(torch.int32)
        # Grouped GEMMs are not autocast ops: callers cast to the weights' dtype (fp32 under *-mixed).
        hidden = F.silu(torch._grouped_mm(rows.to(self.up.dtype), self.up, offs=offsets))
        out = torch._grouped_mm(hidden, self.down, offs=offsets) * weights.flatten()[order, None]
        merged = torch.zeros_like(out).index_copy(0, order, out).view(-1, TOP_K, self.dim).sum(1)
        return self.head(merged)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(TOKENS, DIM), torch.randint(0, 10, (TOKENS,))


def step(model: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(model(b[0]), b[1])


def grouped(trace):
    return [op for op in trace.ops if op.name == "aten._grouped_mm.default"]


@pytest.mark.parametrize("precision, dtype", [("32-true", "fp32"), ("bf16-mixed", "fp32"), ("16-mixed", "fp32"),
                                              ("bf16-true", "bf16")])
def test_every_precision_traces_its_grouped_gemms_as_gemms_of_the_routed_rows(precision, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)  # no op left without a rule
        trace = trace_step(TinyMoE(), batch(), step, None, precision, target_type="cuda", trace_on="cpu")
    ops = grouped(trace)
    # forward: up and down; backward: each one's data and weight gradients
    assert [op.phase for op in ops] == ["forward"] * 2 + ["backward"] * 4
    assert {op.cost.op_class for op in ops} == {"gemm"} and {op.cost.dtype for op in ops} == {dtype}
    routed = TOKENS * TOP_K
    # Every routed row is multiplied once, however the router splits them: forward 2 x rows x in x out.
    assert ops[0].cost.flops == 2 * routed * DIM * HIDDEN and ops[1].cost.flops == 2 * routed * HIDDEN * DIM
    assert sum(op.cost.flops for op in ops[2:]) == 2 * sum(op.cost.flops for op in ops[:2])
    # Priced for an even split: 4 groups of 32 rows (up projection), and per-expert weight gradients.
    assert ops[0].cost.gemm == (EXPERTS, routed // EXPERTS, HIDDEN, DIM)
    weight_grads = [op for op in ops[2:] if len(op.out_shapes[0]) == 3]
    assert sorted(op.cost.gemm for op in weight_grads) == [(EXPERTS, DIM, HIDDEN, routed // EXPERTS),
                                                           (EXPERTS, HIDDEN, DIM, routed // EXPERTS)]


def test_fp32_grouped_gemms_wait_for_the_device_and_launch_a_gemm_per_expert_bf16_ones_do_not():
    loop = trace_step(TinyMoE(), batch(), step, None, "bf16-mixed", target_type="cuda", trace_on="cpu")
    fused = trace_step(TinyMoE(), batch(), step, None, "bf16-true", target_type="cuda", trace_on="cpu")

    def before_each(trace):
        return [trace.ops[trace.ops.index(op) - 1].name for op in grouped(trace)]

    assert before_each(loop) == ["ptp.sync"] * 6 and {op.cost.kernels for op in grouped(loop)} == {EXPERTS}
    assert "ptp.sync" not in before_each(fused) and {op.cost.kernels for op in grouped(fused)} == {2}


def test_bf16_grouped_gemm_is_one_kernel_on_hopper_and_a_loop_of_gemms_before_it():
    op = grouped(trace_step(TinyMoE(), batch(), step, None, "bf16-true", target_type="cuda", trace_on="cpu"))[0]
    groups, m, n, k = op.cost.gemm
    floor = HOPPER.kernel_floor_s * op.cost.kernels
    for name, one_kernel in (("h100-sxm", True), ("a100-sxm-80gb", False)):
        device = get_device(name)
        # Hopper's grouped kernel is a persistent TMA kernel: its tiles' work spreads over every SM.
        # (Either never faster than its bytes: at a copy's bandwidth for the TMA kernel.)
        body = (max(streamed_seconds(groups, m, n, k, "bf16", device, HOPPER),
                    memory_seconds(op.cost.bytes, device, HOPPER, "elementwise", "fp32")) if one_kernel
                else max(groups * wave_seconds(1, m, n, k, "bf16", device, HOPPER),
                         memory_seconds(op.cost.bytes, device, HOPPER, "gemm", "bf16")))
        assert kernel_seconds(op, device, HOPPER) == pytest.approx(floor + body)


def test_mixed_precision_experts_run_in_fp32_so_bf16_true_is_predicted_far_faster():
    with torch.device("meta"):  # large enough for the experts' GEMMs to dominate the step
        model = TinyMoE(dim=1024, hidden=4096)
    data = (torch.randn(8192, 1024), torch.randint(0, 10, (8192,)))
    mixed = predict_step(model, data, lambda m, b: F.cross_entropy(m(b[0]), b[1]), precision="bf16-mixed")
    true = predict_step(model, data, lambda m, b: F.cross_entropy(m(b[0]), b[1]), precision="bf16-true")
    gemm = {name: p.breakdown["class"]["gemm"] for name, p in (("mixed", mixed), ("true", true))}
    assert gemm["mixed"] > 5 * gemm["true"]  # fp32 SIMT GEMMs against bf16 tensor cores


# transformers 5 runs its experts as grouped GEMMs where torch has them; "eager" loops over the experts
# (transformers 4's only form), each on the tokens ``torch.where`` routes to it (``known_values.py``).
@pytest.mark.parametrize("experts", [None, "eager"])
def test_a_transformers_mixture_of_experts_model_traces_under_autocast(experts):
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "MixtralConfig"):
        pytest.skip("this transformers has no Mixtral")
    config = transformers.MixtralConfig(num_hidden_layers=1, hidden_size=64, intermediate_size=96,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                        vocab_size=128, max_position_embeddings=64)
    if experts:
        config._experts_implementation = experts
    model = transformers.MixtralForCausalLM(config)
    ids = torch.randint(0, 128, (2, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        trace = trace_step(model, {"input_ids": ids, "labels": ids}, None, None, "bf16-mixed", target_type="cuda",
                           trace_on="cpu")
    gemms = [op for op in trace.ops if "experts" in op.module and op.cost.op_class == "gemm"]
    assert sum(op.cost.flops for op in gemms) > 0
