"""The tracer: what a traced step contains under each precision, and what it must not touch."""

from __future__ import annotations

import logging
import resource
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ptp_callback import PrecisionSpec, TraceError, trace_step


def mlp(width: int = 64) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, width), nn.GELU(), nn.Linear(width, width), nn.GELU(), nn.Linear(width, 10))


def mlp_batch(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 32), torch.randint(0, 10, (n,))


def ce_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def names(trace, phase: str | None = None) -> list[str]:
    return [op.name for op in trace.ops if phase is None or op.phase == phase]


def gemm_ops(trace):
    return [op for op in trace.ops if op.cost.op_class == "gemm"]


def test_phases_and_module_paths():
    trace = trace_step(mlp(), mlp_batch(), ce_step, None, "32-true", target_type="cpu")
    assert {op.phase for op in trace.ops} == {"forward", "backward", "optimizer"}
    forward_gemms = [op for op in gemm_ops(trace) if op.phase == "forward"]
    assert len(forward_gemms) == 3  # three Linear layers
    assert forward_gemms[0].module.endswith(".0") and forward_gemms[2].module.endswith(".4")
    # backward: grad input for layers 2 and 3, grad weight for all three -> 5 matmuls
    assert len([op for op in gemm_ops(trace) if op.phase == "backward"]) == 5


def test_bf16_mixed_runs_matmuls_in_bf16_and_casts():
    trace = trace_step(mlp(), mlp_batch(), ce_step, None, "bf16-mixed", target_type="cpu")
    forward_gemms = [op for op in gemm_ops(trace) if op.phase == "forward"]
    assert all(op.cost.dtype == "bf16" for op in forward_gemms)
    casts = [op for op in trace.ops if op.cost.op_class == "cast"]
    # The first Linear casts its input, weight and bias to bf16 (3); the other two only weight and
    # bias, their input being already bf16 (2 + 2); CPU autocast runs the loss in fp32 (1): 8.
    assert len([op for op in casts if op.phase == "forward"]) == 8
    assert any(op.phase == "backward" for op in casts)  # and the gradients back to fp32


def test_bf16_true_has_bf16_parameters_and_no_casts():
    trace = trace_step(mlp(), mlp_batch(), ce_step, None, "bf16-true", target_type="cpu")
    assert all(op.cost.dtype == "bf16" for op in gemm_ops(trace))
    assert "bf16" in gemm_ops(trace)[0].in_dtypes
    assert not [op for op in trace.ops if op.cost.op_class == "cast" and op.phase == "forward"]


class _NoisyInput(nn.Module):
    """Adds noise it makes in its forward without a dtype: the default dtype's."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(32, 10)

    def forward(self, x):
        return self.linear(torch.cat([x, torch.rand(x.shape)], dim=1))


@pytest.mark.parametrize("precision, dtype", [("bf16-true", "bf16"), ("64-true", "fp64")])
def test_a_true_precision_makes_the_forwards_new_tensors_in_its_dtype_as_lightning_does(precision, dtype):
    batch = (torch.randn(8, 16), torch.randint(0, 10, (8,)))
    trace = trace_step(_NoisyInput(), batch, ce_step, None, precision, target_type="cpu")
    assert [(op.name, op.cost.dtype) for op in trace.ops if op.phase == "forward"][:3] == [
        ("aten.rand.default", dtype), ("aten.cat.default", dtype), ("aten.addmm.default", dtype)]
    assert torch.get_default_dtype() == torch.float32  # and the default is as it was after the trace


def test_16_mixed_traces_grad_scaler():
    trace = trace_step(mlp(), mlp_batch(), ce_step, None, "16-mixed", target_type="cpu")
    optimizer_ops = names(trace, "optimizer")
    assert "aten._amp_foreach_non_finite_check_and_unscale_.default" in optimizer_ops
    assert "aten._amp_update_scale_.default" in optimizer_ops
    assert "ptp.sync" in optimizer_ops  # found_inf.item() makes the host wait
    assert all(op.cost.dtype == "fp16" for op in gemm_ops(trace) if op.phase == "forward")


def test_cuda_proxy_uses_cuda_autocast_policy_and_foreach_optimizer():
    model = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.Linear(64, 10))
    # trace_on="cpu": the proxy itself, also on a machine with a GPU (where "auto" traces on it).
    trace = trace_step(model, mlp_batch(), ce_step, None, "bf16-mixed", target_type="cuda", trace_on="cpu")
    layer_norms = [op for op in trace.ops if op.name == "aten.native_layer_norm.default"]
    assert layer_norms and layer_norms[0].in_dtypes[0] == "fp32"  # CUDA autocast runs layer_norm in fp32
    assert [op for op in trace.ops if op.phase == "optimizer" and op.name.startswith("aten._foreach_")]
    assert "autocast: CUDA cast policy replayed on CPU" in trace.mappings
    cpu_trace = trace_step(model, mlp_batch(), ce_step, None, "bf16-mixed", target_type="cpu")
    cpu_norm = [op for op in cpu_trace.ops if op.name == "aten.native_layer_norm.default"][0]
    assert cpu_norm.in_dtypes[0] == "bf16"  # CPU autocast keeps bf16: the proxy must not leak


def test_flops_match_flop_counter_mode():
    model, batch = mlp(256), mlp_batch(64)
    with FlopCounterMode(display=False) as counter:
        ce_step(model, batch).backward()
    model.zero_grad(set_to_none=True)
    trace = trace_step(model, batch, ce_step, None, "32-true", target_type="cpu")
    assert sum(op.cost.flops for op in trace.ops) == counter.get_total_flops()


def test_convnet_flops_match_flop_counter_mode_and_batch_norm_is_traced():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    batch = (torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))
    with FlopCounterMode(display=False) as counter:
        ce_step(model, batch).backward()
    model.zero_grad(set_to_none=True)
    buffers_before = {k: v.clone() for k, v in model.named_buffers()}
    trace = trace_step(model, batch, ce_step, None, "32-true", target_type="cpu")
    assert sum(op.cost.flops for op in trace.ops) == counter.get_total_flops()
    classes = {(op.phase, op.cost.op_class) for op in trace.ops}
    assert ("forward", "batch_norm_native") in classes or ("forward", "batch_norm") in classes
    assert any(op.cost.op_class.startswith("batch_norm") and op.phase == "backward" for op in trace.ops)
    for name, value in model.named_buffers():  # running stats and num_batches_tracked untouched
        assert torch.equal(value, buffers_before[name])


def test_an_upsampling_decoders_transposed_convolutions_are_traced_as_the_passes_cuda_runs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(), nn.ConvTranspose2d(32, 16, 2, stride=2),
                          nn.ReLU(), nn.Conv2d(16, 1, 1))
    batch = (torch.randn(4, 3, 32, 32), torch.randn(4, 1, 32, 32))
    with FlopCounterMode(display=False) as counter:
        F.mse_loss(model(batch[0]), batch[1]).backward()
    model.zero_grad(set_to_none=True)
    trace = trace_step(model, batch, lambda m, b: F.mse_loss(m(b[0]), b[1]), None, "bf16-true", target_type="cuda",
                       trace_on="cpu")
    assert sum(op.cost.flops for op in trace.ops) == counter.get_total_flops()
    upsampling = [op for op in trace.ops if op.cost.op_class == "conv" and (32, 16, 2, 2) in op.in_shapes[:3]]
    assert [op.cost.passes for op in upsampling] == [("dgrad",), ("fwd", "wgrad")]
    # Each pass's GEMM does the layer's own multiply-adds: 16 x 16 output pixels, one tap each.
    for op in upsampling:
        assert sum(2 * b * m * n * k for b, m, n, k in op.cost.gemms) == op.cost.flops


def test_transformer_flops_are_six_params_tokens():
    transformers = pytest.importorskip("transformers")
    # No attention dropout: with it, CPU SDPA falls back to bmm-based math and adds attention FLOPs.
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64, vocab_size=256,
                                     attn_pdrop=0.0, attn_implementation="sdpa")
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 256, (2, 32))
    trace = trace_step(model, (ids,), lambda m, b: m(input_ids=b[0], labels=b[0]).loss, None, "32-true",
                       target_type="cpu")
    tokens = ids.numel()
    # Matmul weights: per layer c_attn 64x192, attn c_proj 64x64, c_fc 64x256, mlp c_proj 256x64,
    # plus the LM head tied to the 256x64 embedding. Each weight costs 2 FLOPs per token forward
    # and 4 backward (grad input + grad weight): 6 x 12,288 x 2 layers... summed below.
    per_layer = 64 * 192 + 64 * 64 + 64 * 256 + 256 * 64  # 49,152
    matmul_params = 2 * per_layer + 256 * 64  # 114,688
    gemm_flops = sum(op.cost.flops for op in gemm_ops(trace))
    assert gemm_flops == 6 * matmul_params * tokens  # 6 x 114,688 x 64 = 44,040,192


def test_tied_weights_share_one_fake_and_one_optimizer_slot():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=32, vocab_size=128)
    model = transformers.GPT2LMHeadModel(config)
    assert model.lm_head.weight is model.transformer.wte.weight
    trace = trace_step(model, (torch.randint(0, 128, (2, 16)),), lambda m, b: m(input_ids=b[0], labels=b[0]).loss,
                       None, "32-true", target_type="cuda")
    unique = len(list(dict.fromkeys(model.parameters())))
    named = len(list(model.named_parameters(remove_duplicate=False)))
    assert named == unique + 1  # the LM head is listed under its own name too
    assert trace.param_tensors == unique
    sqrt = [op for op in trace.ops if op.name.startswith("aten._foreach_sqrt")]
    assert sqrt and len(sqrt[0].in_shapes) == unique  # one optimizer slot per unique tensor


def test_user_model_and_optimizer_are_untouched():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trace = trace_step(model, mlp_batch(), ce_step, optimizer, "bf16-mixed", target_type="cpu")
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])
    assert all(p.grad is None for p in model.parameters())
    assert optimizer.state_dict()["state"] == {}
    assert trace.optimizer_name == "SGD"
    assert model.training  # mode restored


class Memoizing(nn.Module):
    """Keeps what its forward computes: a cached table, a lazily registered buffer, a memo dict, a log."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.table = None
        self.memo: dict[int, torch.Tensor] = {}
        self.seen: list[str] = []

    def forward(self, x):
        if self.table is None:
            self.table = torch.sin(torch.arange(x.shape[-1], dtype=x.dtype))
        if "scale" not in self._buffers:
            self.register_buffer("scale", torch.ones(8))
        self.memo.setdefault(x.shape[0], x.mean(0))
        self.seen.append(type(x).__name__)
        return self.linear(x) * self.scale + self.table + self.memo[x.shape[0]]


def test_what_a_traced_forward_keeps_on_its_modules_is_put_back():
    # Kept, the fake tensors would be what the real step computes with afterwards.
    model = Memoizing()
    trace_step(model, (torch.randn(4, 8),), lambda m, b: m(b[0]).sum(), None, "32-true", target_type="cpu")
    assert model.table is None and "scale" not in model._buffers and model.memo == {} and model.seen == []
    loss = model(torch.randn(4, 8)).sum()
    loss.backward()
    assert type(loss) is torch.Tensor and type(model.linear.weight.grad) is torch.Tensor


def test_meta_model_with_cpu_batch_and_no_real_memory():
    # 50,000 x 20,000 fp32 = 4 GB of weights (12 GB with AdamW state): only fakes may exist.
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(20_000, 50_000), nn.ReLU(), nn.Linear(50_000, 10))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    trace = trace_step(model, (torch.randn(4, 20_000), torch.randint(0, 10, (4,))), ce_step, None, "32-true")
    rss_growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert trace.param_count == 20_000 * 50_000 + 50_000 + 50_000 * 10 + 10
    assert rss_growth_mb < 500
    assert all(p.device.type == "meta" for p in model.parameters())


def test_no_device_memory_is_allocated_on_a_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model = mlp().cuda()
    allocated = torch.cuda.memory_allocated()
    trace_step(model, tuple(t.cuda() for t in mlp_batch()), ce_step, None, "bf16-mixed")
    assert torch.cuda.memory_allocated() == allocated


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return h[: 1 + int((h.detach() > 0).sum()) % 4].sum()  # Python reads a count the model's numbers decide


def test_untraceable_model_names_the_op():
    with pytest.raises(TraceError, match=r"could not trace the training step: .*aten\._local_scalar_dense.*"
                                         r"DataDependent\.proj|DataDependent, forward") as failed:
        trace_step(DataDependent(), (torch.randn(4, 8),), lambda m, b: m(*b), None, "32-true")
    # and says why such an op cannot be traced
    assert "reads an integer or a truth value its model's numbers decide" in str(failed.value)


class Mismatched(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.scale).sum()  # (4, 8) x (8, 3): a meta kernel raises


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_sparse_embedding_gradient_stays_sparse_for_an_optimizer_that_needs_it():
    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(5000, 16, sparse=True)

        def forward(self, ids):
            return self.embedding(ids).mean(1)

    batch = (torch.randint(0, 5000, (8, 4)), torch.randint(0, 10, (8,)))
    trace = trace_step(Bag(), batch, ce_step, lambda params: torch.optim.SparseAdam(params), "32-true")
    assert any(op.name.startswith("aten._sparse_coo_tensor") and op.phase == "backward" for op in trace.ops)


class Flex(nn.Module):
    def __init__(self, block_mask=None) -> None:
        super().__init__()
        self.qkv = nn.Linear(64, 192)
        self.block_mask = block_mask

    def forward(self, x):
        flex = pytest.importorskip("torch.nn.attention.flex_attention")
        q, k, v = self.qkv(x).view(2, 256, 3, 4, 16).permute(2, 0, 3, 1, 4)
        block_mask = self.block_mask
        if callable(block_mask):  # a mask_mod: the mask is built in the step, as Hugging Face builds it
            block_mask = flex.create_block_mask(block_mask, None, None, 256, 256, device=x.device)
        return flex.flex_attention(q, k, v, block_mask=block_mask).mean((1, 2))


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_flex_attention_is_recorded_as_one_fused_kernel_for_a_gpu_target(precision):
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    batch = (torch.randn(2, 256, 64), torch.randint(0, 10, (2,)))
    dense = trace_step(Flex(), batch, ce_step, None, precision, target_type="cuda", trace_on="cpu")
    forward, backward = [op for op in dense.ops if op.cost.op_class == "attention"]
    assert (forward.name, backward.name) == ("ptp.flex_attention", "ptp.flex_attention_backward")
    assert forward.cost.dims == (2, 4, 4, 256, 256, 16, 16)
    assert forward.cost.dtype == ("bf16" if precision == "bf16-mixed" else "fp32")
    # SDPA's formula: two GEMMs of 2 x 4 heads, 256 x 16 @ 16 x 256 and 256 x 256 @ 256 x 16.
    assert forward.cost.flops == 2 * (2 * 2 * 4 * 256 * 256 * 16)
    # A causal block mask built before the step (two 128-token blocks a side): 3 of 4 block pairs run.
    # Built in the step, its block counts are fake: its mask_mod, evaluated on real positions, says
    # the same. Two documents of 128 tokens, each attending within itself: 2 of 4.
    causal = flex.create_block_mask(lambda b, h, q, kv: q >= kv, None, None, 256, 256, device="cpu")
    documents = lambda b, h, q, kv: q // 128 == kv // 128  # noqa: E731
    for mask, share in ((causal, 0.75), (lambda b, h, q, kv: q >= kv, 0.75), (documents, 0.5)):
        masked = trace_step(Flex(mask), batch, ce_step, None, precision, target_type="cuda", trace_on="cpu")
        assert [op.cost.flops for op in masked.ops if op.cost.op_class == "attention"] == [
            share * forward.cost.flops, share * backward.cost.flops]
    # The trace's stand-ins are gone: FlexAttention is the user's own again.
    assert flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG is False
    assert flex.flex_attention_hop is torch._higher_order_ops.flex_attention


def test_flex_attention_for_a_cpu_target_is_one_clear_error_that_names_the_models_line():
    pytest.importorskip("torch.nn.attention.flex_attention")
    # Raised by Python code, not by an op: the error names the model's line that called it.
    with pytest.raises(TraceError, match=r"outside any aten op \(test_tracer\.py:\d+: `return flex\.flex_attention"
                                         r".*fails the same way when it runs on this CPU"):
        trace_step(Flex(), (torch.randn(2, 256, 64), torch.randint(0, 10, (2,))), ce_step, None, "32-true",
                   target_type="cpu")


def test_a_step_function_that_runs_its_own_backward_is_told_what_to_do_instead():
    def steps_itself(model, batch):
        loss = ce_step(model, batch)
        loss.backward()
        return loss

    with pytest.raises(TraceError, match=r"ran the backward itself: return the loss .* ptp\.ManualOptimization"):
        trace_step(mlp(), mlp_batch(), steps_itself, None, "32-true")


def test_a_step_whose_random_branch_skips_every_layer_says_why_its_loss_has_no_gradient():
    class LayerDrop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(32, 32) for _ in range(2))

        def forward(self, x):
            for layer in self.layers:
                if torch.rand([]) >= 0.6:  # kept with probability 0.4: the median draw skips it
                    x = layer(x)
            return x.square().mean()

    with pytest.raises(TraceError, match=r"loss depends on no trained parameter.*LayerDrop"):
        trace_step(LayerDrop(), (torch.randn(4, 32),), lambda m, b: m(b[0]), None, "32-true")


def test_a_batch_the_default_step_cannot_pass_to_the_model_says_how_to_give_a_step_function():
    # The default step calls model(*batch): a Sequential takes one input, the batch holds two.
    with pytest.raises(TraceError, match=r"takes 2 positional arguments but 3 were given -- .* the default step is "
                                         r"model\(\*batch\)"):
        trace_step(mlp(), mlp_batch(), None, None, "32-true")


def test_a_step_that_returns_no_scalar_loss_is_traced_from_its_sum_and_says_so():
    logits = trace_step(mlp(), mlp_batch(), lambda m, b: m(b[0]), None, "32-true")
    assert "the step returned a tensor of shape (8, 10), not a scalar loss" in " ".join(logits.mappings)
    assert any(op.name == "aten.sum.default" for op in logits.ops)
    loss = trace_step(mlp(), mlp_batch(), ce_step, None, "32-true")
    assert not any("not a scalar loss" in note for note in loss.mappings)


def test_an_optimizer_that_needs_a_closure_is_one_clear_error():
    with pytest.raises(TraceError, match=r"LBFGS.step\(\) needs a closure"):
        trace_step(mlp(), mlp_batch(), ce_step, lambda params: torch.optim.LBFGS(params), "32-true")


def test_an_op_that_fails_in_the_trace_is_one_error_not_a_logged_traceback():
    logger = logging.getLogger("torch._subclasses.fake_tensor")  # torch's loggers do not propagate
    records, level = Records(), logger.level
    logger.addHandler(records)
    try:
        with pytest.raises(TraceError, match=r"aten\.mul\.Tensor .*Mismatched"):
            trace_step(Mismatched(), (torch.randn(4, 8),), lambda m, b: m(*b), None, "32-true")
    finally:
        logger.removeHandler(records)
    assert not [r for r in records.records if r.levelno >= logging.ERROR]
    assert logger.level == level


def test_eval_trace_is_forward_only():
    trace = trace_step(mlp(), mlp_batch(), ce_step, None, "32-true", target_type="cpu", train=False)
    assert {op.phase for op in trace.ops} == {"forward"}


def test_cuda_trace_on_a_gpu_matches_the_cpu_proxy():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.Linear(64, 10))
    on_gpu = trace_step(model.cuda(), tuple(t.cuda() for t in mlp_batch()), ce_step, None, "bf16-mixed",
                        trace_on="target")
    proxy = trace_step(model, mlp_batch(), ce_step, None, "bf16-mixed", target_type="cuda", trace_on="cpu")
    # The same matrix work, in the same dtypes (the proxy maps CPU's kernels to CUDA's).
    assert sum(op.cost.flops for op in on_gpu.ops) == sum(op.cost.flops for op in proxy.ops)
    assert sorted(op.cost.dtype for op in on_gpu.ops if op.cost.op_class == "gemm") == \
        sorted(op.cost.dtype for op in proxy.ops if op.cost.op_class == "gemm")


class RecurrentLM(nn.Module):
    def __init__(self, cell: type[nn.Module] = nn.LSTM, bidirectional: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.rnn = cell(16, 32, num_layers=2, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(64 if bidirectional else 32, 100)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.emb(ids))[0])


def lm_step(model: nn.Module, batch: tuple[torch.Tensor]) -> torch.Tensor:
    logits = model(batch[0])
    return F.cross_entropy(logits.flatten(0, 1), batch[0].flatten())


def test_recurrent_layer_is_one_cudnn_call_forward_and_backward():
    trace = trace_step(RecurrentLM(bidirectional=True), (torch.randint(0, 100, (4, 10)),), lm_step, None, "32-true")
    rnn = [op for op in trace.ops if op.cost.op_class == "recurrent"]
    assert [op.name for op in rnn] == ["aten._cudnn_rnn.default", "aten._cudnn_rnn_backward.default"]
    assert rnn[0].cost.dims == (4, 2, 2, 4, 10, 16, 32, 0)  # gates, layers, directions, batch, seq, in, hidden, proj
    assert rnn[0].cost.dtype == "tf32"  # cuDNN's TF32 flag is on by default
    # Per layer and direction 2 x batch x seq x gates x hidden x (input + hidden) FLOPs:
    # 2 x 4 x 10 x 4 x 32 x 2 directions = 20,480, times (16 + 32) + (64 + 32) = 144 -> 2,949,120.
    assert rnn[0].cost.flops == 2_949_120 and rnn[1].cost.flops == 2 * 2_949_120
    assert not [op for op in trace.ops if "lstm" in op.name or "mkldnn" in op.name]


def test_recurrent_layer_under_autocast_runs_in_fp16_with_its_casts():
    trace = trace_step(RecurrentLM(nn.GRU), (torch.randint(0, 100, (4, 10)),), lm_step, None, "bf16-mixed")
    forward = [op for op in trace.ops if op.phase == "forward"]
    rnn = next(op for op in forward if op.cost.op_class == "recurrent")
    assert rnn.cost.dtype == "fp16"  # PyTorch's cuDNN RNN autocast casts to fp16, whatever the autocast dtype
    # The input, the initial hidden state and the 8 weights and biases of 2 layers are cast first.
    casts = [op for op in forward[: forward.index(rnn)] if op.cost.op_class == "cast" and op.out_dtypes == ("fp16",)]
    assert len(casts) == 10


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true"])
def test_grouped_query_attention_is_one_fused_kernel(precision):
    class GQA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(()))

        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q * self.scale, k, v, is_causal=True, enable_gqa=True)

    q = torch.randn(2, 8, 16, 32, requires_grad=True)
    k, v = (torch.randn(2, 2, 16, 32, requires_grad=True) for _ in range(2))
    trace = trace_step(GQA(), (q, k, v), lambda m, b: m(*b).sum(), None, precision)
    attention = [op for op in trace.ops if op.cost.op_class == "attention"]
    if precision == "32-true":
        # fp32 grouped-query attention has no fused CUDA kernel (PyTorch 2.11): the math path runs.
        assert not attention and any(op.name == "aten.bmm.default" for op in trace.ops)
        return
    assert [op.cost.backward for op in attention] == [False, True]
    assert attention[0].cost.dims == (2, 8, 2, 16, 16, 32, 32) and attention[0].cost.causal
    # Key/value heads broadcast to the 8 query heads: two batched GEMMs of 2 x 8 = 16 matrices,
    # 16 x 32 @ 32 x 16 and 16 x 16 @ 16 x 32: 2 x (2 x 16 x 16 x 16 x 32) = 524,288 FLOPs.
    assert attention[0].cost.flops == 524_288


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_trained_attention_bias_gets_its_gradient_from_the_fused_kernel_and_an_optimizer_update(precision):
    # A relative-position bias passed as SDPA's mask (timm's BEiT, MaxViT, relative-position ViTs):
    # the memory-efficient kernel's backward writes its gradient for every (batch, head) score,
    # autograd sums it over the batch, and the optimizer updates it like every other parameter.
    class BiasedAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(32, 96)
            self.bias = nn.Parameter(torch.zeros(4, 16, 16))

        def forward(self, x):
            q, k, v = self.qkv(x).view(2, 16, 3, 4, 8).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias.unsqueeze(0))

    model = BiasedAttention()
    trace = trace_step(model, torch.randn(2, 16, 32), lambda m, x: m(x).float().square().mean(),
                       torch.optim.AdamW(model.parameters(), foreach=False), precision)
    forward, backward = [op for op in trace.ops if op.cost.op_class == "attention"]
    assert forward.cost.kernel == backward.cost.kernel == "efficient"
    assert forward.in_shapes[3] == (1, 4, 16, 16)  # the kernel reads the bias
    assert (2, 4, 16, 16) in backward.out_shapes  # and writes its gradient for the whole batch
    after = trace.ops[trace.ops.index(backward) + 1:]
    assert any(op.name == "aten.sum.dim_IntList" and op.out_shapes == ((1, 4, 16, 16),) for op in after)
    # AdamW without foreach updates each parameter with its own ops: the bias's (4, 16, 16) among them.
    updated = {shape for op in trace.ops if op.phase == "optimizer" for shape in op.in_shapes}
    assert (4, 16, 16) in updated


def test_unfolded_blocks_channel_shuffles_and_embedding_bags_have_cost_rules():
    class Blocks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(4, 8, 3, padding=1)
            self.shuffle = nn.ChannelShuffle(2)
            self.bag = nn.EmbeddingBag(50, 8, mode="mean")

        def forward(self, x, ids):
            blocks = self.shuffle(self.conv(x)).unfold(2, 4, 4).unfold(3, 4, 4)  # HaloAttn's blocks
            return blocks.mean((2, 3, 4, 5)) + self.bag(ids)

    batch = (torch.randn(2, 4, 16, 16), torch.randint(0, 50, (2, 5)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the note on ops without a rule is a warning
        trace = trace_step(Blocks(), batch, lambda m, b: m(*b).square().mean(), None, "32-true")
    assert not trace.unknown_ops_note
    assert "aten.unfold_backward.default" in names(trace, "backward")


@pytest.mark.parametrize("allow_tf32", [True, False])
def test_a_32_true_trace_says_when_its_convolutions_run_in_tf32(allow_tf32):
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.LazyLinear(4))
    batch = (torch.randn(2, 3, 8, 8), torch.randint(0, 4, (2,)))
    model(batch[0])  # the lazy layer's shape
    note = "fp32 convolutions run in TF32 (torch.backends.cudnn.allow_tf32, on by default)"
    precision = PrecisionSpec.from_setting("32-true", conv_tf32=allow_tf32)
    trace = trace_step(model, batch, ce_step, None, precision, target_type="cuda", trace_on="cpu")
    assert (note in trace.mappings) == allow_tf32
    # Under autocast the convolutions run in bf16: nothing to say.
    assert note not in trace_step(model, batch, ce_step, None, "bf16-mixed", target_type="cuda",
                                  trace_on="cpu").mappings


def test_a_complex_matrix_product_is_charged_four_real_multiply_adds_each():
    # A Fourier neural operator's spectral weights: complex64 batched products, cuBLAS's cgemm.
    class Spectral(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(8, 16, 16, dtype=torch.cfloat))

        def forward(self, x):
            return torch.bmm(x, self.weight).abs().sum()

    x = torch.randn(8, 32, 16, dtype=torch.cfloat)
    trace = trace_step(Spectral(), (x,), lambda m, b: m(b[0]), None, "32-true", target_type="cuda", trace_on="cpu")
    forward = next(op for op in trace.ops if op.name == "aten.bmm.default" and op.phase == "forward")
    assert forward.cost.flops == 4 * (2 * 8 * 32 * 16 * 16) and forward.cost.dtype == "fp32"


def test_the_math_paths_safe_softmax_is_charged_its_four_passes():
    # fp32 grouped-query attention runs the unfused math path; its _safe_softmax is, in eager
    # PyTorch, softmax + eq(-inf) + all + where: four kernels over the 2 x 8 x 16 x 16 scores.
    q = torch.randn(2, 8, 16, 32)
    k, v = (torch.randn(2, 2, 16, 32) for _ in range(2))
    trace = trace_step(nn.Identity(), (q, k, v), lambda m, b: F.scaled_dot_product_attention(
        *m(b), is_causal=True, enable_gqa=True), None, "32-true", train=False)
    (softmax,) = [op for op in trace.ops if op.name == "aten._safe_softmax.default"]
    scores = 2 * 8 * 16 * 16
    # read: softmax 4 B, eq 4 B, all 1 B per score, where 4 B (+ the row mask); written: 4 + 1 + 4 B
    assert softmax.cost.kernels == 4
    assert softmax.cost.bytes == (4 + 4 + 1 + 4) * scores + 2 * 2 * 8 * 16 + (4 + 1 + 4) * scores


@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_is_charged_the_kernels_cuda_launches_for_it(affine):
    # CUDA's group norm (group_norm_kernel.cu) computes each group's moments, folds an affine
    # weight and bias into a scale and shift per channel, then normalizes: 3 kernels (2 without
    # weights). Backward: per-channel sums, the weight times rstd, per-group coefficients, the
    # input's gradient, then the weight's and bias's gradients in one kernel: 5 (3 without).
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(4, 8, affine=affine), nn.SiLU())
    trace = trace_step(model, torch.randn(2, 3, 16, 16), lambda m, x: m(x).square().mean(), None, "32-true")
    (forward,) = [op for op in trace.ops if op.name == "aten.native_group_norm.default"]
    (backward,) = [op for op in trace.ops if op.name == "aten.native_group_norm_backward.default"]
    assert (forward.cost.kernels, backward.cost.kernels) == ((3, 5) if affine else (2, 3))


def test_ops_the_cost_model_does_not_know_are_reported():
    @torch.library.custom_op("ptp_test::shift", mutates_args=())
    def shift(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    @shift.register_fake
    def _(x):
        return torch.empty_like(x)

    model = nn.Linear(32, 10)
    with pytest.warns(UserWarning, match=r"no rule for 1 op\(s\) making 1 of \d+ recorded ops .*ptp_test\.shift"):
        trace = trace_step(model, mlp_batch(), lambda m, b: F.cross_entropy(m(shift(b[0])), b[1]), None, "32-true")
    assert trace.unknown_ops == {"ptp_test.shift.default": 1}
    unknown = next(op for op in trace.ops if op.name == "ptp_test.shift.default")
    assert unknown.cost.bytes == 2 * 8 * 32 * 4  # priced by what it reads and writes, never as free


@pytest.mark.parametrize("activation", [nn.Hardswish(inplace=True), nn.Hardsigmoid(), nn.SiLU(inplace=True),
                                        nn.Mish(), nn.ELU(), nn.LeakyReLU(), nn.Hardtanh()])
def test_common_activations_and_their_backwards_are_known_ops(activation):
    model = nn.Sequential(nn.Linear(32, 64), activation, nn.Linear(64, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = trace_step(model, mlp_batch(), lambda m, b: F.cross_entropy(m(b[0]), b[1]), None, "32-true")
    assert trace.unknown_ops == {}


@pytest.mark.parametrize("make", [
    lambda x: x.clone().as_strided_((8, 32), (32, 1)),  # in-place metadata change (Swin's window reshapes)
    lambda x: torch.polar(x.abs(), x).real,  # complex rotary embeddings (Llama 4)
    lambda x: x + torch.floor_divide(x.detach(), 3.0),  # a router's ``positions // top_k``
    lambda x: torch.zeros_like(x).index_copy(0, torch.arange(8), x),
    lambda x: x + torch.empty_like(x).exponential_(),  # Gumbel noise of a sampling router
    # position embeddings resized to another image size (CrossViT, Hiera, NaFlexViT)
    lambda x: F.interpolate(x.view(2, 4, 4, 8), size=(6, 12), mode="bicubic"),
    lambda x: F.interpolate(x.view(2, 4, 4, 8), size=(2, 4), mode="bilinear", antialias=True),
    lambda x: F.pad(x.view(2, 4, 4, 8), (1, 1, 1, 1), mode="reflect"),  # TResNet
    # RAFT's correlation lookup
    lambda x: F.grid_sample(x.view(2, 4, 4, 8), torch.zeros(2, 3, 3, 2), align_corners=False),
    lambda x: F.hardshrink(x),
    lambda x: F.adaptive_avg_pool3d(x.view(2, 4, 2, 4, 4), 2),
    lambda x: torch.fft.rfft(x, dim=-1).abs(),  # FNet, Fourier neural operators
    lambda x: F.smooth_l1_loss(x, torch.zeros_like(x)),
    # the chunked gated delta rule of linear attention (Qwen3-Next) solves small triangular systems
    lambda x: torch.linalg.solve_triangular(torch.eye(8) + x.view(4, 8, 8).tril(-1), x.view(4, 8, 8), upper=False),
    lambda x: torch.diagonal_copy(x.view(8, 32)),  # a view's copying twin (torchmetrics' confusion matrices)
    # nn.Embedding(max_norm=1.0) rescales the rows it looks up, in place
    lambda x: x + F.embedding(torch.tensor([0, 3]), x.detach().view(8, 32).clone(), max_norm=1.0).sum(),
])
def test_ops_that_models_we_met_use_are_known(make):
    model = nn.Linear(32, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = trace_step(model, mlp_batch(), lambda m, b: make(m(b[0])).sum(), None, "32-true")
    assert trace.unknown_ops == {}


def test_bilinear_layers_and_pairwise_distances_are_priced_as_the_gemms_they_run():
    def contractions(model, batch, step):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no op without a rule
            trace = trace_step(model, batch, step, None, "32-true", target_type="cuda")
        return [(op.phase, op.cost.op_class, op.cost.flops, op.cost.gemm) for op in trace.ops
                if op.name.split(".")[1] in ("_trilinear", "_euclidean_dist")]

    # nn.Bilinear(32, 48, 16) on 8 rows: x1 @ W as an (8 x 32) by (32 x 16*48) GEMM, then each
    # row's 16 x 48 result with x2; its weight gradient an outer product per row, then a GEMM over the rows.
    x1, x2 = torch.randn(8, 32), torch.randn(8, 48)
    bilinear = contractions(nn.Bilinear(32, 48, 16), (x1, x2), lambda m, b: m(*b).sum())
    assert bilinear == [("forward", "gemm", 2.0 * (8 * 32 * 16 * 48 + 8 * 16 * 48), (1, 8, 768, 32)),
                        ("backward", "gemm", 2.0 * (8 * 32 * 16 + 16 * 32 * 48 * 8), (1, 512, 48, 8))]
    # torch.cdist of 100 rows by 100 (p=2): a batched GEMM over the 64 features and the two norms.
    distances = contractions(nn.Linear(64, 64), torch.randn(2, 100, 64), lambda m, b: torch.cdist(m(b), m(b)).mean())
    assert distances == [("forward", "gemm", 2.0 * 2 * 100 * 100 * 66, (2, 100, 100, 66))]


class LayerDrop(nn.Module):
    """Skips each block with probability 0.1 while training, as M2M100, NLLB, LED and wav2vec 2.0 do."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            if self.training and torch.rand([]) < 0.1:
                continue
            x = block(x)
        return self.head(x)


def test_layerdrop_reads_its_random_draw_and_traces_every_block():
    trace = trace_step(LayerDrop(), mlp_batch(), ce_step, None, "bf16-mixed", target_type="cuda", trace_on="cpu")
    forward = [op for op in trace.ops if op.phase == "forward" and op.cost.op_class == "gemm"]
    assert len(forward) == 4  # three blocks and the head: each block kept, its likelier outcome
    assert names(trace, "forward").count("aten.rand.default") == 3  # the draws are still kernels


def _predictions(models, precision):
    from ptp_callback.coefficients import HOPPER
    from ptp_callback.devices import get_device
    from ptp_callback.predict import simulate

    return [simulate(trace_step(m, b, f, None, precision), get_device("h100-sxm"), HOPPER).step_s for m, b, f in models]


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true", "16-true"])
def test_prediction_does_not_depend_on_the_host_cpu_kernels(precision):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=128, vocab_size=100, attn_implementation="sdpa")
    torch.manual_seed(0)
    models = [
        (RecurrentLM(nn.GRU), (torch.randint(0, 100, (4, 24)),), lm_step),
        (transformers.LlamaForCausalLM(config), (torch.randint(0, 100, (2, 16)),),
         lambda m, b: m(input_ids=b[0], labels=b[0]).loss),
        (nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(), nn.LazyLinear(10)),
         (torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,))), ce_step),
    ]
    models[2][0](models[2][1][0])  # materialize the lazy layer
    native = _predictions(models, precision)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # oneDNN's note about Intel GPUs
        with torch.backends.mkldnn.flags(enabled=False):  # no oneDNN kernels: other CPU code paths
            without_onednn = _predictions(models, precision)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one_thread = _predictions(models, precision)
    finally:
        torch.set_num_threads(threads)
    for a, b, c in zip(native, without_onednn, one_thread):
        assert b == pytest.approx(a, rel=0.01) and c == pytest.approx(a, rel=0.01)


def test_a_grad_scalers_overflow_flag_reads_as_a_healthy_steps_where_the_trace_keeps_no_values():
    # On a GPU the trace's fake tensors carry no values (a plain FakeTensorMode): the unscale, a list
    # op, is recorded without being run, and the found_inf it writes must still read as no overflow.
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ptp_callback.precision import as_precision
    from ptp_callback.tracer import _Recorder

    with FakeTensorMode(), _Recorder(as_precision("32-true").on_target("cuda"), lambda: ""):
        grads, found_inf, inv_scale = [torch.ones(4), torch.ones(3)], torch.zeros(()), torch.ones(())
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        assert found_inf.item() == 0.0


@pytest.mark.parametrize("target_type", ["cuda", "cpu"])
def test_a_grad_scaler_in_the_steps_own_code_steps_the_optimizer_as_a_healthy_step_does(target_type):
    # The step's own GradScaler reads found_inf with .item() and skips the optimizer step when it
    # is not zero: read as a healthy step, no gradient overflowed.
    from ptp_callback import ManualOptimization

    model = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 10))

    def scaled_step(model, batch, step):
        (optimizer,) = step.optimizers
        scaler = torch.amp.GradScaler("cpu")
        step.backward(scaler.scale(F.cross_entropy(model(batch[0]), batch[1])))
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

    optimizer = torch.optim.AdamW(model.parameters(), foreach=False)
    trace = trace_step(model, mlp_batch(), scaled_step, ManualOptimization((optimizer,)), "32-true",
                       target_type=target_type)
    updates = [op for op in trace.ops if op.phase == "optimizer" and op.name == "aten.addcdiv_.default"]
    assert len(updates) == 4  # AdamW's update of each of the 4 parameters
    # On a GPU the read waits for the device, as GradScaler's does.
    unscale = next(i for i, op in enumerate(trace.ops) if op.name.startswith("aten._amp_foreach_non_finite"))
    syncs = [op.name for op in trace.ops[unscale:unscale + 3] if op.name == "ptp.sync"]
    assert syncs == (["ptp.sync"] if target_type == "cuda" else [])


def test_a_manual_step_records_each_backward_and_optimizer_step_and_leaves_the_real_ones_alone():
    from ptp_callback import ManualOptimization

    gen, critic = torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)
    model = torch.nn.ModuleDict({"gen": gen, "critic": critic})
    opt_g, opt_c = torch.optim.AdamW(gen.parameters()), torch.optim.SGD(critic.parameters(), lr=0.1, momentum=0.9)
    before = [p.detach().clone() for p in model.parameters()]

    def gan_step(model, batch, step):
        g, c = step.optimizers
        fake = model["gen"](batch)
        step.backward(model["critic"](fake.detach()).float().mean())
        c.step()
        c.zero_grad()
        step.backward(-model["critic"](fake).float().mean())
        g.step()
        g.zero_grad()

    trace = trace_step(model, torch.randn(4, 8), gan_step, ManualOptimization((opt_g, opt_c)), "16-mixed",
                       target_type="cuda", trace_on="cpu")
    names = [op.name for op in trace.ops if op.phase == "optimizer"]
    # Per optimizer step under 16-mixed: GradScaler's unscale and host sync, the step, zero_grad.
    assert names.count("ptp.sync") == names.count("ptp.optimizer_python") == names.count("ptp.zero_grad") == 2
    assert any(op.phase == "backward" and op.name.startswith("aten.mm") for op in trace.ops)
    assert trace.optimizer_name == "AdamW+SGD"
    assert trace.optimizer_state_bytes >= (2 * 72 + 9) * 4  # AdamW's two moments, SGD's momentum
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not opt_g.state and not opt_c.state and all(p.grad is None for p in model.parameters())


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(64, 192), torch.nn.Linear(64, 64)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 16, 3, 4, 16).permute(2, 0, 3, 1, 4)
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(attended.transpose(1, 2).reshape(2, 16, 64))


class _Checkpointed(torch.nn.Module):
    """An input layer, then an attention block whose forward the backward runs again."""

    def __init__(self, mode) -> None:
        super().__init__()
        self.inp, self.block, self.mode = torch.nn.Linear(64, 64), _Attention(), mode

    def forward(self, x):
        x = self.inp(x)
        if self.mode is None:
            return self.block(x).sum()
        return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=self.mode == "reentrant").sum()


@pytest.mark.parametrize("mode, recomputed", [
    # The reentrant form runs the block's whole forward again; the non-reentrant one stops once it
    # has every tensor the backward needs (PyTorch's early stop): the output linear's input is the
    # attention's output, so that linear does not run again.
    ("reentrant", ["addmm", "scaled_dot_product_attention", "addmm"]),
    ("non-reentrant", ["addmm", "scaled_dot_product_attention"]),
])
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_checkpointed_block_runs_its_forward_again_in_the_backward(mode, recomputed, precision):
    def kernels(model):
        trace = trace_step(model, torch.randn(2, 16, 64), lambda m, b: m(b), None, precision, target_type="cuda",
                           extrapolate_repeats=False)
        return [(op.name.split(".")[1], op.phase, op.cost.dtype) for op in trace.ops
                if op.cost.op_class in ("gemm", "attention")]

    plain, checkpointed = kernels(_Checkpointed(None)), kernels(_Checkpointed(mode))
    half = "bf16" if precision == "bf16-mixed" else "fp32"
    assert [k for k in checkpointed if k[1] == "forward"] == [k for k in plain if k[1] == "forward"]
    backward = [(name, dtype) for name, phase, dtype in checkpointed if phase == "backward"]
    # Run again first, in the forward's precision (the fused attention kernel, not CPU attention),
    # then the same backward as without checkpointing.
    assert backward[:len(recomputed)] == [(name, half) for name in recomputed]
    assert backward[len(recomputed):] == [(name, dtype) for name, phase, dtype in plain if phase == "backward"]


def test_a_batch_that_requires_grad_keeps_requiring_it_in_the_trace():
    # A physics-informed loss differentiates the output with respect to the input; a reentrant
    # checkpoint fed straight from the batch runs its backward only when the batch requires grad.
    pinn = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))

    def residual(model, batch):
        x, = batch
        du, = torch.autograd.grad(model(x).sum(), x, create_graph=True)
        return (du ** 2).mean()

    trace = trace_step(pinn, (torch.rand(256, 2, requires_grad=True),), residual, None, "32-true")
    assert sum(op.cost.op_class == "gemm" and op.phase == "backward" for op in trace.ops) >= 4

    block = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    x = torch.randn(8, 64, requires_grad=True)

    def checkpointed(model, batch):
        return torch.utils.checkpoint.checkpoint(model, batch, use_reentrant=True).sum()

    backward = [op for op in trace_step(block, x, checkpointed, None, "32-true").ops if op.phase == "backward"]
    # The block's forward again, then its backward: both linears' weight gradients.
    assert sum(op.cost.op_class == "gemm" for op in backward) >= 5


@pytest.mark.parametrize("precision, kernel", [("32-true", "efficient"), ("bf16-mixed", "flash")])
def test_attention_and_dropout_inside_multihead_attention_are_recorded_as_the_gpu_runs_them(precision, kernel):
    # nn.MultiheadAttention calls F.multi_head_attention_forward, which calls SDPA (with its
    # dropout) itself: out of the torch function mode's sight, so the aten op records it.
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
    trace = trace_step(layer, torch.randn(2, 16, 64), lambda m, b: m(b).sum(), None, precision, target_type="cuda",
                       extrapolate_repeats=False)
    attention = [(op.name, op.cost.kernel) for op in trace.ops if op.cost.op_class == "attention"]
    assert attention == [("aten.scaled_dot_product_attention.default", kernel),
                         ("ptp.scaled_dot_product_attention_backward", kernel)]
    assert not [op for op in trace.ops if op.name in ("aten.bmm.default", "aten.bernoulli_.float")]
    assert sum(op.name == "aten.native_dropout.default" for op in trace.ops) == 3  # after attention and in the MLP
    # The kernels were the trace's only: PyTorch's own attention and dropout run again afterwards.
    q = torch.randn(1, 2, 8, 16)
    expected = torch.softmax(q @ q.transpose(-1, -2) / 4.0, dim=-1) @ q
    torch.testing.assert_close(torch.nn.functional.scaled_dot_product_attention(q, q, q), expected)
    assert torch.dropout(torch.ones(1000), 0.5, True).eq(0).any()


def test_a_spectral_normed_layer_traces_under_autocast_for_a_gpu():
    # Its power iteration computes vdot(u, mv(W, v)): CUDA autocast runs mv in bf16 and promotes vdot.
    layer = torch.nn.utils.parametrizations.spectral_norm(torch.nn.Linear(32, 32))
    trace = trace_step(layer, torch.randn(4, 32), lambda m, b: m(b).sum(), None, "bf16-mixed", target_type="cuda")
    vdot = next(op for op in trace.ops if op.name == "aten.vdot.default")
    assert vdot.cost.dtype == "fp32"



class ConvertsItsRouter(nn.Module):
    """Converts a submodule inside ``forward``, as Switch Transformers' router does every step."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(32, 32)
        self.router = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.router = self.router.to(torch.float32)
        return self.body(x).sum() + self.router(x.float()).float().sum()


# bf16-true: the converted router runs in fp32, as on a GPU; under autocast its GEMM is cast to bf16 anyway
@pytest.mark.parametrize("precision, router_dtype",
                         [("32-true", "fp32"), ("bf16-mixed", "bf16"), ("bf16-true", "fp32")])
def test_a_step_that_converts_a_submodule_traces_and_the_real_model_is_left_as_it_was(precision, router_dtype):
    model = ConvertsItsRouter()
    before = {name: (p, p.dtype) for name, p in model.named_parameters()}
    trace = trace_step(model, mlp_batch(), lambda m, b: m(b[0]), None, precision)
    router = [op for op in trace.ops if op.phase == "forward" and op.cost.op_class == "gemm" and "router" in op.module]
    assert [op.cost.dtype for op in router] == [router_dtype]
    assert {name: (p, p.dtype) for name, p in model.named_parameters()} == before


def test_ops_only_cpu_autocast_casts_run_on_their_inputs_as_a_gpu_runs_them():
    class LSTMBesideLinear(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm, self.proj = nn.LSTM(32, 16, batch_first=True), nn.Linear(32, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # A cuDNN LSTM returns fp16 under any autocast, the linear layer bf16: CUDA autocast has no
            # kernel for cat (CPU's refuses the mix), so cat promotes them itself, to fp32.
            return torch.cat([self.lstm(x)[0], self.proj(x)], -1).sum()

    trace = trace_step(LSTMBesideLinear(), (torch.randn(2, 8, 32),), lambda m, b: m(b[0]), None, "bf16-mixed",
                       target_type="cuda", trace_on="cpu")
    forward = [op for op in trace.ops if op.phase == "forward"]
    cat = next(op for op in forward if op.name == "aten.cat.default")
    assert set(cat.in_dtypes) == {"fp16", "bf16"} and cat.out_dtypes == ("fp32",)
    assert forward[forward.index(cat) - 1].cost.op_class != "cast"  # no cast of CPU autocast's before it


def test_an_fft_of_bf16_says_the_gpu_fails_the_same_way():
    class Spectral(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.rfft(self.proj(x), dim=-1).abs().sum()  # CUDA autocast leaves rfft in bf16

    with pytest.raises(TraceError, match=r"`return torch\.fft\.rfft\(.*fails the same way on a GPU"):
        trace_step(Spectral(), (torch.randn(4, 64),), lambda m, b: m(b[0]), None, "bf16-mixed",
                   target_type="cuda", trace_on="cpu")


def test_a_trace_collects_only_its_own_garbage_and_leaves_the_collector_as_it_found_it():
    import gc
    import weakref

    class Node:
        pass

    seen: list[tuple[int, bool]] = []

    def step(model, batch):
        # Objects from before the trace are out of its collections; a cycle made inside is collected.
        cycle = Node()
        cycle.me = cycle
        dead = weakref.ref(cycle)
        del cycle
        gc.collect()
        seen.append((gc.get_freeze_count(), dead() is None))
        return ce_step(model, batch)

    frozen_here = gc.get_freeze_count()
    gc.unfreeze()  # a process that froze nothing (an import can freeze some: seen in one GPU image's)
    try:
        trace_step(mlp(), mlp_batch(), step, target_type="cpu", extrapolate_repeats=False)
        assert seen and all(frozen > 0 and collected for frozen, collected in seen)
        assert gc.get_freeze_count() == 0

        gc.freeze()  # a process that freezes its own objects (before forking workers) keeps them frozen
        seen.clear()
        trace_step(mlp(), mlp_batch(), step, target_type="cpu", extrapolate_repeats=False)
        assert gc.get_freeze_count() > 0 and all(collected for _, collected in seen)
    finally:
        gc.unfreeze()
        if frozen_here:
            gc.freeze()


@pytest.mark.parametrize("in_place", [False, True])  # torch.compile(module), or module.compile()
def test_a_compiled_submodule_traces_as_its_module_without_warning_of_the_traces_own_hooks(in_place):
    # torch.compile'd modules warn about global module hooks each time they run while any are
    # registered; the only ones during a trace are the trace's own, so the user sees no such warning.
    plain = trace_step(mlp(), mlp_batch(), ce_step, precision="bf16-mixed")
    model = mlp()
    if in_place:
        model[2].compile()
    else:
        model[2] = torch.compile(model[2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = trace_step(model, mlp_batch(), ce_step, precision="bf16-mixed")
    assert not [w for w in caught if "global hooks" in str(w.message)]
    assert names(compiled) == names(plain)
    # What is predicted is the eager step, and the trace says so.
    assert any(m.startswith("torch.compile") for m in compiled.mappings)
    assert not any(m.startswith("torch.compile") for m in plain.mappings)
    # The filter goes with the trace: the user's own warning filters are as they were.
    before = list(warnings.filters)
    trace_step(model, mlp_batch(), ce_step, precision="bf16-mixed")
    assert warnings.filters == before


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_an_optimizer_with_a_tensor_learning_rate_traces_as_its_factory_would(target):
    model = nn.Linear(16, 8)
    batch = (torch.randn(4, 16), torch.randn(4, 8))

    def step(m, b):
        return F.mse_loss(m(b[0]), b[1])

    # lr=torch.tensor(...): the copy's constructor checks 0 <= lr, which a fake tensor without its value cannot
    instance = trace_step(model, batch, step, torch.optim.Adam(model.parameters(), lr=torch.tensor(1e-3),
                                                              foreach=False), target_type=target)
    factory = trace_step(model, batch, step, lambda p: torch.optim.Adam(p, lr=torch.tensor(1e-3), foreach=False),
                         target_type=target)
    assert [op.name for op in instance.ops if op.phase == "optimizer"] == \
        [op.name for op in factory.ops if op.phase == "optimizer"]
    # foreach left to torch: it runs a tensor learning rate without foreach (not capturable), on a GPU too
    default = trace_step(model, batch, step, torch.optim.Adam(model.parameters(), lr=torch.tensor(1e-3)),
                         target_type=target)
    assert not any(op.name.startswith("aten._foreach") for op in default.ops if op.phase == "optimizer")
