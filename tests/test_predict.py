"""predict_step and the cost model: pinned arithmetic, physical sanity, errors."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ptp_callback as ptp
from ptp_callback.coefficients import HOPPER
from ptp_callback.costs import OpCost
from ptp_callback.predict import gemm_seconds, kernel_seconds
from ptp_callback.tracer import OpRecord


def mlp(width: int, depth: int = 4, d_in: int = 1024) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(d_in, width), nn.GELU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.GELU()]
    with torch.device("meta"):
        return nn.Sequential(*layers, nn.Linear(width, 10))


def batch(n: int, d_in: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty(n, d_in, device="meta"), torch.empty(n, dtype=torch.long, device="meta")


def ce_step(model, b):
    return F.cross_entropy(model(b[0]), b[1])


def test_unknown_device_lists_known_ones():
    with pytest.raises(ptp.UnknownDeviceError, match=r"'warp-drive-9000'.*h100-sxm.*register_device"):
        ptp.predict_step(mlp(64), batch(8), ce_step, device="warp-drive-9000")


def test_an_optimizer_name_or_a_frozen_model_gets_an_error_that_says_what_to_pass():
    with pytest.raises(ValueError, match=r"predict_step\(optimizer='adamw'\).*torch.optim.AdamW"):
        ptp.predict_step(mlp(64), batch(8), ce_step, optimizer="adamw")
    frozen = mlp(64).requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        ptp.predict_step(frozen, batch(8), ce_step)
    lazy = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(10))  # shapes set by the first forward
    with pytest.raises(ValueError, match=r"1 \(LazyLinear\): parameters not created yet.*run one forward pass"):
        ptp.predict_step(lazy, batch(8), ce_step)
    lazy(torch.randn(8, 1024))
    assert ptp.predict_step(lazy, batch(8), ce_step).step_s > 0


def test_breakdown_sums_to_step_and_prints():
    pred = ptp.predict_step(mlp(8192), batch(8192), ce_step, precision="bf16-mixed", device="h100-sxm")
    assert math.isclose(sum(pred.breakdown["phase"].values()), pred.step_s, rel_tol=1e-9)
    assert math.isclose(sum(pred.breakdown["class"].values()), pred.step_s, rel_tol=1e-9)
    assert pred.bound == "device" and pred.breakdown["class"]["gemm"] > 0.5 * pred.step_s
    # backward runs two GEMMs per forward GEMM: in a GEMM-bound step it takes about twice as long
    assert 1.6 < pred.breakdown["phase"]["backward"] / pred.breakdown["phase"]["forward"] < 2.4
    text = str(pred)
    assert "predicted step" in text and "bf16-mixed" in text and "gemm" in text
    assert pred.flops > 0 and pred.bytes > 0 and len(pred.ops) > 10


def test_larger_batch_is_slower():
    small = ptp.predict_step(mlp(8192), batch(1024), ce_step, precision="bf16-mixed", device="h100-sxm")
    large = ptp.predict_step(mlp(8192), batch(8192), ce_step, precision="bf16-mixed", device="h100-sxm")
    assert small.bound == "device"
    assert large.step_s > 2 * small.step_s


def test_gemm_bound_mlp_is_faster_in_tf32_than_fp32():
    fp32 = ptp.predict_step(mlp(8192), batch(4096), ce_step, precision=ptp.PrecisionSpec.from_setting("32-true", matmul_tf32=False), device="h100-sxm")
    tf32 = ptp.predict_step(mlp(8192), batch(4096), ce_step, precision=ptp.PrecisionSpec.from_setting("32-true", matmul_tf32=True), device="h100-sxm")
    bf16 = ptp.predict_step(mlp(8192), batch(4096), ce_step, precision="bf16-mixed", device="h100-sxm")
    assert tf32.step_s < fp32.step_s / 3
    assert bf16.step_s < tf32.step_s


def test_tiny_model_is_host_bound_and_slower_with_autocast():
    # Measured on the H100 (../shared/h100): a small MLP is slower in bf16-mixed than in fp32,
    # because autocast adds cast ops and the step is bound by the host issuing them.
    fp32 = ptp.predict_step(mlp(256, 6, 256), batch(64, 256), ce_step, precision="32-true", device="h100-sxm")
    mixed = ptp.predict_step(mlp(256, 6, 256), batch(64, 256), ce_step, precision="bf16-mixed", device="h100-sxm")
    assert fp32.bound == "host" and mixed.bound == "host"
    assert mixed.step_s > fp32.step_s


class GruLM(nn.Module):
    def __init__(self, vocab: int, hidden: int = 256) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 128)
        self.rnn = nn.GRU(128, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(ids))[0])


def lm_step(model, ids):
    return F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())


def test_a_recurrent_layers_host_launched_steps_hide_the_device_work_queued_before_them():
    # A cuDNN RNN's host launches its time steps one by one. In the backward pass the output
    # head's gradient GEMMs are queued first: the device runs them while the host is still
    # launching the recurrence, so a larger head costs the step less than its kernels take
    # (a GRU LM on the H100, batch 32 x 512 tokens: 53 ms a step in half precision, 27 ms of kernels).
    fp32 = ptp.PrecisionSpec.from_setting("32-true", matmul_tf32=False)
    ids = torch.zeros(32, 512, dtype=torch.long, device="meta")

    def predict(vocab: int) -> ptp.StepPrediction:
        with torch.device("meta"):
            model = GruLM(vocab)
        return ptp.predict_step(model, ids, lm_step, precision=fp32, device="h100-sxm")

    small, large = predict(2000), predict(16000)
    head_kernels = sum(large.kernel_s) - sum(small.kernel_s)
    assert head_kernels > 0.005 and small.bound == "host"
    assert large.step_s - small.step_s < 0.8 * head_kernels


def test_slower_gpu_is_slower():
    h100 = ptp.predict_step(mlp(4096), batch(2048), ce_step, precision="bf16-mixed", device="h100-sxm")
    a100 = ptp.predict_step(mlp(4096), batch(2048), ce_step, precision="bf16-mixed", device="NVIDIA A100-SXM4-80GB")
    assert a100.step_s > 1.5 * h100.step_s


def test_gemm_time_is_wave_quantized_where_the_kernels_fill_the_sms_wave_by_wave():
    # An A100 runs every GEMM in waves of output tiles. 8192^3 bf16: 128x256 tiles -> 64 x 32 =
    # 2048 CTAs on 108 SMs = 19 waves (18.96 rounded up); each wave runs one tile per SM.
    a100 = ptp.get_device("a100-sxm-80gb")
    cost = OpCost("gemm", 2.0 * 8192**3, 3 * 8192 * 8192 * 2, 1, "bf16", (1, 8192, 8192, 8192))
    per_sm = a100.peak_tflops["bf16"] * 1e12 * HOPPER.gemm_eff["gemm:bf16"] / 108
    expected_large_tile = 19 * 2 * 128 * 256 * (8192 + HOPPER.gemm_k_fill["gemm"]) / per_sm
    assert gemm_seconds(cost, a100, HOPPER) <= expected_large_tile * (1 + 1e-9)
    # 108 tiles fill the 108 SMs once; one more row of tiles (+0.9% work) leaves SMs idle in a
    # second wave, which smaller tiles soften but cannot remove: time jumps far more than work.
    one_wave = OpCost("gemm", 0.0, 0.0, 1, "bf16", (1, 128 * 108, 256, 4096))
    two_waves = OpCost("gemm", 0.0, 0.0, 1, "bf16", (1, 128 * 109, 256, 4096))
    assert gemm_seconds(two_waves, a100, HOPPER) > 1.15 * gemm_seconds(one_wave, a100, HOPPER)
    # On an H100 the same holds for TF32 (its sm90 TF32 kernels schedule waves too) and for a
    # half-precision GEMM whose rows are not 16-byte aligned (no TMA kernel can run it).
    h100 = ptp.get_device("h100-sxm")
    for dtype, k in (("tf32", 4096), ("bf16", 4095)):
        one = OpCost("gemm", 0.0, 0.0, 1, dtype, (1, 128 * 132, 256, k), misaligned=k % 8 != 0, alignment=k % 8)
        two = replace(one, gemm=(1, 128 * 133, 256, k))
        assert gemm_seconds(two, h100, HOPPER) > 1.15 * gemm_seconds(one, h100, HOPPER)


def test_aligned_half_precision_gemm_on_hopper_spreads_its_work_over_every_sm():
    # cuBLAS's persistent TMA kernels divide the tiles' K loops among all 132 SMs: one more row
    # of tiles (+0.8% work) costs about +0.8% time, not a second wave.
    h100 = ptp.get_device("h100-sxm")
    one_wave = OpCost("gemm", 0.0, 0.0, 1, "bf16", (1, 128 * 132, 256, 4096))
    two_waves = replace(one_wave, gemm=(1, 128 * 133, 256, 4096))
    assert gemm_seconds(two_waves, h100, HOPPER) == pytest.approx(gemm_seconds(one_wave, h100, HOPPER) * 133 / 132,
                                                                  rel=1e-6)
    # A weight gradient (a small output over a long K) is not bound to its few output tiles either:
    # 3072 x 1024 outputs over K = 8192 take the same time as the same FLOPs in a square GEMM would.
    wgrad = OpCost("gemm", 0.0, 0.0, 1, "bf16", (1, 3072, 1024, 8192))
    per_flop = gemm_seconds(OpCost("gemm", 0.0, 0.0, 1, "bf16", (1, 8192, 8192, 8192)), h100, HOPPER) / 8192**3
    assert gemm_seconds(wgrad, h100, HOPPER) < 1.1 * per_flop * 3072 * 1024 * 8192


def test_memory_bound_op_time_is_bytes_over_bandwidth():
    device = ptp.get_device("h100-sxm")
    # 1 GB read + 1 GB written at 3352 GB/s x the elementwise efficiency, plus one kernel floor.
    op = OpRecord("aten.mul.Tensor", "forward", "", OpCost("elementwise", 0.0, 2e9, 1, "fp32"))
    expected = HOPPER.kernel_floor_s + 2e9 / (3352e9 * HOPPER.mem_eff["elementwise"])
    assert math.isclose(kernel_seconds(op, device, HOPPER), expected, rel_tol=1e-12)


def test_misaligned_gemm_is_slow():
    device = ptp.get_device("h100-sxm")
    aligned = OpCost("gemm", 2.0 * 16384 * 50304 * 768, 0.0, 1, "bf16", (1, 16384, 50304, 768))
    odd = OpCost("gemm", 2.0 * 16384 * 50257 * 768, 0.0, 1, "bf16", (1, 16384, 50257, 768), misaligned=True)
    assert gemm_seconds(odd, device, HOPPER) > 2 * gemm_seconds(aligned, device, HOPPER)


def test_corrections_scale_their_class():
    base = ptp.predict_step(mlp(4096), batch(4096), ce_step, precision="bf16-mixed", device="h100-sxm")
    slower = ptp.predict_step(mlp(4096), batch(4096), ce_step, precision="bf16-mixed", device="h100-sxm",
                              corrections={"gemm": 2.0})
    assert slower.breakdown["class"]["gemm"] > 1.8 * base.breakdown["class"]["gemm"]


def test_cpu_prediction_uses_a_probe():
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    b = (torch.randn(16, 64), torch.randint(0, 10, (16,)))
    pred = ptp.predict_step(model, b, ce_step, precision="32-true", device="cpu")
    assert pred.step_s > 0 and "threads" in pred.device_name


def test_a_cpu_runs_fp32_convolutions_and_matmuls_as_fp32_whatever_torchs_tf32_flags_say():
    # cuDNN allows TF32 by default and a script may ask for "high" matmul precision: flags for a
    # GPU. A CPU's kernels run fp32 as fp32, priced at its probed fp32 rate, not a TF32 one.
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.Flatten(), nn.Linear(16 * 16 * 16, 10))
    b = (torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,)))
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert torch.backends.cudnn.allow_tf32  # torch's default
        pred = ptp.predict_step(model, b, ce_step, precision="32-true", device="cpu")
    finally:
        torch.set_float32_matmul_precision(previous)
    priced = {op.cost.dtype for op in pred.ops if op.cost.op_class in ("conv", "gemm")}
    assert priced == {"fp32"} and pred.precision == "32-true"
    explicit = ptp.PrecisionSpec.from_setting("32-true", matmul_tf32=False, conv_tf32=False)
    assert pred.step_s == pytest.approx(ptp.predict_step(model, b, ce_step, precision=explicit, device="cpu").step_s,
                                        rel=0.01)


def test_a_cpu_prices_dropout_by_the_random_numbers_it_draws():
    from ptp_callback.probe import probe_device

    def predicted(p: float) -> float:
        model = nn.Sequential(nn.Linear(256, 256), nn.Dropout(p), nn.Linear(256, 10))
        b = (torch.randn(512, 256), torch.randint(0, 10, (512,)))
        return ptp.predict_step(model, b, ce_step, precision="32-true", device="cpu").step_s

    # Dropout draws one random number per activation (bernoulli_), at the probed time per element:
    # far more than the bytes it moves, which were all it was priced by before.
    per_element = probe_device(torch.device("cpu")).element_s["bernoulli_"]
    assert predicted(0.5) - predicted(0.0) > 512 * 256 * per_element


def test_a_cpu_prices_max_pooling_by_its_probed_time_per_element():
    from ptp_callback.probe import probe_device

    class EveryOther(nn.Module):  # the max pool's output shape, as a strided view
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[..., ::2, ::2]

    def predicted(pool: nn.Module) -> float:
        model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), pool, nn.Flatten(), nn.Linear(32 * 32 * 32, 10))
        b = (torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,)))
        return ptp.predict_step(model, b, ce_step, precision="32-true", device="cpu").step_s

    # A CPU's max pool compares and indexes window by window (15x a copy's time per element on a
    # 2-thread Xeon): priced at the probed time per input element, not by its bytes.
    per_element = probe_device(torch.device("cpu")).element_s["max_pool2d_with_indices"]
    assert predicted(nn.MaxPool2d(2)) - predicted(EveryOther()) > 0.8 * 16 * 32 * 64 * 64 * per_element


def test_a_cpu_step_that_outgrows_the_caches_moves_its_small_tensors_at_the_last_level_caches_rate():
    from ptp_callback.predict import simulate
    from ptp_callback.probe import ProbeResult, cpu_coefficients, cpu_spec
    from ptp_callback.tracer import trace_step

    # a probe whose 1 MB copy ran 4x its 32 MB one (the in-cache rate against the last-level cache's)
    result = ProbeResult("cpu", torch.__version__, 2, {"fp32": {256: 0.1}}, 25.0, 1e-6, 2e-6, 0.0,
                         cache_copy_gbps=100.0, stream_copy_gbps=10.0)
    spec, coef = cpu_spec(result), cpu_coefficients(result)

    def relu_seconds(batch_rows: int) -> tuple[float, float, float]:
        """(the ReLU's priced time in the step, its bytes at the in-cache rate, the step's peak memory)"""
        model = nn.Sequential(nn.Linear(256, 32), nn.ReLU(), nn.Linear(32, 10))
        trace = trace_step(model, (torch.randn(batch_rows, 256), torch.randint(0, 10, (batch_rows,))), ce_step,
                           None, "32-true", target_type="cpu")
        step = simulate(trace, spec, coef)
        i, relu = next((i, op) for i, op in enumerate(trace.ops) if op.name == "aten.relu.default")
        assert relu.cost.bytes < coef.extra["cache_bytes"]  # a small tensor either way
        peak = trace.param_bytes + trace.optimizer_state_bytes + trace.peak_new_bytes
        return step.kernel_s[i], relu.cost.bytes / (100e9 * coef.mem_eff["elementwise"]), peak

    small_step, in_cache, peak = relu_seconds(8)
    assert small_step == pytest.approx(in_cache) and peak < 1e6  # the whole step in the caches
    large_step, in_cache, peak = relu_seconds(12000)
    assert large_step == pytest.approx(4 * in_cache) and peak > 4e6  # 100 GB/s -> 25 GB/s


def test_op_classes_timed_in_isolation_give_class_corrections():
    from ptp_callback.calibrate import measure_op_classes
    from ptp_callback.step import resolve_device
    from ptp_callback.tracer import trace_step

    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 10))
    b = (torch.randn(128, 256), torch.randint(0, 10, (128,)))
    spec, coef = resolve_device("cpu")
    trace = trace_step(model, b, ce_step, None, "32-true", target_type="cpu")
    corrections = measure_op_classes(trace, spec, coef, torch.device("cpu"), budget_s=2.0, min_share=0.0)
    assert "gemm" in corrections
    # Not pinned: a 2-thread BLAS on a loaded 2-core machine ran GEMMs 30x slower than alone.
    assert all(0.0 < value and math.isfinite(value) for value in corrections.values())
    assert all(p.grad is None for p in model.parameters())  # the user's model is not run


def test_gradient_all_reduce_arithmetic():
    from ptp_callback.comm import COLLECTIVE_LATENCY_S, RING_EFFICIENCY, allreduce_seconds, ddp_exposed_seconds

    # 1 GB on 4 GPUs over 450 GB/s links: 2 x 3/4 x 1 GB = 1.5 GB per GPU at 450e9 x efficiency
    expected = COLLECTIVE_LATENCY_S + 1.5e9 / (450e9 * RING_EFFICIENCY)
    assert math.isclose(allreduce_seconds(1e9, world_size=4, link_gbs=450.0), expected)
    assert allreduce_seconds(1e9, world_size=1, link_gbs=450.0) == 0.0
    # a long backward hides all but the last bucket; a short one hides little
    hidden = ddp_exposed_seconds(1e9, 1.0, world_size=4, link_gbs=450.0)
    exposed = ddp_exposed_seconds(1e9, 0.0, world_size=4, link_gbs=450.0)
    assert hidden < 0.1 * exposed and exposed > expected


def test_bf16_on_a_t4_is_predicted_as_it_runs_and_says_so():
    from ptp_callback.advisor import advice, compare_precisions

    bf16 = ptp.predict_step(mlp(4096), batch(4096), ce_step, precision="bf16-mixed", device="t4")
    fp16 = ptp.predict_step(mlp(4096), batch(4096), ce_step, precision="16-mixed", device="t4")
    fp32 = ptp.predict_step(mlp(4096), batch(4096), ce_step, precision="32-true", device="t4")
    # No bf16 tensor cores: bf16 matrix math at the fp32 rate, plus autocast's casts.
    assert bf16.step_s > fp32.step_s > 2 * fp16.step_s
    assert bf16.warnings and "no bf16 tensor cores" in str(bf16)
    assert not fp16.warnings and "note:" not in str(fp16)
    options = compare_precisions(mlp(1024), batch(512), ce_step, current="bf16-mixed", device="t4")
    line = advice(options, "bf16-mixed", 100.0)
    assert line.startswith("bf16-mixed is not supported at speed on NVIDIA Tesla T4") and "-> 16-mixed" in line
    assert all("bf16" not in o.precision for o in options if o.precision != "bf16-mixed")


def test_bf16_on_an_h100_is_faster_than_fp32():
    bf16 = ptp.predict_step(mlp(4096), batch(4096), ce_step, precision="bf16-mixed", device="h100-sxm")
    fp32 = ptp.predict_step(mlp(4096), batch(4096), ce_step, precision="32-true", device="h100-sxm")
    assert bf16.step_s < fp32.step_s / 2 and not bf16.warnings


def test_a_device_named_as_the_cli_names_it_is_found_with_a_note():
    from ptp_callback.notices import PtpWarning

    with pytest.warns(PtpWarning, match=r"h100 -> h100-sxm"):
        short = ptp.predict_step(mlp(256), batch(64), ce_step, device="h100")
    assert short.step_s == ptp.predict_step(mlp(256), batch(64), ce_step, device="h100-sxm").step_s
    with pytest.raises(ptp.UnknownDeviceError, match="'h1000' is not a known GPU.*h100-sxm.*register_device"):
        ptp.predict_step(mlp(256), batch(64), ce_step, device="h1000")


def test_the_precision_options_of_a_cpu_run_are_priced_with_its_probed_coefficients():
    # The advice re-prices the run for its DeviceSpec: priced at the GPU table's coefficients, a
    # 2-thread EPYC's bf16-mixed step came out 74x its 32-true one while the steps ran 13x apart.
    from ptp_callback.advisor import compare_precisions
    from ptp_callback.precision import PrecisionSpec
    from ptp_callback.run_prediction import predict_run

    model, b = mlp(256, depth=2, d_in=256), batch(64, d_in=256)
    current = PrecisionSpec.from_setting("32-true")
    run = predict_run(model, b, ce_step, None, current, "cpu", run_device=torch.device("cpu"))
    assert run.device.arch == "cpu"
    # The run's CPU spec, as the advice (and a user) passes it, gets this machine's probed coefficients
    options = {o.precision: o.step_s for o in compare_precisions(model, b, ce_step, current=current, device=run.device)}
    assert options["32-true"] == pytest.approx(run.step.step_s, rel=1e-6)
    for other, seconds in options.items():  # each as a prediction for "cpu" gives it
        if other != "32-true":
            assert seconds == pytest.approx(ptp.predict_step(model, b, ce_step, precision=other, device="cpu").step_s,
                                            rel=1e-6)


def test_print_shows_sizes_taken_at_their_largest_among_the_warnings():
    class KeepsPositive(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj, self.head = nn.Linear(16, 16), nn.Linear(16, 4)

        def forward(self, x):
            h = self.proj(x)
            return self.head(h[h.sum(-1) > 0])  # rows the model's numbers pick: all of them, at most

    with pytest.warns(UserWarning, match="taken at their largest"):
        pred = ptp.predict_step(KeepsPositive(), (torch.randn(32, 16),), lambda m, b: m(b[0]).square().mean(),
                                precision="32-true", device="h100-sxm")
    assert any("taken at their largest" in w and "runs faster than predicted" in w for w in pred.warnings)
    assert "taken at their largest" in str(pred)


def test_an_in_place_scatter_reduce_has_a_cost_rule():
    class Pool(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x, index):
            out = torch.zeros(4, 8).scatter_reduce_(0, index, self.proj(x), "amax", include_self=False)
            return out.square().mean()

    index = torch.randint(0, 4, (16, 1)).expand(16, 8)
    pred = ptp.predict_step(Pool(), (torch.randn(16, 8), index), lambda m, b: m(*b), precision="32-true",
                            device="h100-sxm")
    assert any(op.name == "aten.scatter_reduce_.two" for op in pred.ops)
    assert not pred.warnings


@pytest.mark.parametrize("kwargs, message", [
    ({"step_fn": "loss"}, "predict_step(step_fn='loss'): expected a function step_fn(model, batch) -> loss"),
    ({"coefficients": "x"}, "predict_step(coefficients=<str>): expected a CostCoefficients"),
])
def test_bad_arguments_to_predict_step_fail_at_once_in_one_line(kwargs, message):
    model = nn.Linear(4, 2)
    with pytest.raises(ValueError) as info:
        ptp.predict_step(model, (torch.randn(2, 4),), **{"step_fn": lambda m, b: m(b[0]).sum(), **kwargs})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_trace_step_refuses_what_is_not_a_module_and_a_manual_step_takes_one_optimizer():
    with pytest.raises(ValueError, match=r"trace_step\(model=...\): expected a torch.nn.Module, got function"):
        ptp.trace_step(lambda x: x, (torch.randn(2, 4),), lambda m, b: m(b[0]).sum())
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert ptp.ManualOptimization(optimizer).optimizers == (optimizer,)
