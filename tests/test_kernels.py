"""The per-class kernel-time formulas, pinned with hand arithmetic on a toy device."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ptp_callback.coefficients import HOPPER, CostCoefficients, pick
from ptp_callback.costs import COLUMN_REDUCTION, STRIDED_CAT, OpCost, describe_op
from ptp_callback.devices import DeviceSpec, get_device
from ptp_callback.probe import CPU_IN_STEP_GEMM_RATE
from ptp_callback.kernels import (
    attention_seconds,
    conv_pass_seconds,
    gemm_seconds,
    kernel_seconds,
    math_dtype,
    memory_seconds,
    packed_groups,
    peak_flops,
    recurrent_host_seconds,
    recurrent_seconds,
    runs_as_gemm,
    stream_rate,
    streamed_seconds,
    wave_seconds,
)
from ptp_callback.tracer import OpRecord

# 2 SMs, 1 TFLOP/s fp32, 2 TFLOP/s bf16, 1000 GB/s.
TOY = DeviceSpec(key="toy", name="Toy GPU", arch="hopper", sm_count=2, memory_gb=1, memory_bw_gbs=1000, l2_mb=1,
                 peak_tflops={"fp32": 1.0, "tf32": 1.0, "bf16": 2.0, "fp16": 2.0})
# Half the peak, no K-loop fill, every tile size equally fast, no floors: the bare wave model.
# Efficiencies are fractions of the toy's own bandwidth: no reference GPU to scale them from.
COEF = replace(HOPPER, gemm_eff={"gemm": 0.5, "misaligned:bf16:1": 0.25}, gemm_k_fill={"gemm": 0.0},
               gemm_tile_eff={"tensor": 0.0, "simt": 0.0}, kernel_floor_s=0.0, latency_s={},
               mem_eff={"elementwise": 1.0, "gemm": 1.0},
               extra={k: v for k, v in HOPPER.extra.items() if k not in ("reference_bw_gbs", "reference_sm_count")})


def _describe(func, args, *, phase: str) -> OpCost:
    """``func`` run on ``args`` (under the caller's fake mode), described without TF32."""
    return describe_op(func, args, {}, func(*args), matmul_tf32=False, conv_tf32=False, phase=phase)


def test_pick_takes_the_most_specific_key():
    table = {"conv": 1.0, "conv:dense": 2.0, "conv:dense:wgrad:bf16": 3.0}
    assert pick(table, ("conv", "dense", "wgrad", "bf16"), 0.0) == 3.0
    assert pick(table, ("conv", "dense", "wgrad", "fp16"), 0.0) == 2.0
    assert pick(table, ("conv", "grouped"), 0.0) == 1.0
    assert pick(table, ("attention",), 9.0) == 9.0


def test_gemm_that_fills_every_sm_runs_at_its_share_of_peak():
    # 256 x 256 x 1024 in bf16: two 128x256 tiles, one per SM, one wave. Each SM runs
    # 2 x 128 x 256 x 1024 = 67.1 MFLOP at 2e12 x 0.5 / 2 SMs = 0.5 TFLOP/s: 134.2 us.
    assert wave_seconds(1, 256, 256, 1024, "bf16", TOY, COEF) == pytest.approx(2 * 128 * 256 * 1024 / 0.5e12)


def test_gemm_that_leaves_an_sm_idle_pays_a_whole_wave():
    # 128 x 384 x 1024: three 128x128 tiles on 2 SMs take 2 waves (a 64-wide tile splits no better,
    # since K is too short to split), i.e. 4/3 of the balanced time.
    balanced = 2 * 128 * 384 * 1024 / (2e12 * 0.5)
    assert wave_seconds(1, 128, 384, 1024, "bf16", TOY, COEF) >= balanced * (1 - 1e-9)


def test_misaligned_gemm_runs_at_its_narrow_kernels_rate():
    aligned = OpCost("gemm", 0.0, 0.0, 1, "bf16", (1, 256, 256, 1024))
    misaligned = replace(aligned, misaligned=True, alignment=1)
    assert gemm_seconds(misaligned, TOY, COEF) == pytest.approx(gemm_seconds(aligned, TOY, COEF) / 0.25)


def test_gemm_is_never_faster_than_its_bytes():
    # 1 GB at 1000 GB/s is 1 ms, far more than its 2 MFLOP.
    cost = OpCost("gemm", 2e6, 1e9, 1, "bf16", (1, 1000, 1, 1000))
    assert gemm_seconds(cost, TOY, COEF) == pytest.approx(1e-3)


def test_bf16_before_ampere_runs_at_the_fp32_rate():
    t4, v100 = get_device("t4"), get_device("v100-sxm2-16gb")
    assert math_dtype(t4, "bf16") == "fp32" and math_dtype(v100, "bf16") == "fp32"
    assert math_dtype(t4, "tf32") == "fp32" and math_dtype(t4, "fp16") == "fp16"
    bf16 = OpCost("gemm", 2.0 * 4096**3, 0.0, 1, "bf16", (1, 4096, 4096, 4096))
    fp16 = replace(bf16, dtype="fp16")
    fp32 = replace(bf16, dtype="fp32")
    assert gemm_seconds(bf16, t4, HOPPER) == pytest.approx(gemm_seconds(fp32, t4, HOPPER))
    assert gemm_seconds(bf16, t4, HOPPER) > 4 * gemm_seconds(fp16, t4, HOPPER)


def test_recurrent_call_is_input_gemm_plus_sequential_steps_that_the_host_launches_one_by_one():
    # One LSTM layer, one direction: batch 8, 100 steps, input 16, hidden 32 (gates x hidden = 128).
    cost = OpCost("recurrent", 0.0, 0.0, 1, "bf16", dims=(4, 1, 1, 8, 100, 16, 32, 0))
    coef = replace(COEF, recurrent={"persistent_max_hidden": 0, "step_s:standard": 20e-6, "l2_fraction": 0.5})
    record = OpRecord("aten._cudnn_rnn.default", "forward", "", cost)
    step = wave_seconds(1, 8, 128, 32, "bf16", TOY, coef, max_split=1) + coef.kernel_floor_s
    expected = 100 * step + wave_seconds(1, 8 * 100, 128, 16, "bf16", TOY, coef)
    assert recurrent_seconds(cost, TOY, coef) == pytest.approx(expected)
    # The host launches each step: a small layer is bound by that, not by its kernels.
    assert recurrent_host_seconds(record, TOY, coef) == pytest.approx(100 * 20e-6)
    assert recurrent_seconds(cost, TOY, coef) < recurrent_host_seconds(record, TOY, coef)
    # Backward: each step's data gradient (8 x 128) @ (128 x 32), plus the input's data gradient
    # and both weight gradients.
    backward = replace(cost, backward=True)
    step_bwd = wave_seconds(1, 8, 32, 128, "bf16", TOY, coef, max_split=1) + coef.kernel_floor_s
    expected_bwd = (100 * step_bwd + wave_seconds(1, 800, 16, 128, "bf16", TOY, coef)
                    + wave_seconds(1, 128, 48, 800, "bf16", TOY, coef))
    assert recurrent_seconds(backward, TOY, coef) == pytest.approx(expected_bwd)
    # Two layers, both directions: each of the four runs its steps.
    deep = replace(cost, dims=(4, 2, 2, 8, 100, 16, 32, 0))
    assert recurrent_host_seconds(replace(record, cost=deep), TOY, coef) == pytest.approx(4 * 100 * 20e-6)
    # cuDNN's persistent kernels run every step on the device: nothing is launched step by step.
    persistent = replace(coef, recurrent={**coef.recurrent, "persistent_max_hidden": 64})
    fp16 = replace(record, cost=replace(cost, dtype="fp16"))
    assert recurrent_host_seconds(fp16, TOY, coef) > 0.0
    assert recurrent_host_seconds(fp16, TOY, persistent) == 0.0


def test_a_wide_recurrent_step_is_bound_by_its_gemm_walking_k_alone():
    # Batch 32, GRU hidden 768 (K = 2304 in the backward's per-step GEMM): a handful of CTAs each
    # walk the whole K, so the step takes longer than its latency floor, and split-K, which the
    # wave model allows a lone GEMM of that shape, is not what cuDNN runs.
    cost = OpCost("recurrent", 0.0, 0.0, 1, "tf32", dims=(3, 1, 1, 32, 100, 768, 768, 0), backward=True)
    coef = replace(COEF, recurrent={"persistent_max_hidden": 0, "step_s:standard": 1e-9, "l2_fraction": 0.5},
                   kernel_floor_s=2e-6)
    h100 = get_device("h100-sxm")
    alone = wave_seconds(1, 32, 768, 2304, "tf32", h100, coef, max_split=1)
    assert alone > 2 * wave_seconds(1, 32, 768, 2304, "tf32", h100, coef)
    big = (wave_seconds(1, 3200, 768, 2304, "tf32", h100, coef)
           + wave_seconds(1, 2304, 1536, 3200, "tf32", h100, coef))
    assert recurrent_seconds(cost, h100, coef) == pytest.approx(100 * (alone + 2e-6) + big)


def test_attention_with_few_query_blocks_leaves_sms_idle():
    coef = replace(COEF, attention_eff={"attention": 0.5}, extra={"attention_key_fill": 0.0, "attention_dim_fill": 0.0})
    # batch 1 x 1 head x 128 queries = one query block: one of the 2 SMs works, at half efficiency.
    op = OpRecord("aten.scaled_dot_product_attention.default", "forward", "",
                  OpCost("attention", 4.0 * 128 * 128 * 64, 0.0, 1, "bf16", dims=(1, 1, 1, 128, 128, 64, 64)))
    assert attention_seconds(op, TOY, coef) == pytest.approx(4.0 * 128 * 128 * 64 / (2e12 * 0.5 * 0.5))
    # Two heads: both SMs busy, twice the work in the same time.
    two = replace(op, cost=replace(op.cost, flops=2 * op.cost.flops, dims=(1, 2, 2, 128, 128, 64, 64)))
    assert attention_seconds(two, TOY, coef) == pytest.approx(attention_seconds(op, TOY, coef))


def test_attention_dropout_costs_by_pass_and_math_dtype():
    # The H100 kernel profiles (stage 1b of fit_coefficients): dropout's random numbers add a
    # quarter to an fp32 (memory-efficient) attention forward and little to its backward; the
    # half-precision kernels, whose math is faster, pay more of it, again mostly in the forward.
    coef = replace(COEF, attention_eff={"attention": 0.5}, extra={
        "attention_key_fill": 0.0, "attention_dim_fill": 0.0, "attention_dropout_cost": 0.4,
        "attention_dropout_cost:fwd:fp32": 0.25, "attention_dropout_cost:bwd:fp32": 0.04,
        "attention_dropout_cost:fwd:bf16": 0.7, "attention_dropout_cost:bwd:bf16": 0.2})

    def ratio(dtype: str, backward: bool) -> float:
        cost = OpCost("attention", 4.0 * 2 * 2 * 512 * 512 * 64, 0.0, 1, dtype, dims=(2, 2, 2, 512, 512, 64, 64),
                      backward=backward)
        op = OpRecord("aten.scaled_dot_product_attention.default", "backward" if backward else "forward", "", cost)
        dropped = replace(op, cost=replace(cost, dropout=True))
        return attention_seconds(dropped, TOY, coef) / attention_seconds(op, TOY, coef)

    assert ratio("fp32", False) == pytest.approx(1.25) and ratio("fp32", True) == pytest.approx(1.04)
    assert ratio("bf16", False) == pytest.approx(1.7) and ratio("bf16", True) == pytest.approx(1.2)
    assert ratio("fp16", False) == pytest.approx(1.4)  # no key of its own: the general one


def test_layer_norm_with_many_short_rows_is_bound_by_its_rows():
    coef = replace(COEF, latency_s={"norm_row": 2e-9}, mem_eff={"elementwise": 1.0})
    # 1,000,000 rows of 8 fp32 values: 64 MB is 64 us at 1000 GB/s; 1e6 rows x 2 ns / 2 SMs = 1 ms.
    op = OpRecord("aten.native_layer_norm.default", "forward", "", OpCost("norm", 0.0, 64e6, 1, "fp32", dims=(10**6, 8)))
    assert kernel_seconds(op, TOY, coef) == pytest.approx(1e-3)
    wide = replace(op, cost=replace(op.cost, dims=(1000, 8000)))
    assert kernel_seconds(wide, TOY, coef) == pytest.approx(64e-6)


def test_batch_norm_over_few_channels_reaches_a_fraction_of_bandwidth():
    coef = replace(COEF, extra={"batch_norm_channels_half": 32.0}, mem_eff={"elementwise": 1.0})
    # 12 MB at 1000 GB/s is 12 us; over 32 channels, half the bandwidth: 24 us.
    op = OpRecord("aten.native_batch_norm.default", "forward", "",
                  OpCost("batch_norm", 0.0, 12e6, 1, "fp32", dims=(10**5, 32)))
    assert kernel_seconds(op, TOY, coef) == pytest.approx(24e-6)
    wide = replace(op, cost=replace(op.cost, dims=(100, 32_000)))
    assert kernel_seconds(wide, TOY, coef) == pytest.approx(12e-6 * (32_000 + 32) / 32_000)


def test_gemm_with_a_tiny_output_splits_its_long_k_over_every_sm():
    # A first layer's weight gradient: 64 x 27 outputs, K = 3.2M (batch x pixels). One 64x32 tile
    # split 128 ways runs on 128 CTAs; the 128 partial sums (fp32) are written and read back.
    device = replace(TOY, sm_count=128)
    m, n, k = 64, 27, 3_211_264
    flops_per_cta = 2 * 64 * 32 * (k / 128)
    partials = 2 * 128 * m * n * 4 / 1000e9
    expected = flops_per_cta / (2e12 * 0.5 / 128) + partials
    assert wave_seconds(1, m, n, k, "bf16", device, COEF) == pytest.approx(expected)
    # Without the split it would take 128 times the compute on one SM.
    assert wave_seconds(1, m, n, k, "bf16", device, COEF) < 2 * 64 * 32 * k / (2e12 * 0.5 / 128) / 50


def _conv_op(bias: bool) -> OpRecord:
    with FakeTensorMode():
        cost = _conv_cost(torch.empty(8, 16, 32, 32), 32, bias=bias)
    return OpRecord("aten.convolution.default", "forward", "", cost)


def test_convolution_bias_is_one_more_pass_over_the_output_on_a_gpu():
    plain, biased = _conv_op(False), _conv_op(True)
    output_bytes = 8 * 32 * 32 * 32 * 4
    assert plain.cost.aux_bytes == 0 and biased.cost.aux_bytes == 2 * output_bytes
    assert biased.cost.kernels == plain.cost.kernels + 1
    coef = replace(COEF, kernel_floor_s=0.0)
    # Read and write of the output at 1000 GB/s (elementwise efficiency 1).
    assert kernel_seconds(biased, TOY, coef) - kernel_seconds(plain, TOY, coef) == pytest.approx(2 * output_bytes / 1e12)
    # CPU kernels fuse the bias: a roofline (CPU) model charges nothing for it.
    cpu = replace(coef, extra={**coef.extra, "gemm_model": "roofline"})
    assert kernel_seconds(biased, TOY, cpu) == pytest.approx(kernel_seconds(plain, TOY, cpu))


def _cat_op(dtype: torch.dtype, halves: bool) -> OpRecord:
    """``cat`` of a (8, 16, 256, 64) tensor's two last-dim halves (a rotary embedding's
    ``rotate_half``: views, not contiguous), or of two contiguous tensors of the same shapes."""
    with FakeTensorMode():
        x = torch.empty(8, 16, 256, 64, dtype=dtype)
        a, b = (x[..., 32:], x[..., :32]) if halves else [torch.empty(8, 16, 256, 32, dtype=dtype) for _ in range(2)]
        cost = _describe(torch.ops.aten.cat.default, ([a, b], -1), phase="forward")
    return OpRecord("aten.cat.default", "forward", "", cost)


def test_a_cat_of_strided_views_is_priced_by_its_elements_and_a_contiguous_one_by_its_bytes():
    coef = replace(COEF, kernel_floor_s=0.0, mem_eff={**COEF.mem_eff, "elementwise:strided_cat": 0.5})
    strided = {dt: _cat_op(dt, halves=True) for dt in (torch.float32, torch.bfloat16)}
    contiguous = {dt: _cat_op(dt, halves=False) for dt in (torch.float32, torch.bfloat16)}
    assert {op.cost.kernel for op in strided.values()} == {STRIDED_CAT}
    assert {op.cost.kernel for op in contiguous.values()} == {""}
    elements = 8 * 16 * 256 * 64
    # Read and written once, as fp32 whatever the dtype, at half the bandwidth (1000 GB/s).
    for op in strided.values():
        assert kernel_seconds(op, TOY, coef) == pytest.approx(2 * 4 * elements / 0.5e12)
    assert kernel_seconds(contiguous[torch.bfloat16], TOY, coef) == pytest.approx(2 * 2 * elements / 1e12)
    assert kernel_seconds(contiguous[torch.float32], TOY, coef) == pytest.approx(2 * 4 * elements / 1e12)


def test_a_sum_over_leading_dims_streams_at_its_own_rate_and_a_sum_along_rows_as_bytes():
    coef = replace(COEF, kernel_floor_s=0.0, latency_s={}, mem_eff={**COEF.mem_eff, "reduction": 1.0,
                                                                     "reduction:columns": 0.25})
    with FakeTensorMode():
        grad = torch.empty(16384, 768)
        bias_grad = _describe(torch.ops.aten.sum.dim_IntList, (grad, [0]), phase="backward")  # 768 outputs
        row_sums = _describe(torch.ops.aten.sum.dim_IntList, (grad, [1]), phase="backward")
        wide = torch.empty(64, 32768)
        wide_sum = _describe(torch.ops.aten.sum.dim_IntList, (wide, [0]), phase="backward")  # too many outputs
    assert (bias_grad.kernel, row_sums.kernel, wide_sum.kernel) == (COLUMN_REDUCTION, "", "")
    read = 16384 * 768 * 4
    seconds = {name: kernel_seconds(OpRecord("aten.sum.dim_IntList", "backward", "", cost), TOY, coef)
               for name, cost in (("columns", bias_grad), ("rows", row_sums))}
    assert seconds["columns"] == pytest.approx((read + 768 * 4) / 0.25e12)
    assert seconds["rows"] == pytest.approx((read + 16384 * 4) / 1e12)


def test_a_softmax_over_rows_too_long_for_shared_memory_reads_them_once_per_pass():
    with FakeTensorMode():
        vocab, short = torch.empty(64, 50257), torch.empty(64, 1000)  # rows of 196 KB and 4 KB
        logits = {x.shape[1]: _describe(torch.ops.aten._log_softmax.default, (x, 1, False), phase="forward")
                  for x in (vocab, short)}
        out = torch.ops.aten._log_softmax.default(vocab, 1, False)
        backward = _describe(torch.ops.aten._log_softmax_backward_data.default, (vocab, out, 1, torch.float32),
                             phase="backward")
        target = torch.zeros(64, dtype=torch.long)
        loss = _describe(torch.ops.aten.nll_loss_forward.default, (out, target, None, 1, -100), phase="forward")
    row_bytes = 64 * 4
    # max, sum of exponentials, output: three reads and a write; a short row is read once.
    assert logits[50257].bytes == 4 * 50257 * row_bytes and logits[1000].bytes == 2 * 1000 * row_bytes
    assert backward.bytes == 4 * 50257 * row_bytes  # the gradient twice, the output once, a write
    # The loss gathers one log-probability per target.
    assert loss.bytes < 64 * (8 + 4) + 64


def _conv_cost(x: torch.Tensor, c_out: int, bias: bool = False, backward: bool = False, kernel: int = 3,
               stride: int = 1, groups: int = 1) -> OpCost:
    """A convolution of ``x`` (under the caller's fake mode; 3x3, stride 1, same padding unless
    told), described."""
    w = torch.empty(c_out, x.shape[1] // groups, kernel, kernel, dtype=x.dtype)
    conv = (x, w, torch.empty(c_out) if bias else None, [stride, stride], [kernel // 2] * 2, [1, 1], False, [0, 0],
            groups)
    if not backward:
        return _describe(torch.ops.aten.convolution.default, conv, phase="forward")
    args = (torch.ops.aten.convolution.default(*conv), x, w, None, *conv[3:], [True, True, False])
    return _describe(torch.ops.aten.convolution_backward.default, args, phase="backward")


def test_channels_first_convolution_tiles_each_images_pixels():
    with FakeTensorMode():
        nchw = torch.empty(256, 64, 7, 7)
        small = _conv_cost(nchw, 128)
        assert small.gemms == ((256, 49, 128, 64 * 9),)
        assert _conv_cost(nchw, 128, backward=True).gemms == ((256, 49, 64, 128 * 9), (1, 128, 64 * 9, 256 * 49))
        nhwc = nchw.to(memory_format=torch.channels_last)
        assert _conv_cost(nhwc, 128).gemms == ((1, 256 * 49, 128, 64 * 9),)
        large = _conv_cost(torch.empty(16, 64, 28, 28), 128)  # the same multiply-adds over 28x28 maps
    assert small.flops == large.flops

    def seconds(cost: OpCost) -> float:
        return kernel_seconds(OpRecord("aten.convolution.default", "forward", "", cost), TOY, COEF)

    # A 49-pixel map fills a 64-row tile to 77%: each image's tiles run partly empty.
    assert seconds(small) > 1.25 * seconds(large)


def test_implicit_gemm_steps_through_whole_channel_chunks_per_filter_tap():
    with FakeTensorMode():
        # fp32: 32-channel chunks (128 bytes). 40 input channels take two chunks per tap, so the
        # forward's K is 9 x 64, not 9 x 40; the data gradient chunks the 72 output channels.
        odd = _conv_cost(torch.empty(8, 40, 14, 14), 72, backward=True)
        assert odd.gemms == ((8, 196, 40, 96 * 9), (1, 72, 40 * 9, 8 * 196))
        assert _conv_cost(torch.empty(8, 40, 14, 14), 72).gemms == ((8, 196, 72, 64 * 9),)
        # Fewer channels than a chunk: a chunk of the next power of two (an RGB input takes 4).
        assert _conv_cost(torch.empty(8, 3, 14, 14), 64).gemms == ((8, 196, 64, 4 * 9),)
        # ... but never narrower than a 16-byte load: 8 channels in half precision.
        assert _conv_cost(torch.empty(8, 3, 14, 14, dtype=torch.bfloat16), 64).gemms == ((8, 196, 64, 8 * 9),)
        # Whole chunks: nothing added, the multiply-adds are those of the convolution.
        even = _conv_cost(torch.empty(8, 64, 14, 14), 128)
    assert even.gemms == ((8, 196, 128, 64 * 9),)
    assert even.flops == 2 * 8 * 196 * 128 * 64 * 9


def test_a_convolution_whose_channels_fill_64_channel_tiles_runs_at_the_gemm_rate():
    with FakeTensorMode():
        whole = _conv_cost(torch.empty(32, 64, 28, 28, dtype=torch.bfloat16), 128, backward=True)
        partial = _conv_cost(torch.empty(32, 72, 28, 28, dtype=torch.bfloat16), 128, backward=True)
        x = torch.empty(32, 64, 28, 28)
        w = torch.empty(128, 64, 3, 3)
        conv = (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        args = (torch.ops.aten.convolution.default(*conv), x, w, None, *conv[3:], [True, True, False])
        tf32 = describe_op(torch.ops.aten.convolution_backward.default, args, {},
                           torch.ops.aten.convolution_backward.default(*args), matmul_tf32=False, conv_tf32=True,
                           phase="backward")
    # Efficiencies fitted on convolutions far below the GEMM's, so the two rules cannot agree.
    coef = replace(COEF, conv_eff={"conv": 0.25}, gemm_eff={"gemm": 0.5, "mn_major:tf32": 0.4})
    assert runs_as_gemm(whole, TOY) and runs_as_gemm(tf32, TOY)
    assert not runs_as_gemm(partial, TOY)  # 72 input channels: a tile and a part
    assert not runs_as_gemm(whole, replace(TOY, arch="ampere"))
    for gemm, part in zip(whole.gemms, ("dgrad", "wgrad")):
        as_gemm = conv_pass_seconds(whole, gemm, part, TOY, coef, as_gemm=True)
        assert as_gemm == pytest.approx(streamed_seconds(*gemm, "bf16", TOY, coef))
        assert conv_pass_seconds(whole, gemm, part, TOY, coef) > 1.5 * as_gemm
    # TF32: the weight gradient's operands are both MN-major, at an MN-major GEMM's rate.
    dgrad, wgrad = tf32.gemms
    assert conv_pass_seconds(tf32, dgrad, "dgrad", TOY, coef, True) == pytest.approx(
        wave_seconds(*dgrad, "tf32", TOY, coef))
    assert conv_pass_seconds(tf32, wgrad, "wgrad", TOY, coef, True) == pytest.approx(
        wave_seconds(*wgrad, "tf32", TOY, coef, 0.4))


def test_cudnn_packs_small_groups_into_whole_channel_tiles_on_hopper():
    with FakeTensorMode():
        x = torch.empty(32, 128, 28, 28, dtype=torch.bfloat16)
        four = _conv_cost(x, 128, groups=32)  # ResNeXt's 4 channels a group: 16 groups to a 64-channel tile
        sixteen = _conv_cost(x, 128, groups=8)  # 4 groups to a tile
        backward = _conv_cost(x, 128, groups=32, backward=True)
        odd = _conv_cost(torch.empty(32, 144, 28, 28, dtype=torch.bfloat16), 144, groups=16)  # 9 a group
        widening = _conv_cost(x, 256, groups=32)  # 4 channels in, 8 out
        w = torch.empty(128, 4, 3, 3)
        conv = (torch.empty(32, 128, 28, 28), w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 32)
        tf32 = describe_op(torch.ops.aten.convolution.default, conv, {}, torch.ops.aten.convolution.default(*conv),
                           matmul_tf32=False, conv_tf32=True, phase="forward")
    assert (packed_groups(four, TOY), packed_groups(sixteen, TOY), packed_groups(tf32, TOY)) == (16, 4, 8)
    assert packed_groups(odd, TOY) == packed_groups(widening, TOY) == 0
    assert packed_groups(four, replace(TOY, arch="ampere")) == 0

    def seconds(cost: OpCost, coef: CostCoefficients = COEF) -> float:
        return kernel_seconds(OpRecord("aten.convolution.default", "backward" if cost.backward else "forward", "", cost),
                              TOY, coef)

    # The tile is multiplied whole, zeros included: 4-channel groups cost what 16-channel ones do,
    # four times their own multiply-adds.
    assert four.flops == sixteen.flops / 4
    assert seconds(four) == pytest.approx(seconds(sixteen), rel=0.02)
    # One kernel a pass, not a loop over the groups: only unpacked groups pay a launch each.
    per_group = replace(COEF, latency_s={"conv:grouped:per_group": 1e-3})
    assert seconds(four, per_group) == pytest.approx(seconds(four))
    assert seconds(backward, per_group) == pytest.approx(seconds(backward))
    assert seconds(odd, per_group) == pytest.approx(seconds(odd) + 16e-3)
    # A CPU runs its own kernels: nothing is packed, the convolution is priced all the same.
    cpu, cpu_coef = _toy_cpu()
    assert packed_groups(four, cpu) == 0
    assert kernel_seconds(OpRecord("aten.convolution.default", "forward", "", four), cpu, cpu_coef) > 0


def test_a_strided_convolutions_data_gradient_runs_only_the_taps_that_reach_each_input_pixel():
    with FakeTensorMode():
        x = torch.empty(8, 64, 28, 28)
        plain = _conv_cost(x, 64, backward=True)
        strided = _conv_cost(x, 64, backward=True, stride=2)
        strided_5x5 = _conv_cost(x, 64, backward=True, kernel=5, stride=2)
    # Stride 1: every input pixel takes all 9 taps. Stride 2: 9 / 4, rounded up to 3 taps (the
    # sub-problems of a strided data gradient take 4, 2, 2 and 1); 25 / 4 -> 7 for a 5x5 filter.
    assert plain.gemms[0] == (8, 784, 64, 64 * 9)
    assert strided.gemms[0] == (8, 784, 64, 64 * 3)
    assert strided_5x5.gemms[0] == (8, 784, 64, 64 * 7)
    # The weight gradient sums over the output pixels, whatever the stride.
    assert strided.gemms[1] == (1, 64, 64 * 9, 8 * 196)


def test_the_taps_a_data_gradient_runs_follow_the_stride_of_every_spatial_axis():
    def data_gradient(x: torch.Tensor, w: torch.Tensor) -> tuple[int, int, int, int]:
        axes = x.dim() - 2
        conv = (x, w, None, [2] * axes, [1] * axes, [1] * axes, False, [0] * axes, 1)
        args = (torch.ops.aten.convolution.default(*conv), x, w, None, *conv[3:], [True, True, False])
        return _describe(torch.ops.aten.convolution_backward.default, args, phase="backward").gemms[0]

    with FakeTensorMode():
        line = data_gradient(torch.empty(8, 64, 100), torch.empty(64, 64, 3))
        volume = data_gradient(torch.empty(2, 64, 8, 16, 16), torch.empty(64, 64, 3, 3, 3))
    # A kernel of 3 at stride 2 reaches an input point with 1.5 taps on average: 2 in 1-D (not
    # the 1 of 3 / 2^2); a 3x3x3 kernel at stride 2 with 27 / 8 -> 4 (not 27 / 4 -> 7).
    assert line == (8, 100, 64, 64 * 2)
    assert volume == (2, 8 * 16 * 16, 64, 64 * 4)
    with FakeTensorMode():
        # A generator's first layer: ConvTranspose2d(100, 512, 4) of a 1x1 latent vector. Each of
        # the 4x4 output pixels takes one tap (the convolution it transposes has a 1x1 output).
        z, w = torch.empty(128, 100, 1, 1), torch.empty(100, 512, 4, 4)
        first = _describe(torch.ops.aten.convolution.default, (z, w, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1),
                          phase="forward")
    batch, m, n, k = first.gemms[0]
    assert (batch * m, n, k) == (128 * 16, 512, 128)  # 100 channels step as 4 chunks of 32 (fp32)


def test_a_transposed_convolution_runs_the_passes_of_the_convolution_it_transposes():
    with FakeTensorMode():
        # ConvTranspose2d(128, 64, 2, stride=2): 14x14 maps of 128 channels to 28x28 maps of 64.
        x = torch.empty(8, 128, 14, 14)
        w = torch.empty(128, 64, 2, 2)
        up = (x, w, None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1)
        forward = _describe(torch.ops.aten.convolution.default, up, phase="forward")
        args = (torch.ops.aten.convolution.default(*up), x, w, None, *up[3:], [True, True, False])
        backward = _describe(torch.ops.aten.convolution_backward.default, args, phase="backward")
        # The convolution it transposes: Conv2d(64, 128, 2, stride=2) of the 28x28 maps.
        y = torch.empty(8, 64, 28, 28)
        down = (y, w, None, [2, 2], [0, 0], [1, 1], False, [0, 0], 1)
        direct = _describe(torch.ops.aten.convolution.default, down, phase="forward")
        args = (torch.ops.aten.convolution.default(*down), y, w, None, *down[3:], [True, True, False])
        direct_backward = _describe(torch.ops.aten.convolution_backward.default, args, phase="backward")
    # cuDNN runs the forward as that convolution's data gradient, the backward as its forward
    # (the input's gradient) and its weight gradient.
    assert forward.passes == ("dgrad",) and forward.gemms == (direct_backward.gemms[0],)
    assert backward.passes == ("fwd", "wgrad") and backward.gemms == (direct.gemms[0], direct_backward.gemms[1])
    # Each of the 28x28 output pixels takes one tap of one input pixel: the GEMM does the
    # convolution's own multiply-adds (taken as a forward convolution of 128 to 128 channels on
    # the 28x28 maps, it did 8 times as many).
    batch, m, n, k = forward.gemms[0]
    assert 2 * batch * m * n * k == forward.flops == 2 * 8 * 784 * 64 * 128
    assert kernel_seconds(OpRecord("aten.convolution.default", "forward", "", forward), TOY, COEF) < (
        kernel_seconds(OpRecord("aten.convolution.default", "forward", "", replace(forward, gemms=((8, 196, 128, 64 * 4),))),
                       TOY, COEF))


def test_3x3_stride_1_convolutions_are_a_kernel_family_of_their_own():
    with FakeTensorMode():
        x = torch.empty(8, 64, 28, 28)
        kinds = [_conv_cost(x, 64, kernel=k, stride=s).kernel for k, s in ((3, 1), (3, 2), (5, 1), (7, 1))]
    assert kinds == ["dense_3x3", "dense", "dense", "dense"]


def test_only_convolutions_cudnn_runs_in_nhwc_pay_for_the_layout_conversion():
    with FakeTensorMode():
        x = torch.empty(8, 64, 14, 14, dtype=torch.bfloat16)
        aligned = torch.empty(8, 64, 16, 16, dtype=torch.bfloat16)
        dense, pointwise = _conv_cost(aligned, 128), _conv_cost(aligned, 128, kernel=1)
        pointwise_grad = _conv_cost(aligned, 128, kernel=1, backward=True)
        odd_map, odd_map_grad = _conv_cost(x, 128, kernel=1), _conv_cost(x, 128, kernel=1, backward=True)
        fp32 = _conv_cost(torch.empty(8, 64, 14, 14), 128)
        fp32_odd_map = _conv_cost(torch.empty(8, 64, 14, 14), 128, kernel=1)
    # A 3x3 convolution of an NCHW bf16 tensor converts its input, weight and output to NHWC and back.
    assert dense.layout_bytes == 2 * (8 * 64 * 256 + 128 * 64 * 9 + 8 * 128 * 256) * 2
    # A 1x1 stride-1 convolution is a GEMM per image in NCHW when an image's pixels keep 16-byte rows
    # (256 pixels); 196 do not, and that one converts like a 3x3 one, forward and backward.
    assert pointwise.kernel == "pointwise" and pointwise.layout_bytes == pointwise_grad.layout_bytes == 0
    assert odd_map.kernel == "pointwise" and odd_map.layout_bytes == 2 * (8 * 64 * 196 + 128 * 64 + 8 * 128 * 196) * 2
    assert odd_map_grad.layout_bytes > 0
    # fp32 convolutions run without the conversion, whatever the map.
    assert fp32.layout_bytes == fp32_odd_map.layout_bytes == 0


def test_a_convolutions_bias_pass_costs_the_same_in_half_precision_as_in_fp32_on_a_gpu():
    with FakeTensorMode():
        half = _conv_cost(torch.empty(8, 64, 16, 16, dtype=torch.bfloat16), 128, bias=True)
        full = _conv_cost(torch.empty(8, 64, 16, 16), 128, bias=True)

    def bias_seconds(cost: OpCost) -> float:
        def seconds(c: OpCost) -> float:
            return kernel_seconds(OpRecord("aten.convolution.default", "forward", "", c), TOY, COEF)
        return seconds(cost) - seconds(replace(cost, aux_bytes=0.0))

    # The bf16 output has half the bytes, but the broadcast add runs per element: the same time.
    assert half.aux_bytes == full.aux_bytes / 2
    assert bias_seconds(full) > 0 and bias_seconds(half) == pytest.approx(bias_seconds(full), rel=1e-6)


def test_each_pass_of_a_convolution_is_bound_by_its_own_gemm_or_bytes():
    with FakeTensorMode():
        x = torch.empty(8, 64, 14, 14)
        grad = _conv_cost(x, 128, backward=True)
        # A first layer's backward: no gradient for its input.
        args = (torch.empty(8, 128, 14, 14), x, torch.empty(128, 64, 3, 3), None, [1, 1], [1, 1], [1, 1], False,
                [0, 0], 1, [False, True, False])
        grad_first = _describe(torch.ops.aten.convolution_backward.default, args, phase="backward")
    data, weight, output = 8 * 64 * 196 * 4, 128 * 64 * 9 * 4, 8 * 128 * 196 * 4
    # The data gradient reads the output gradient and the weight and writes the input's gradient; the
    # weight gradient reads the output gradient and the input and writes the weight's.
    assert grad.pass_bytes == (output + weight + data, output + data + weight)
    assert grad_first.pass_bytes == (0.0, output + data + weight)
    assert grad_first.gemms[0] == (0, 0, 0, 0)
    # A backward whose two kernels are bound differently costs the sum of each one's own bound,
    # not the larger of the summed FLOP time and the summed bytes.
    unit_rates = replace(COEF, mem_eff={**COEF.mem_eff, "conv": 1.0}, conv_eff={"conv": 1.0})
    op = OpRecord("aten.convolution_backward.default", "backward", "", replace(grad, pass_bytes=(1e9, 1.0)))
    compute = [wave_seconds(*g, "fp32", TOY, unit_rates) for g in grad.gemms]
    assert kernel_seconds(op, TOY, unit_rates) == pytest.approx(1e9 / 1e12 + compute[1])
    assert kernel_seconds(op, TOY, unit_rates) > max(sum(compute), (1e9 + 1.0) / 1e12)


def test_only_a_convolutions_weight_gradient_splits_its_long_reduction():
    # A 7x7 convolution of 1024 to 128 channels over one 7x7 image: the forward GEMM has 49 x 128
    # outputs over K = 1024 * 49. Its kernel runs each output tile over the whole K (at most 2 x 4
    # tiles of 32x32 on 128 SMs), so it takes far longer than a split-K GEMM of the same shape; the
    # weight gradient (128 x 50176 outputs over K = 49 pixels) may still split.
    device = replace(TOY, sm_count=128)
    unit_rates = replace(COEF, mem_eff={**COEF.mem_eff, "conv": 1.0}, conv_eff={"conv": 1.0})
    with FakeTensorMode():
        x = torch.empty(1, 1024, 7, 7)
        forward = _conv_cost(x, 128, kernel=7)
        backward = _conv_cost(x, 128, kernel=7, backward=True)
    fwd_gemm = forward.gemms[0]
    unsplit = wave_seconds(*fwd_gemm, "fp32", device, unit_rates, max_split=1)
    assert unsplit > 4 * wave_seconds(*fwd_gemm, "fp32", device, unit_rates)
    op = OpRecord("aten.convolution.default", "forward", "", replace(forward, layout_bytes=0.0))
    assert kernel_seconds(op, device, unit_rates) == pytest.approx(
        max(unsplit, forward.bytes / 1e12) + pick(unit_rates.latency_s, ("conv", "dense", "fwd"), 0.0))
    dgrad, wgrad = backward.gemms
    grad_op = OpRecord("aten.convolution_backward.default", "backward", "", replace(backward, layout_bytes=0.0))
    passes = [max(wave_seconds(*dgrad, "fp32", device, unit_rates, max_split=1), backward.pass_bytes[0] / 1e12),
              max(wave_seconds(*wgrad, "fp32", device, unit_rates), backward.pass_bytes[1] / 1e12)]
    latency = pick(unit_rates.latency_s, ("conv", "dense", "bwd"), 0.0)
    assert kernel_seconds(grad_op, device, unit_rates) == pytest.approx(sum(passes) + latency)


def test_batch_norm_over_small_feature_maps_is_slower_per_byte():
    coef = replace(COEF, extra={"batch_norm_run_half": 49.0}, mem_eff={"elementwise": 1.0})
    # 12 MB at 1000 GB/s is 12 us; in runs of one 7x7 map (49 values), half the bandwidth: 24 us.
    small = OpRecord("aten.native_batch_norm.default", "forward", "",
                     OpCost("batch_norm", 0.0, 12e6, 1, "fp32", dims=(10**5, 960, 49)))
    assert kernel_seconds(small, TOY, coef) == pytest.approx(24e-6)
    large = replace(small, cost=replace(small.cost, dims=(10**5, 960, 112 * 112)))
    assert kernel_seconds(large, TOY, coef) == pytest.approx(12e-6 * (12544 + 49) / 12544)


def _batch_norm_dims(x: torch.Tensor) -> tuple[int, ...]:
    channels = x.shape[1]
    args = (x, *(torch.empty(channels) for _ in range(4)), True, 0.1, 1e-5)
    return _describe(torch.ops.aten.native_batch_norm.default, args, phase="forward").dims


def test_batch_norm_records_its_feature_map_size_for_nchw_input_only():
    with FakeTensorMode():
        assert _batch_norm_dims(torch.empty(8, 16, 7, 7)) == (8 * 49, 16, 49)
        # BatchNorm1d over (N, C) and channels-last maps read along the channels: no short runs.
        assert _batch_norm_dims(torch.empty(4096, 1024)) == (4096, 1024)
        channels_last = torch.empty(8, 16, 7, 7).to(memory_format=torch.channels_last)
        assert _batch_norm_dims(channels_last) == (8 * 49, 16)


def test_multi_tensor_ops_count_each_list_once_and_every_returned_tensor():
    with FakeTensorMode():
        moments = [torch.empty(1000), torch.empty(3000)]
        grads = [torch.empty(1000), torch.empty(3000)]
        # AdamW's second moment: v += (1 - beta2) * g * g reads g once, so v and g in, v out.
        addcmul = _describe(torch.ops.aten._foreach_addcmul_.Scalar, (moments, grads, grads, 0.001), phase="optimizer")
        assert addcmul.op_class == "optimizer"
        assert addcmul.bytes == 4 * 4000 * 3
        # Out of place, one Tensor[] return: all of its tensors are written.
        sqrt = _describe(torch.ops.aten._foreach_sqrt.default, (moments,), phase="optimizer")
        assert sqrt.bytes == 4 * 4000 * 2
        x = torch.empty(64, 128)
        square = _describe(torch.ops.aten.mul.Tensor, (x, x), phase="forward")
        assert square.bytes == 4 * 64 * 128 * 2


def test_max_pool_backward_reads_the_output_gradient_and_indices_not_the_input():
    with FakeTensorMode():
        x = torch.empty(2, 8, 16, 16, dtype=torch.bfloat16)
        out, indices = torch.ops.aten.max_pool2d_with_indices.default(x, [2, 2], [2, 2])
        grad = torch.empty_like(out)
        args = (grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)
        cost = _describe(torch.ops.aten.max_pool2d_with_indices_backward.default, args, phase="backward")
        # Counted at fp32 width (pooling runs as fast in every dtype): the output gradient and
        # the int64 indices in, the input's gradient out.
        assert cost.bytes == out.numel() * (4 + 8) + x.numel() * 4


def test_multi_tensor_kernels_stream_at_the_elementwise_efficiency():
    # No op row times the optimizer's or the grad scaler's kernels on their own; they are
    # elementwise kernels over chunks and take that class's efficiency.
    for op_class in ("optimizer", "scaler"):
        assert HOPPER.memory_efficiency(op_class, "bf16") == HOPPER.mem_eff["elementwise"]


def test_shipped_coefficients_are_fractions_of_peak():
    for table in (HOPPER.gemm_eff, HOPPER.attention_eff):
        assert all(0.0 < v <= 1.5 for v in table.values())
    assert all(0.0 < v <= 1.0 for v in HOPPER.mem_eff.values())
    assert math.isfinite(HOPPER.host_step_s) and HOPPER.host_step_s > 0


def _depthwise_cost(x: torch.Tensor, kernel: int, stride: int = 1, backward: bool = False) -> OpCost:
    return _conv_cost(x, x.shape[1], backward=backward, kernel=kernel, stride=stride, groups=x.shape[1])


def test_fp16_depthwise_convolutions_that_pytorch_hands_to_cudnn_are_priced_as_cudnn_kernels():
    with FakeTensorMode():
        x = torch.empty(32, 256, 28, 28)
        fp16 = {k: _depthwise_cost(x.half(), k) for k in (3, 5, 7)}
        fp16_backward = _depthwise_cost(x.half(), 3, backward=True)
        bf16 = _depthwise_cost(x.bfloat16(), 3)
        few_channels = _depthwise_cost(torch.empty(32, 16, 28, 28).half(), 3)  # cuDNN needs 32 channels
        strided_narrow = _depthwise_cost(torch.empty(32, 128, 28, 28).half(), 3, stride=2)  # PyTorch's table: no
        strided_wide = _depthwise_cost(torch.empty(32, 512, 28, 28).half(), 3, stride=2)
        channels_last = _depthwise_cost(x.to(memory_format=torch.channels_last), 7)
    assert {c.op_class for c in (*fp16.values(), bf16)} == {"conv_dw"}
    assert fp16[3].kernel == fp16[5].kernel == fp16_backward.kernel == "depthwise_cudnn"
    assert fp16[7].kernel == bf16.kernel == "depthwise"  # PyTorch's own kernel: 7x7, and bf16 at any size
    assert few_channels.kernel == strided_narrow.kernel == "depthwise"
    assert strided_wide.kernel == channels_last.kernel == "depthwise_cudnn"
    # PyTorch's kernel moves its half-precision bytes at fp32 width; cuDNN's at their own.
    assert fp16[3].bytes == pytest.approx(bf16.bytes / 2, rel=0.01)

    h100 = get_device("h100-sxm")

    def seconds(cost: OpCost) -> float:
        return kernel_seconds(OpRecord("aten.convolution.default", "forward", "", cost), h100, HOPPER)

    # cuDNN's fp16 kernel, at its own fitted rates: faster than PyTorch's kernel on the same shape
    # (the H100 ran such convolutions in a third of the bf16 time).
    assert seconds(fp16[3]) < 0.7 * seconds(bf16)
    cpu = replace(HOPPER, extra={**HOPPER.extra, "gemm_model": "roofline"})
    coef_cpu = replace(cpu, compute_eff={"conv_dw": 0.1, "conv_dw:fwd:cudnn": 0.9})
    # A CPU target has no cuDNN: the rate of PyTorch's kernel for its dtype family, whatever the trace says.
    assert kernel_seconds(OpRecord("aten.convolution.default", "forward", "", fp16[3]), h100, coef_cpu) == pytest.approx(
        kernel_seconds(OpRecord("aten.convolution.default", "forward", "", replace(fp16[3], kernel="depthwise")), h100,
                       coef_cpu))


def test_a_cast_to_a_smaller_dtype_streams_at_its_own_rate():
    with FakeTensorMode():
        x = torch.empty(1024, 1024)
        down = describe_op(torch.ops.aten._to_copy.default, (x,), {"dtype": torch.bfloat16},
                           x.to(torch.bfloat16), matmul_tf32=False, conv_tf32=False, phase="forward")
        y = torch.empty(1024, 1024, dtype=torch.bfloat16)
        up = describe_op(torch.ops.aten._to_copy.default, (y,), {"dtype": torch.float32},
                         y.float(), matmul_tf32=False, conv_tf32=False, phase="forward")
    assert (down.op_class, down.kernel, up.op_class, up.kernel) == ("cast", "narrowing", "cast", "widening")
    assert down.bytes == up.bytes == 6 * 1024 * 1024
    # The same 6 MiB at 1000 GB/s: 7.0 us at 0.9 of it, 10.5 us at 0.6.
    coef = replace(COEF, mem_eff={"elementwise": 1.0, "cast": 0.5, "cast:narrowing": 0.9, "cast:widening": 0.6})
    op = OpRecord("aten._to_copy.default", "forward", "", down)
    assert kernel_seconds(op, TOY, coef) == pytest.approx(6 * 2**20 / 0.9e12)
    assert kernel_seconds(replace(op, cost=up), TOY, coef) == pytest.approx(6 * 2**20 / 0.6e12)


def _toy_cpu(fault_s_per_byte: float = 0.0, stream_copy_gbps: float = 0.0) -> tuple[DeviceSpec, CostCoefficients]:
    """A probed toy CPU: 1 TFLOP/s fp32 at large sizes, half that with a 64-wide side (half-rate at
    64), 2 us per small op, copies at 100 GB/s in cache and 50 over 64 MB."""
    from ptp_callback.probe import ProbeResult, cpu_coefficients, cpu_spec

    probed = ProbeResult("toy cpu", torch.__version__, 2, {"fp32": {"64x1024x1024": 0.5, "512": 1.0}}, 50.0,
                         2e-6, 4e-6, 0.1, 100.0, fault_s_per_byte=fault_s_per_byte, stream_copy_gbps=stream_copy_gbps)
    return cpu_spec(probed), cpu_coefficients(probed)


def test_a_cpu_step_streams_its_tensors_from_memory_but_an_optimizer_reuses_a_parameters_from_cache():
    """A 2-thread Xeon copied 32 MB at 54 GB/s (its last-level cache) and 2 x 256 MB at 27; a GPT-2
    step's 4 MB multiplies ran at the slower rate (0.35-0.69 ms, 0.155 repeated alone), and the CPU
    steps of transformers were predicted 15-26% short. A per-parameter AdamW's ops go over one
    parameter's tensors in turn, which stay cached: at the slower rate ResNet-18's were 2x over; at
    the in-cache rate, 100 AdamW parameters of 256 KB came out at 0.52x their time."""
    device, coef = _toy_cpu(stream_copy_gbps=20.0)
    assert device.memory_bw_gbs == 20.0
    assert _toy_cpu()[0].memory_bw_gbs == 50.0  # a probe cached before the streaming rate was measured

    def mul(numel: int) -> OpCost:
        with FakeTensorMode():
            a, b = torch.randn(numel), torch.randn(numel)
            func = torch.ops.aten.mul.Tensor
            return describe_op(func, (a, b), {}, func(a, b), matmul_tf32=False, conv_tf32=False, phase="forward")

    large, small = mul(2**20), mul(2**16)  # 12 MiB and 768 KiB read and written
    efficiency = coef.memory_efficiency("elementwise", "fp32")
    forward = kernel_seconds(OpRecord("aten.mul.Tensor", "forward", "", large), device, coef)
    assert forward == pytest.approx(large.bytes / (20e9 * efficiency))
    optimizer = kernel_seconds(OpRecord("aten.mul.Tensor", "optimizer", "", large), device, coef)
    assert optimizer == pytest.approx(large.bytes / (50e9 * efficiency))
    cached = kernel_seconds(OpRecord("aten.mul.Tensor", "forward", "", small), device, coef)
    assert cached == pytest.approx(small.bytes / (100e9 * efficiency))
    # Each parameter's first op fetches its tensors afresh, however small they are.
    small_optimizer = kernel_seconds(OpRecord("aten.mul.Tensor", "optimizer", "", small), device, coef)
    assert small_optimizer == pytest.approx(small.bytes / (50e9 * efficiency))


def test_a_cpus_batch_norm_has_no_gpus_penalty_for_few_channels_or_small_maps():
    """A GPU's batch norm kernels give a channel's statistics to one SM: 32 channels use a fraction
    of it (fitted on the H100). A CPU splits a channel's rows among its threads: a BatchNorm1d over
    32 channels of 3,981 steps was predicted 4x its measured 2.6 ms backward with the GPU's factors."""
    device, coef = _toy_cpu(stream_copy_gbps=20.0)
    cost = OpCost("batch_norm", 0.0, 48e6, 1, "fp32", backward=True, dims=(32 * 3981, 32, 3981))
    op = OpRecord("aten.native_batch_norm_backward.default", "backward", "", cost)
    efficiency = coef.memory_efficiency("batch_norm", "fp32", backward=True)
    assert kernel_seconds(op, device, coef) == pytest.approx(48e6 / (20e9 * efficiency))
    h100 = get_device("h100-sxm")
    plain = replace(HOPPER, extra={k: v for k, v in HOPPER.extra.items() if not k.startswith("batch_norm")})
    assert kernel_seconds(op, h100, HOPPER) > 1.5 * kernel_seconds(op, h100, plain)  # the GPU keeps them


def test_a_cpus_onednn_lstm_layer_is_priced_as_its_gemms_gate_arithmetic_and_set_up():
    """CPUs with native bf16 run ``nn.LSTM`` as one oneDNN op per layer (``mkldnn_rnn_layer``), which
    was classed as a pointwise op without FLOPs: a 2-layer LSTM language model's CPU step was
    predicted at 14 ms and measured at 60 ms. Its GEMMs alone left out each step's gate activations
    and each call's set-up: 22 fp32 LSTMs on a 2-thread Xeon were predicted 0.83x their time (median)."""
    from ptp_callback.probe import ProbeResult, cpu_coefficients, cpu_spec

    probed = ProbeResult("toy cpu", torch.__version__, 2, {"fp32": {"64x1024x1024": 0.5, "512": 1.0}}, 50.0, 2e-6,
                         4e-6, 0.1, 100.0, element_s={"sigmoid": 1e-9, "tanh": 2e-9})
    device, coef = cpu_spec(probed), cpu_coefficients(probed)
    batch, seq, inp, hidden = 32, 64, 128, 256
    with FakeTensorMode():
        # As nn.LSTM(batch_first=True) calls it: the input already transposed to (seq, batch, input).
        x, hx, cx = torch.randn(seq, batch, inp), torch.randn(batch, hidden), torch.randn(batch, hidden)
        w_ih, w_hh, b = torch.randn(4 * hidden, inp), torch.randn(4 * hidden, hidden), torch.randn(4 * hidden)
        args = (x, w_ih, w_hh, b, b, hx, cx, False, [], 2, hidden, 1, True, False, True, True)
        func = torch.ops.aten.mkldnn_rnn_layer.default
        cost = describe_op(func, args, {}, func(*args), matmul_tf32=False, conv_tf32=False, phase="forward")
    assert (cost.op_class, cost.dims) == ("recurrent", (4, 1, 1, batch, seq, inp, hidden, 0))
    assert cost.flops == 2.0 * batch * seq * 4 * hidden * (inp + hidden)

    def gemm(m: int, n: int, k: int) -> float:
        smallest = min(m, n, k)
        return 2.0 * m * n * k / (1e12 * smallest / (smallest + 64))

    # The input projection over all steps and one recurrent GEMM per step (fp32 forward GEMMs at
    # 1.2x their time), each step's 3 sigmoids and 2 tanhs over its 32 x 256 cells, the call's set-up.
    gates = batch * hidden * (3 * 1e-9 + 2 * 2e-9)
    gemms = gemm(batch * seq, 4 * hidden, inp) + seq * gemm(batch, 4 * hidden, hidden)
    expected = 1.2 * gemms + seq * gates + 50 * 2e-6
    op = OpRecord(str(func), "forward", "", cost)
    assert math.isclose(kernel_seconds(op, device, coef), expected, rel_tol=1e-9)
    # Backward: the data- and weight-gradient GEMMs, the gates' gradients at 3x their activations' time.
    back = replace(cost, backward=True)
    gemms = (gemm(batch * seq, inp, 4 * hidden) + gemm(inp, 4 * hidden, batch * seq)
             + seq * (gemm(batch, hidden, 4 * hidden) + gemm(hidden, 4 * hidden, batch)))
    expected = gemms + seq * 3 * gates + 20 * 2e-6
    assert math.isclose(kernel_seconds(OpRecord(str(func), "backward", "", back), device, coef), expected, rel_tol=1e-9)


def test_a_cpus_convolutions_are_their_gemms_plus_passes_over_their_tensors_and_a_cost_per_call():
    """oneDNN's convolutions on a 2-thread Xeon (80 random ones, 2026-11-29): the implicit GEMMs near
    the probed peak, a stride's backward slower, passes over the tensors (its reorders to and from
    its blocked layouts) and a fixed cost per call; one efficiency per family had priced their
    backward 31% off in fp32, 61% in bf16 (median)."""
    from ptp_callback.probe import CPU_CONV_BYTE_PASSES, CPU_CONV_CALL_OPS, CPU_CONV_EFF, CPU_CONV_WEIGHT_PASSES

    device, coef = _toy_cpu(stream_copy_gbps=20.0)
    rate, bandwidth, small = 1e12 * CPU_IN_STEP_GEMM_RATE, device.memory_bw_gbs * 1e9, 2e-6

    def seconds(n: int, c_in: int, c_out: int, hw: int, k: int, stride: int = 1, backward: bool = False):
        with FakeTensorMode():
            x, w = torch.randn(n, c_in, hw, hw), torch.randn(c_out, c_in, k, k)
            func = torch.ops.aten.convolution.default
            args = (x, w, None, [stride] * 2, [k // 2] * 2, [1, 1], False, [0, 0], 1)
            out = func(*args)
            if backward:
                func = torch.ops.aten.convolution_backward.default
                args = (torch.randn_like(out), x, w, None, [stride] * 2, [k // 2] * 2, [1, 1], False, [0, 0], 1,
                        [True, True, False])
                out = func(*args)
            cost = describe_op(func, args, {}, out, matmul_tf32=False, conv_tf32=False,
                               phase="backward" if backward else "forward")
        return kernel_seconds(OpRecord(str(func), cost.backward and "backward" or "forward", "", cost), device,
                              coef), cost

    dense, cost = seconds(32, 256, 256, 28, 3)
    weights = 256 * 256 * 9 * 4
    passes = (cost.bytes - weights) * CPU_CONV_BYTE_PASSES["fwd"] + weights * CPU_CONV_WEIGHT_PASSES["fwd"]
    assert dense == pytest.approx(cost.flops / (CPU_CONV_EFF["conv:dense_3x3:fwd"] * rate) + passes / bandwidth
                                  + CPU_CONV_CALL_OPS["fwd"] * small, rel=1e-9)
    # a stride of 2 over an input of twice the side: the same GEMMs, a slower backward
    unstrided, unstrided_cost = seconds(8, 64, 64, 16, 3, backward=True)
    strided, strided_cost = seconds(8, 64, 64, 32, 3, stride=2, backward=True)
    assert strided_cost.flops == unstrided_cost.flops and strided > 1.3 * unstrided
    # a tiny one costs its call
    tiny, _ = seconds(8, 16, 16, 4, 3)
    assert CPU_CONV_CALL_OPS["fwd"] * small <= tiny < 1.2 * CPU_CONV_CALL_OPS["fwd"] * small


def test_a_cpus_depthwise_weight_gradient_beyond_onednns_direct_kernel_is_an_im2col_gemm_per_image_and_channel():
    """oneDNN's direct depthwise weight-gradient kernel takes filters up to 3x3 over inputs that hold
    them; others fall back to an im2col and a small GEMM per image and channel (its verbose log).
    EfficientNet-B0's 5x5 backward over 16 x 1152 2x2 maps took 4.6 ms on a 2-thread Xeon, priced
    1.0 ms at one rate by filter size; over 219 random ones median error 36% -> 18%."""
    device, coef = _toy_cpu()
    per_map = 0.09 * 2e-6

    def backward(k: int, side: int, stride: int = 1) -> tuple[float, float, OpCost]:
        with FakeTensorMode():
            x, w = torch.randn(16, 240, side, side), torch.randn(240, 1, k, k)
            func = torch.ops.aten.convolution.default
            y = func(x, w, None, [stride] * 2, [k // 2] * 2, [1, 1], False, [0, 0], 240)
            func = torch.ops.aten.convolution_backward.default
            args = (torch.randn_like(y), x, w, None, [stride] * 2, [k // 2] * 2, [1, 1], False, [0, 0], 240,
                    [True, True, False])
            cost = describe_op(func, args, {}, func(*args), matmul_tf32=False, conv_tf32=False, phase="backward")
        assert cost.op_class == "conv_dw"
        return kernel_seconds(OpRecord(str(func), "backward", "", cost), device, coef), cost.flops, cost

    call = 56 * 2e-6
    # The toy CPU's fp32 peak is 1 TFLOP/s. A 3x3 filter over 12x12 maps: the direct kernel, both passes
    # at 12% of it (or their bytes).
    direct, direct_flops, direct_cost = backward(3, 12)
    assert direct_cost.dims[8:10] == (3, 12 - 3) and direct >= call + direct_flops / 0.12e12
    # A 5x5 one: the data gradient still direct, the weight gradient 16 x 240 GEMMs at 1.75% of the peak
    # (a column of 25 taps x 144 pixels fits the caches).
    fallback, fallback_flops, fallback_cost = backward(5, 12)
    weight_grad = 16 * 240 * per_map + fallback_flops / 2 / 0.0175e12
    data_grad = max(fallback_flops / 2 / 0.12e12,
                    memory_seconds(fallback_cost.bytes, device, coef, "conv_dw", "fp32", True))
    assert fallback == pytest.approx(call + data_grad + weight_grad)
    assert fallback > 4 * direct
    # A 3x3 filter over 2x2 maps does not fit them; over 3x3 maps it does, unless a stride of 2 skips
    # the padded first row.
    assert backward(3, 2)[2].dims[9] < 0 and backward(3, 3)[2].dims[9] == 0 and backward(3, 3, stride=2)[2].dims[9] < 0
    tiny, tiny_flops, _ = backward(3, 2)
    assert tiny >= call + 16 * 240 * per_map + tiny_flops / 2 / 0.0175e12
    # A 7x7 filter over 28x28 maps: a column of 49 x 784 pixels outgrows the caches, 0.8% of the peak.
    spill, spill_flops, _ = backward(7, 28)
    assert spill >= call + 16 * 240 * per_map + spill_flops / 2 / 0.008e12

    def seconds(shape: tuple[int, ...], filter_sides: tuple[int, ...]) -> float:
        with FakeTensorMode():
            x, w = torch.randn(16, 240, *shape), torch.randn(240, 1, *filter_sides)
            pad, ones = [k // 2 for k in filter_sides], [1] * len(shape)
            func = torch.ops.aten.convolution_backward.default
            args = (torch.randn(16, 240, *shape), x, w, None, ones, pad, ones, False, [0] * len(shape), 240,
                    [True, True, False])
            cost = describe_op(func, args, {}, func(*args), matmul_tf32=False, conv_tf32=False, phase="backward")
        return kernel_seconds(OpRecord(str(func), "backward", "", cost), device, coef)

    # Only the filter's width and the input's height count: a 5x3 filter runs the direct kernel, a 3x5
    # one falls back; in 1-D (no height) a filter of 3 over 2 steps runs it, one of 5 does not.
    assert seconds((12, 12), (3, 5)) > 3 * seconds((12, 12), (5, 3))
    assert seconds((12,), (5,)) > 3 * seconds((12,), (3,)) and seconds((2,), (3,)) < 1.5 * call


def test_an_embedding_lookup_moves_the_rows_it_selects_not_the_whole_table():
    """On the H100, 8,652 tokens looked up in a 32,000 x 2,048 fp32 table took 52.7 us: their rows
    (71 MB) read and written, not the 262 MB table read (priced 131 us); the lookups of the op rows
    went from 30.1% to 26.8% median error with the shipped coefficients."""
    with FakeTensorMode():
        table, tokens = torch.randn(32000, 2048), torch.randint(0, 32000, (8652,))
        func = torch.ops.aten.embedding.default
        cost = describe_op(func, (table, tokens), {}, func(table, tokens), matmul_tf32=False, conv_tf32=False,
                           phase="forward")
        bag = torch.ops.aten._embedding_bag.default
        offsets = torch.arange(0, 8652, 4)
        bag_cost = describe_op(bag, (table, tokens, offsets), {}, bag(table, tokens, offsets), matmul_tf32=False,
                               conv_tf32=False, phase="forward")
    rows = 8652 * 2048 * 4
    assert cost.op_class == "embedding" and cost.bytes == 8652 * 8 + 2 * rows
    assert bag_cost.bytes < 2 * rows  # the rows of every index read, the bags' sums written


def test_a_cpu_op_pays_the_probed_first_touch_of_outputs_the_allocator_maps_afresh():
    """glibc maps every allocation over 32 MiB afresh, and the first write to its pages costs the
    operating system's mapping and zeroing: 0.17 ns a byte on a 2-thread Xeon, 6x the fill itself
    (a GPT-2-sized vocabulary's logits). Smaller outputs reuse memory the step freed."""
    device, coef = _toy_cpu(fault_s_per_byte=1e-10)

    def add(numel: int) -> OpCost:
        with FakeTensorMode():
            a, b = torch.randn(numel), torch.randn(numel)
            func = torch.ops.aten.add.Tensor
            return describe_op(func, (a, b), {}, func(a, b), matmul_tf32=False, conv_tf32=False, phase="forward")

    big, small = add(16 * 2**20), add(4 * 2**20)  # 64 MiB and 16 MiB outputs
    assert (big.fresh_bytes, small.fresh_bytes) == (64 * 2**20, 0.0)
    op = OpRecord("aten.add.Tensor", "forward", "", big)
    held = replace(coef, extra={**coef.extra, "fresh_byte_s": 0.0})
    assert math.isclose(kernel_seconds(op, device, coef) - kernel_seconds(op, device, held), 64 * 2**20 * 1e-10)
    assert kernel_seconds(op, get_device("h100-sxm"), HOPPER) == kernel_seconds(
        OpRecord("aten.add.Tensor", "forward", "", replace(big, fresh_bytes=0.0)), get_device("h100-sxm"), HOPPER)


def test_a_cpu_gemm_in_a_step_runs_below_the_probes_warm_rate():
    """The probe keeps the best of three runs on the same operands; in a step a GEMM's operands come
    from other ops and the BLAS threads wake for it: a 2-thread Xeon ran seven models' step GEMMs at
    1.04-1.24x (median 1.13) their probed time (``benchmarks/cpu_steps.py``). An oneDNN LSTM layer's
    GEMM scales were fitted on whole layers, which time their GEMMs in a step's conditions already
    (the LSTM test above prices them at the probed rate). A GPU's coefficients have no such factor."""
    device, coef = _toy_cpu()
    func = torch.ops.aten.mm.default
    with FakeTensorMode():
        a, b = torch.randn(512, 1024), torch.randn(1024, 1024)
        cost = describe_op(func, (a, b), {}, func(a, b), matmul_tf32=False, conv_tf32=False, phase="forward")
    probed_rate = 1e12  # the toy CPU's 512^3 rate; a 512-wide side runs at 512 / (512 + 64) of it
    seconds = kernel_seconds(OpRecord("aten.mm.default", "forward", "", cost), device, coef)
    assert seconds == pytest.approx(cost.flops / (probed_rate * 512 / 576 * CPU_IN_STEP_GEMM_RATE))
    assert 0.8 < CPU_IN_STEP_GEMM_RATE < 1.0
    assert pick(HOPPER.gemm_eff, ("in_step",), 1.0) == 1.0


def test_a_cpu_without_matrix_instructions_prices_row_major_and_transposed_gemms_at_their_own_rates():
    """On an AVX2 EPYC (no bf16 matrix instructions) PyTorch's fallback ran a bf16 ``64x1024 @
    1024x1024`` in 137 ms with both operands row-major and in 6.5 ms as ``x @ weight.t()``: a bf16
    MLP's step, whose one row-major GEMM is its input gradient, was predicted at 907 ms with every
    GEMM at the row-major rate the probe timed, and took 340 ms."""
    from ptp_callback.costs import ROW_MAJOR_GEMM
    from ptp_callback.probe import ProbeResult, cpu_coefficients, cpu_spec

    probed = ProbeResult("toy cpu", torch.__version__, 2,
                         {"fp32": {"64x1024x1024": 0.5, "512": 1.0}, "bf16": {"64x1024x1024": 0.001, "256": 0.002}},
                         50.0, 2e-6, 4e-6, 0.1, 100.0, gemm_transposed_tflops={"fp32": 0.55, "bf16": 0.021})
    device, coef = cpu_spec(probed), cpu_coefficients(probed)
    assert coef.extra["gemm_transposed_speedup"] == {"bf16": pytest.approx(21.0)}  # fp32: one kernel
    func = torch.ops.aten.mm.default
    with FakeTensorMode():
        x, weight = torch.randn(128, 1024, dtype=torch.bfloat16), torch.randn(1024, 1024, dtype=torch.bfloat16)
        forward = describe_op(func, (x, weight.t()), {}, func(x, weight.t()), matmul_tf32=False, conv_tf32=False,
                              phase="forward")
        input_grad = describe_op(func, (x, weight), {}, func(x, weight), matmul_tf32=False, conv_tf32=False,
                                 phase="backward")
        fp32 = describe_op(func, (x.float(), weight.float()), {}, func(x.float(), weight.float()),
                           matmul_tf32=False, conv_tf32=False, phase="backward")
    assert (forward.kernel, input_grad.kernel, fp32.kernel) == ("", ROW_MAJOR_GEMM, ROW_MAJOR_GEMM)
    transposed_s = kernel_seconds(OpRecord("aten.mm.default", "forward", "", forward), device, coef)
    row_major_s = kernel_seconds(OpRecord("aten.mm.default", "backward", "", input_grad), device, coef)
    assert row_major_s == pytest.approx(21.0 * transposed_s)
    # Where one kernel runs both layouts, both are priced at the probed rate.
    as_transposed = replace(fp32, kernel="")
    assert kernel_seconds(OpRecord("aten.mm.default", "backward", "", fp32), device, coef) == pytest.approx(
        kernel_seconds(OpRecord("aten.mm.default", "backward", "", as_transposed), device, coef))


def test_a_hopper_tf32_weight_gradient_runs_at_its_own_rate_and_aligned_gemms_stream_like_a_copy():
    """Hopper's TF32 tensor-core instructions read only operands laid out along K. A linear layer's
    weight gradient ``grad_out.t() @ input`` has neither: the H100's profiled TF32 steps ran those
    GEMMs at about 0.74 of the rate the row-major op rows give (``gemm_eff["mn_major:tf32"]``). A
    memory-bound aligned GEMM streams its operands like a copy (0.8-0.9 of the bandwidth in those
    profiles), a misaligned one at the fitted GEMM share."""
    from ptp_callback.costs import MN_MAJOR_GEMM, ROW_MAJOR_GEMM

    func = torch.ops.aten.mm.default

    def mm(a: torch.Tensor, b: torch.Tensor, tf32: bool = True) -> OpCost:
        return describe_op(func, (a, b), {}, func(a, b), matmul_tf32=tf32, conv_tf32=False, phase="backward")

    with FakeTensorMode():
        grad_out, x, w = torch.randn(8192, 1024), torch.randn(8192, 3072), torch.randn(1024, 3072)
        weight_grad, input_grad, forward = mm(grad_out.t(), x), mm(grad_out, w), mm(x, w.t())
        skinny = mm(torch.randn(200704, 64), torch.randn(64, 64))
    assert (weight_grad.kernel, input_grad.kernel, forward.kernel) == (MN_MAJOR_GEMM, ROW_MAJOR_GEMM, "")
    h100 = get_device("h100-sxm")

    def seconds(cost: OpCost, coef: CostCoefficients = HOPPER, device: DeviceSpec = h100) -> float:
        return gemm_seconds(cost, device, coef)

    same_rate = replace(HOPPER, gemm_eff={**HOPPER.gemm_eff, "mn_major:tf32": 1.0})
    assert seconds(weight_grad) > 1.2 * seconds(weight_grad, same_rate)
    assert seconds(forward) == seconds(forward, same_rate)
    # Not on a GPU whose TF32 instructions read either layout (Ampere), nor in another dtype.
    a100 = get_device("a100-sxm-80gb")
    assert seconds(weight_grad, HOPPER, a100) == seconds(weight_grad, same_rate, a100)
    # 51 MB in, 51 MB out, no math to speak of: the copy's share of the bandwidth, not the GEMM's.
    assert skinny.kernel == ROW_MAJOR_GEMM and not skinny.misaligned
    assert seconds(skinny) == pytest.approx(memory_seconds(skinny.bytes, h100, HOPPER, "elementwise", "tf32"))


def test_a_kernel_short_of_the_copy_rate_gains_less_than_the_bandwidth_on_a_gpu_with_more_per_sm():
    h100, h200 = get_device("h100-sxm"), get_device("h200-sxm")  # the same 132 SMs, 3352 and 4800 GB/s
    copy_share = HOPPER.mem_eff["elementwise"]
    gains = {}
    for efficiency in (copy_share, 0.8, 0.5, 0.2):
        # On the GPU the coefficients were fitted on, the rate is the efficiency's share of its bandwidth.
        assert stream_rate(h100, HOPPER, efficiency) == pytest.approx(efficiency * h100.memory_bw_gbs * 1e9)
        gains[efficiency] = stream_rate(h200, HOPPER, efficiency) / stream_rate(h100, HOPPER, efficiency)
    bandwidth_ratio = h200.memory_bw_gbs / h100.memory_bw_gbs
    assert gains[copy_share] == pytest.approx(bandwidth_ratio)
    # The further below a copy's rate a kernel ran, the more it was bound by its SMs, which did not grow.
    assert bandwidth_ratio > gains[0.8] > gains[0.5] > gains[0.2] > 1.0
    assert gains[0.2] < 1.03
    # A GPU with proportionally fewer SMs and less bandwidth scales every kernel by its bandwidth.
    half = replace(h100, key="half-h100", sm_count=66, memory_bw_gbs=h100.memory_bw_gbs / 2)
    for efficiency in (copy_share, 0.5, 0.2):
        assert stream_rate(half, HOPPER, efficiency) == pytest.approx(stream_rate(h100, HOPPER, efficiency) / 2)
    # One with more bandwidth but fewer SMs gains nothing on an SM-bound kernel from the bandwidth.
    narrow = replace(h200, key="narrow-h200", sm_count=66)
    assert stream_rate(narrow, HOPPER, 0.2) < stream_rate(h100, HOPPER, 0.2) * 0.6


def test_cudnns_fp32_depthwise_weight_gradient_runs_at_its_own_low_rate_and_only_when_computed():
    """A channels-last depthwise convolution runs on cuDNN in every dtype. In fp32 its weight gradient
    runs grouped implicit-GEMM and direct kernels far slower than the forward and the data gradient
    (ConvNeXt-T's 7x7 ones on an H200: 0.38 TFLOP/s); in half precision a specialized kernel."""
    h100 = get_device("h100-sxm")

    def backward(dtype: torch.dtype, mask: list[bool]) -> tuple[float, OpCost]:
        with FakeTensorMode():
            x = torch.randn(32, 96, 56, 56, dtype=dtype).to(memory_format=torch.channels_last)
            w = torch.randn(96, 1, 7, 7, dtype=dtype)
            func = torch.ops.aten.convolution.default
            y = func(x, w, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 96)
            func = torch.ops.aten.convolution_backward.default
            args = (torch.randn_like(y), x, w, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 96, mask)
            cost = describe_op(func, args, {}, func(*args), matmul_tf32=False, conv_tf32=True, phase="backward")
        assert cost.kernel == "depthwise_cudnn"
        return kernel_seconds(OpRecord(str(func), "backward", "", cost), h100, HOPPER), cost

    both, cost = backward(torch.float32, [True, True, False])
    data_only, data_cost = backward(torch.float32, [True, False, False])
    half, _ = backward(torch.bfloat16, [True, True, False])
    assert cost.passes == ("dgrad", "wgrad") and data_cost.passes == ("dgrad",)
    one_pass = 2.0 * 32 * 56 * 56 * 96 * 49
    weight_grad = one_pass / (HOPPER.compute_eff["conv_dw:wgrad:cudnn:fp32"] * peak_flops(h100, "fp32"))
    assert both == pytest.approx(data_only + weight_grad, rel=0.02)
    assert 1.5e-3 < weight_grad < 3.5e-3  # measured on the H200: 2.3 ms for this shape's weight gradient
    assert both > 4 * half  # the half-precision passes stay at the fitted cuDNN rate


def test_a_cpus_batch_norm_runs_at_its_probed_rate_per_element_and_moves_its_own_bytes():
    """A 2-thread Xeon (2026-11-29): a training batch norm took 0.85 ns an element in fp32 and 0.32
    from a bf16 input (autocast's), in and beyond the caches; priced by its bytes at fp32 width (a
    CUDA finding) and 0.3 of the copy rate, bf16 ones came out 3-4x their time (30 random shapes)."""
    from ptp_callback.probe import ProbeResult, cpu_coefficients, cpu_spec

    rates = {"native_batch_norm": 0.85e-9, "native_batch_norm:bf16": 0.32e-9}
    probed = ProbeResult("toy cpu", torch.__version__, 2, {"fp32": {"512": 1.0}}, 50.0, 2e-6, 4e-6, 0.1, 100.0,
                         element_s=rates, stream_copy_gbps=20.0)
    device, coef = cpu_spec(probed), cpu_coefficients(probed)

    def seconds(dtype: torch.dtype) -> tuple[float, int]:
        with FakeTensorMode():
            x, channels = torch.randn(32, 64, 28, 28, dtype=dtype), torch.ones(64)
            func = torch.ops.aten.native_batch_norm.default
            args = (x, channels, channels, channels, channels, True, 0.1, 1e-5)
            cost = describe_op(func, args, {}, func(*args), matmul_tf32=False, conv_tf32=False, phase="forward")
        return kernel_seconds(OpRecord(str(func), "forward", "", cost, in_shapes=(tuple(x.shape),),
                                       out_shapes=(tuple(x.shape),)), device, coef), x.numel()

    fp32, elements = seconds(torch.float32)
    bf16, _ = seconds(torch.bfloat16)
    assert elements * rates["native_batch_norm"] <= fp32 < 1.1 * elements * rates["native_batch_norm"]
    assert elements * rates["native_batch_norm:bf16"] <= bf16 < 1.1 * elements * rates["native_batch_norm:bf16"]
