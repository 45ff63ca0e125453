"""The device probe's on-disk cache: read back at the speed the machine runs now, and measured again
when it was taken while busy."""

import json
import os
from dataclasses import asdict, replace

import pytest
import torch

from ptp_callback import probe, trace_step
from ptp_callback.kernels import kernel_seconds
from ptp_callback.probe import ProbeResult, probe_device
from ptp_callback.step import resolve_device


def _write_cache(tmp_path, monkeypatch, fp32_rate: float, name: str = "cached", skinny_rate: float | None = None,
                 copy_gbps: float = 1e6) -> str:
    monkeypatch.setenv("PTP_CACHE_DIR", str(tmp_path))
    path = probe._cache_path(torch.device("cpu"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    skinny = fp32_rate / 2 if skinny_rate is None else skinny_rate
    rates = {"fp32": {"64x1024x1024": skinny, "256": fp32_rate, "512": fp32_rate}}
    cached = ProbeResult(name, torch.__version__, torch.get_num_threads(), rates, copy_gbps, 1e-6, 1e-6, 0.5, 2.0,
                         {"tanh": 1e-9})
    with open(path, "w") as f:
        json.dump(asdict(cached), f)
    return path


def test_a_cache_faster_than_this_machine_runs_now_is_read_at_the_speed_it_runs_now(tmp_path, monkeypatch):
    _write_cache(tmp_path, monkeypatch, fp32_rate=1e6)  # no CPU runs a GEMM this fast: this one is busier now
    monkeypatch.setattr(probe, "_now", {})
    result = probe_device(torch.device("cpu"))
    assert result.device_name == "cached"  # read, not measured again
    # slowed by at most SLOWEST_NOW: rates times it, times per op over it
    assert result.gemm_tflops["fp32"]["512"] == 1e6 * probe.SLOWEST_NOW
    assert (result.copy_gbps, result.small_op_s) == (1e6 * probe.SLOWEST_NOW, 1e-6 / probe.SLOWEST_NOW)
    assert result.element_s == {"tanh": 1e-9 / probe.SLOWEST_NOW}


def test_a_cache_taken_on_a_busy_machine_is_measured_again(tmp_path, monkeypatch):
    slow = 1e-7  # TFLOP/s: far below what any CPU runs a 512^3 GEMM at
    path = _write_cache(tmp_path, monkeypatch, fp32_rate=slow)
    with open(path + ".spots", "w") as f:
        json.dump([[0.0, 0.5]], f)
    result = probe_device(torch.device("cpu"))
    assert result.device_name != "cached"  # measured again
    # (the 1024^3 GEMM is left out where the 512^3 one took long: a machine busy with other tests)
    assert result.gemm_tflops["fp32"]["512"] > 100 * slow and all(r > 0 for r in result.gemm_tflops["fp32"].values())
    with open(path) as f:
        assert json.load(f)["gemm_tflops"]["fp32"]["512"] == result.gemm_tflops["fp32"]["512"]  # the cache heals
    # The better of the two readings of each rate stands: the old host-op times were faster.
    assert result.small_op_s == 1e-6 and result.copy_gbps >= 1.0
    assert not os.path.exists(path + ".spots")  # readings against the old rates are dropped


@pytest.mark.parametrize("slow_part", ["skinny GEMM", "copy"])
def test_a_cache_with_one_part_taken_while_the_machine_was_busy_is_measured_again(tmp_path, monkeypatch, slow_part):
    """The square GEMM's rate is right (no CPU runs one faster), but a reading taken later in the
    same probe was slowed by other work."""
    slow = dict(skinny_rate=1e-7) if slow_part == "skinny GEMM" else dict(copy_gbps=1e-3)
    path = _write_cache(tmp_path, monkeypatch, fp32_rate=1e6, **slow)
    monkeypatch.setattr(probe, "_now", {})
    result = probe_device(torch.device("cpu"))
    assert result.device_name != "cached"  # measured again, each part kept at its better reading
    assert result.gemm_tflops["fp32"]["64x1024x1024"] > 1e-7 and result.copy_gbps > 1e-3
    assert result.gemm_tflops["fp32"]["512"] == 1e6
    with open(path) as f:
        assert json.load(f)["device_name"] == result.device_name  # the cache heals


def test_the_speed_read_now_is_the_median_of_the_latest_spot_checks_of_the_past_hour(tmp_path, monkeypatch):
    """One spot check of a few milliseconds misreads a machine's speed by up to half from one
    process to the next: the rates are slowed by the median of the past hour's readings."""
    import time

    path = _write_cache(tmp_path, monkeypatch, fp32_rate=1e6)  # this process reads it far slower
    with open(path + ".spots", "w") as f:
        json.dump([[time.time() - 60.0 * i, 0.9] for i in (3, 2, 1)], f)
    monkeypatch.setattr(probe, "_now", {})
    result = probe_device(torch.device("cpu"))
    assert result.gemm_tflops["fp32"]["512"] == pytest.approx(0.9e6)  # median of 0.9, 0.9, 0.9 and ~0
    with open(path + ".spots") as f:
        assert len(json.load(f)) == 4  # this reading kept for the next process

    with open(path + ".spots", "w") as f:
        json.dump([[time.time() - 2 * probe.SPOT_MEMORY_S, 0.9]] * 3, f)  # from another hour
    monkeypatch.setattr(probe, "_now", {})
    assert probe_device(torch.device("cpu")).gemm_tflops["fp32"]["512"] == 1e6 * probe.SLOWEST_NOW


def test_the_spot_check_runs_once_per_process(tmp_path, monkeypatch):
    path = _write_cache(tmp_path, monkeypatch, fp32_rate=1e6)
    monkeypatch.setattr(probe, "_now", {})
    first = probe_device(torch.device("cpu"))
    assert probe._now[path] is first
    _write_cache(tmp_path, monkeypatch, fp32_rate=1e-7)  # slow now, but this process checked it already
    assert probe_device(torch.device("cpu")) is first


def test_best_of_two_probes_keeps_each_faster_reading():
    old = ProbeResult("cpu", "t", 2, {"fp32": {"256": 2.0, "512": 1.0}}, 10.0, 1e-6, 3e-6, 1.0, 50.0,
                      {"tanh": 2e-9, "exp": 1e-9})
    new = ProbeResult("cpu", "t", 2, {"fp32": {"256": 1.0, "512": 3.0, "1024": 4.0}}, 20.0, 2e-6, 2e-6, 2.0, 40.0,
                      {"tanh": 3e-9, "exp": 0.5e-9})
    best = probe._best_of(old, new)
    assert best.gemm_tflops == {"fp32": {"256": 2.0, "512": 3.0, "1024": 4.0}}
    assert (best.copy_gbps, best.cache_copy_gbps, best.small_op_s, best.autograd_op_s) == (20.0, 50.0, 1e-6, 2e-6)
    assert best.element_s == {"tanh": 2e-9, "exp": 0.5e-9}


def test_a_cpu_probe_times_each_element_op_in_each_dtype(tmp_path, monkeypatch):
    """Each element op (random draws, transcendentals, copies) gets its own probed rate, half dtypes
    theirs, and the coefficients price the trace's ops at them. How they compare is the machine's,
    and a busy machine reads any of them slower (one probe, taken while another test process held
    the cores, read an in-cache copy at 0.5 GB/s): a unit test does not assert it."""
    monkeypatch.setenv("PTP_CACHE_DIR", str(tmp_path))
    result = probe_device(torch.device("cpu"))
    half = {f"{name}:{key}" for name in probe.HALF_ELEMENT_OPS for key in ("bf16", "fp16")}
    assert set(result.element_s) == set(probe.element_ops(256, torch.device("cpu"))) | half
    assert all(seconds > 0 for seconds in result.element_s.values())
    extra = probe.cpu_coefficients(result).extra["element_s"]
    assert extra["rand"] == result.element_s["uniform_"] and extra["tanh_"] == result.element_s["tanh"]
    assert extra["tanh_:bf16"] == result.element_s["tanh:bf16"]
    # SDPA's unfused softmax is timed as itself: it also reduces each row to find the masked ones
    assert "_safe_softmax" in result.element_s and extra["_safe_softmax"] == result.element_s["_safe_softmax"]
    # A bilinear upsampling's backward adds each output's gradient into four inputs, far slower than
    # its bytes move: a segmentation head's, traced, is priced at its probed rate per output element.
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 1), torch.nn.Upsample(scale_factor=4, mode="bilinear"))
    trace = trace_step(model, (torch.randn(2, 8, 8, 8),), lambda m, b: m(*b).square().mean(), None, "32-true",
                       target_type="cpu")
    backward = next(op for op in trace.ops if op.name == "aten.upsample_bilinear2d_backward.default")
    spec, coef = resolve_device("cpu")
    assert kernel_seconds(backward, spec, coef) >= 2 * 8 * 32 * 32 * extra["upsample_bilinear2d_backward"]
    # So are a gather's lookups (DeBERTa's relative positions) and its backward's scatter_add, in bf16 too
    trace = trace_step(torch.nn.Linear(64, 64), (torch.randn(32, 64), torch.randint(0, 64, (32, 64))),
                       lambda m, b: torch.gather(m(b[0]), -1, b[1]).sum(), None, "bf16-mixed", target_type="cpu")
    for name in ("gather", "scatter_add"):
        op = next(op for op in trace.ops if op.name == f"aten.{name}.default")
        assert kernel_seconds(op, spec, coef) >= 32 * 64 * extra[f"{name}:bf16"]


def test_a_cpu_prices_half_precision_elements_at_their_own_rate():
    from ptp_callback.costs import OpCost
    from ptp_callback.kernels import element_seconds
    from ptp_callback.tracer import OpRecord

    coef = probe.cpu_coefficients(probe.ProbeResult(
        "cpu", torch.__version__, 2, {"fp32": {256: 0.1}}, 10.0, 1e-6, 2e-6, 0.0,
        element_s={"tanh": 1e-10, "bernoulli_": 5e-9, "tanh:bf16": 8e-10, "mul:bf16": 1.2e-10}))

    def seconds(name: str, dtype: str) -> float:
        return element_seconds(OpRecord(name, "forward", "", OpCost("elementwise", 0.0, 1.0, 1, dtype),
                                        in_shapes=((1000,),), out_shapes=((1000,),)), coef)

    assert seconds("aten.tanh.default", "bf16") == pytest.approx(8e-7)  # its own half-precision rate
    assert seconds("aten.tanh.default", "fp32") == pytest.approx(1e-7)
    assert seconds("aten.bernoulli_.float", "bf16") == pytest.approx(5e-6)  # drawn one by one: its fp32 rate
    assert seconds("aten.mul.Tensor", "bf16") == pytest.approx(1.2e-7)
    assert seconds("aten.mul.Tensor", "fp32") == seconds("aten.add.Tensor", "bf16") == 0.0  # bytes alone price them



def test_fp32_gemms_are_timed_at_full_precision_whatever_the_process_set(tmp_path, monkeypatch):
    # "medium" runs fp32 matmuls in bf16 on a CPU with bf16 matrix units (3.3x faster on a Xeon
    # with AMX): a probe timed under it would cache a bf16 rate as the fp32 one.
    monkeypatch.setenv("PTP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(probe, "_now", {})
    in_gemm, seen = [False], []
    timed, gemm_seconds = probe._timed, probe._gemm_seconds

    def timing(fn, device, repeats, **options):
        seen.append((in_gemm[0], torch.get_float32_matmul_precision()))
        return timed(fn, device, repeats, **options)

    def gemm(a, b, device):
        in_gemm[0] = True
        try:
            return gemm_seconds(a, b, device)
        finally:
            in_gemm[0] = False

    monkeypatch.setattr(probe, "_timed", timing)
    monkeypatch.setattr(probe, "_gemm_seconds", gemm)
    setting = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        probe_device(torch.device("cpu"))  # measures: nothing cached in tmp_path
        probe._speed_now(probe._read(probe._cache_path(torch.device("cpu"))), torch.device("cpu"))
    finally:
        torch.set_float32_matmul_precision(setting)
    gemms = {precision for inside, precision in seen if inside}
    others = {precision for inside, precision in seen if not inside}
    assert gemms == {"highest"}
    assert others == {"medium"}  # the process's setting stands outside the GEMM timings


def test_a_gemm_kernel_that_runs_on_one_thread_is_not_read_as_scaling_with_the_threads(monkeypatch):
    """A busy 2-core VM can stall a multi-threaded GEMM, so the probe also times it on one thread and
    divides by the threads. PyTorch's bf16 fallback on an AVX2 EPYC runs on one thread whatever the
    setting (256x256x256: 23 ms on one thread and on two): divided, bf16 was read twice as fast."""
    readings = {}

    def timed(fn, device, repeats, once_beyond_s=float("inf")):
        return readings[torch.get_num_threads()]

    monkeypatch.setattr(probe, "_timed", timed)
    monkeypatch.setattr(torch, "get_num_threads", lambda: readings["now"])
    monkeypatch.setattr(torch, "set_num_threads", lambda n: readings.__setitem__("now", n))
    a = torch.randn(4, 4)
    cases = [
        ({2: 23e-3, 1: 23e-3}, 23e-3),  # one thread whatever the setting
        ({2: 0.20e-3, 1: 0.37e-3}, 0.185e-3),  # a kernel that scales: the faster estimate stands
        ({2: 20e-3, 1: 0.37e-3}, 0.185e-3),  # stalled at a thread barrier
        ({2: 0.2, 1: 0.4}, 0.2),  # too slow for a stall to matter: timed once, on all threads
    ]
    for times, expected in cases:
        readings.clear()
        readings.update(times, now=2)
        assert probe._gemm_seconds(a, a, torch.device("cpu")) == pytest.approx(expected)


def test_a_probe_times_a_gemm_with_a_transposed_operand_and_keeps_the_faster_reading(tmp_path, monkeypatch):
    monkeypatch.setenv("PTP_CACHE_DIR", str(tmp_path))
    result = probe_device(torch.device("cpu"))
    assert set(result.gemm_transposed_tflops) == set(result.gemm_tflops)
    assert all(rate > 0 for rate in result.gemm_transposed_tflops.values())
    faster = replace(result, gemm_transposed_tflops={k: 2 * v for k, v in result.gemm_transposed_tflops.items()})
    assert probe._best_of(faster, result).gemm_transposed_tflops == faster.gemm_transposed_tflops


def test_a_probe_times_fused_attention_per_dtype_and_keeps_the_faster_reading(tmp_path, monkeypatch):
    monkeypatch.setenv("PTP_CACHE_DIR", str(tmp_path))
    result = probe_device(torch.device("cpu"))
    assert set(result.attention_s) == {f"{d}:{k}" for d in ("fwd", "bwd") for k in ("fp32", "bf16", "fp16")}
    assert all(s > 0 for s in result.attention_s.values())
    slower = replace(result, attention_s={k: 2 * s for k, s in result.attention_s.items()})
    assert probe._best_of(slower, result).attention_s == result.attention_s
    assert probe.at_speed(result, 0.5).attention_s == slower.attention_s
    assert set(probe.cpu_coefficients(result).extra["attention_dtype_slowdown"]) == {
        "fwd:bf16", "bwd:bf16", "fwd:fp16", "bwd:fp16"}


def test_a_cpu_prices_half_precision_attention_as_fp32_at_its_probed_slowdown():
    # A CPU without bf16 instructions: its bf16 GEMMs 120x slower than fp32 ones, while its fused
    # attention kernel (which computes in fp32) ran bf16 forward at 1.1x fp32's time, backward 6x.
    from ptp_callback.kernels import kernel_seconds
    from ptp_callback.step import predict_step

    result = ProbeResult("cpu", torch.__version__, 2, {"fp32": {"256": 0.12}, "bf16": {"256": 0.001}}, 10.0, 1e-6,
                         2e-6, 0.0, attention_s={"fwd:fp32": 1e-3, "bwd:fp32": 3e-3, "fwd:bf16": 1.1e-3,
                                                 "bwd:bf16": 18e-3})
    spec, coef = probe.cpu_spec(result), probe.cpu_coefficients(result)

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(()))

        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q * self.scale, k, v, is_causal=True).float().sum()

    def attention_s(precision: str, dtype: torch.dtype) -> tuple[float, float]:
        q, k, v = (torch.randn(4, 8, 128, 64, dtype=dtype) for _ in range(3))
        step = predict_step(Attention().to(dtype), (q, k, v), lambda m, b: m(*b), precision=precision, device="cpu")
        ops = [op for op in step.ops if op.cost.op_class == "attention"]
        assert [op.cost.backward for op in ops] == [False, True]
        return tuple(kernel_seconds(op, spec, coef) for op in ops)

    fp32, bf16 = attention_s("32-true", torch.float32), attention_s("bf16-true", torch.bfloat16)
    assert bf16[0] == pytest.approx(1.1 * fp32[0], rel=0.01) and bf16[1] == pytest.approx(6 * fp32[1], rel=0.01)


def test_a_cpu_without_half_precision_matrix_instructions_prices_its_convolutions_at_their_probed_slowdown():
    # An AVX2 CPU: bf16 GEMMs 120x slower than fp32 ones; oneDNN's bf16 3x3 convolution ran forward
    # 40x the fp32 time there, backward 3x.
    from ptp_callback.kernels import kernel_seconds
    from ptp_callback.step import predict_step

    rates = {"fp32": {"256": 0.12}, "bf16": {"256": 0.001}}
    result = ProbeResult("cpu", torch.__version__, 2, rates, 10.0, 1e-6, 2e-6, 0.0,
                         conv_s={"fwd:fp32": 1e-3, "bwd:fp32": 2e-3, "fwd:bf16": 40e-3, "bwd:bf16": 6e-3})
    spec, coef = probe.cpu_spec(result), probe.cpu_coefficients(result)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)

    def conv_s(precision: str, dtype: torch.dtype) -> list[float]:
        step = predict_step(conv.to(dtype), (torch.randn(8, 64, 32, 32, dtype=dtype),), lambda m, b: m(*b).sum(),
                            precision=precision, device="cpu")
        ops = [op for op in step.ops if op.cost.op_class == "conv"]
        assert [op.cost.backward for op in ops] == [False, True]
        return [kernel_seconds(op, spec, coef) for op in ops]

    fp32, bf16 = conv_s("32-true", torch.float32), conv_s("bf16-true", torch.bfloat16)
    # (a fixed cost per call, the same in both, keeps them from exact multiples)
    assert bf16[0] == pytest.approx(40 * fp32[0], rel=0.05) and bf16[1] == pytest.approx(3 * fp32[1], rel=0.05)
    # A CPU whose probe timed no convolution (bf16 with matrix instructions): its bf16 GEMM rate prices them
    fast = probe.cpu_coefficients(replace(result, conv_s={}))
    assert "conv_dtype_slowdown" not in fast.extra or not fast.extra["conv_dtype_slowdown"]


def test_a_probe_times_a_convolution_only_in_the_half_dtypes_without_a_fast_gemm(tmp_path, monkeypatch):
    monkeypatch.setenv("PTP_CACHE_DIR", str(tmp_path))
    result = probe_device(torch.device("cpu"))
    slow = {key for key in ("bf16", "fp16") if max(result.gemm_tflops[key].values()) < max(result.gemm_tflops["fp32"].values())}
    assert set(result.conv_s) == ({f"{d}:{k}" for d in ("fwd", "bwd") for k in ("fp32", *slow)} if slow else set())
    assert all(s > 0 for s in result.conv_s.values())


def test_a_dtype_on_fallback_gemm_kernels_is_priced_by_each_layouts_own_dimension():
    # PyTorch's bf16 fallback on an AVX2 CPU: both operands row-major, the rate follows n (2 GFLOP/s
    # at n=64, 0.8 at 1024); x @ w.t() follows k (5 at k=64, 18 at 1024); g.t() @ x none (15).
    from ptp_callback.costs import MN_MAJOR_GEMM, ROW_MAJOR_GEMM
    from ptp_callback.kernels import cpu_gemm_rate

    result = ProbeResult(
        "cpu", torch.__version__, 2, {"fp32": {"64x1024x1024": 0.1, "256": 0.12}, "bf16": {"64x1024x1024": 0.0008,
                                                                                           "256": 0.0013}},
        10.0, 1e-6, 2e-6, 0.0, gemm_transposed_tflops={"fp32": 0.1, "bf16": 0.018},
        gemm_fallback_tflops={"bf16": {"transposed_k64": 0.005, "mn_major": 0.015, "row_major_n64": 0.002}})
    spec, coef = probe.cpu_spec(result), probe.cpu_coefficients(result)

    def rate(m: int, n: int, k: int, layout: str | None, dtype: str = "bf16") -> float:
        return cpu_gemm_rate(m, n, k, dtype, spec, coef, layout) / 1e9

    assert rate(512, 64, 256, ROW_MAJOR_GEMM) == pytest.approx(2.0) == rate(64, 64, 1024, ROW_MAJOR_GEMM)
    assert rate(64, 1024, 1024, ROW_MAJOR_GEMM) == pytest.approx(0.8)
    assert rate(512, 256, 64, "") == pytest.approx(5.0) and rate(64, 1024, 1024, "") == pytest.approx(18.0)
    assert rate(64, 64, 64, MN_MAJOR_GEMM) == rate(1024, 1024, 1024, MN_MAJOR_GEMM) == pytest.approx(15.0)
    # fp32 runs one kernel for every layout: its rate follows the smallest dimension, as before
    assert rate(512, 64, 256, ROW_MAJOR_GEMM, "fp32") == rate(512, 64, 256, "", "fp32") == rate(512, 64, 256, None, "fp32")


def test_a_probe_times_the_fallback_gemm_layouts_of_the_dtypes_without_a_fast_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PTP_CACHE_DIR", str(tmp_path))
    result = probe_device(torch.device("cpu"))
    slow = {key for key in ("bf16", "fp16") if max(result.gemm_tflops[key].values()) < max(result.gemm_tflops["fp32"].values())}
    assert set(result.gemm_fallback_tflops) == slow
    assert all(set(rates) == {"transposed_k64", "mn_major", "row_major_n64"} and min(rates.values()) > 0
               for rates in result.gemm_fallback_tflops.values())
    assert set(probe.fallback_layouts(result)) <= set(probe.transposed_speedup(result))


def test_only_a_dtype_without_matrix_instructions_gets_a_faster_transposed_layout():
    """fp32 and a half dtype with matrix instructions (bf16 on AMX) run every operand layout in one
    kernel: a probe that read their transposed GEMM at 2.5x the row-major one (the machine busy
    for one of them) must not price every weight-transposed GEMM of the step 2.5x faster."""
    skinny = "64x1024x1024"
    result = ProbeResult(
        "cpu", torch.__version__, 2,
        {"fp32": {skinny: 0.1, "256": 0.12}, "bf16": {skinny: 0.4, "256": 0.5}, "fp16": {skinny: 0.0008, "256": 0.001}},
        10.0, 1e-6, 2e-6, 0.0, gemm_transposed_tflops={"fp32": 0.25, "bf16": 1.0, "fp16": 0.018})
    assert set(probe.transposed_speedup(result)) == {"fp16"}
    assert set(probe.cpu_coefficients(result).extra["gemm_transposed_speedup"]) == {"fp16"}  # gemm_seconds uses it


def test_a_cpu_reads_tensors_it_reuses_at_its_last_level_caches_copy_rate():
    # A 2-thread EPYC VM's 32 MB copy ran from memory (its L3 holds 32 MB): the optimizer's
    # parameters and a large step's small tensors come from the L3, at the 4 MB copy's rate.
    result = probe.ProbeResult("cpu", torch.__version__, 2, {"fp32": {256: 0.1}}, 19.0, 1e-6, 2e-6, 0.0,
                               cache_copy_gbps=120.0, llc_copy_gbps=45.0)
    assert probe.cpu_coefficients(result).extra["reuse_bw_gbs"] == 45.0
    # a probe taken before it was measured: the 32 MB copy's
    assert probe.cpu_coefficients(replace(result, llc_copy_gbps=0.0)).extra["reuse_bw_gbs"] == 19.0
    assert probe.at_speed(result, 0.5).llc_copy_gbps == 22.5


def test_a_cpu_probe_times_a_reference_step_and_fits_each_phases_host_cost_to_it(tmp_path, monkeypatch):
    # The micro-loops' host costs leave out the autograd engine's walk and a per-parameter
    # optimizer's Python; the reference step's phases, priced from its trace, take what they took.
    monkeypatch.setenv("PTP_CACHE_DIR", str(tmp_path))
    result = probe_device(torch.device("cpu"))
    assert set(result.reference_step_s) == {"forward", "backward", "optimizer"}
    assert all(seconds > 0 for seconds in result.reference_step_s.values())
    assert set(result.reference_host_scales) == set(result.reference_step_s)
    unfitted = probe.cpu_coefficients(replace(result, reference_host_scales={}))
    fitted = probe.cpu_coefficients(result)
    for phase, scale in result.reference_host_scales.items():
        assert fitted.host_op_s[phase] == pytest.approx(unfitted.host_op_s[phase] * scale)
    assert fitted.host_param_s["ptp.optimizer_python"] == pytest.approx(
        unfitted.host_param_s["ptp.optimizer_python"] * result.reference_host_scales["optimizer"])


def test_each_phases_host_factor_makes_the_reference_steps_trace_take_what_it_measured():
    from ptp_callback.predict import simulate
    from ptp_callback.reference_step import SCALE_LIMITS, host_scales, reference_step
    from ptp_callback.tracer import trace_step

    result = ProbeResult("cpu", torch.__version__, 2, {"fp32": {"256": 0.1}}, 20.0, 2e-6, 5e-6, 0.0, 80.0)
    coef, spec = probe.cpu_coefficients(result), probe.cpu_spec(result)
    trace = trace_step(*reference_step(), None, "32-true", target_type="cpu")

    def phases(c):
        by_phase = simulate(trace, spec, c).breakdown["phase"]
        return {**by_phase, "forward": by_phase["forward"] - c.host_step_s}  # the loop's own: not a phase's

    measured = {phase: 1.5 * seconds for phase, seconds in phases(coef).items() if phase != "other"}
    scales = host_scales(coef, spec, measured)
    assert all(SCALE_LIMITS[0] < scale < SCALE_LIMITS[1] for scale in scales.values())
    fitted = phases(probe.cpu_coefficients(replace(result, reference_host_scales=scales)))
    assert all(fitted[phase] == pytest.approx(seconds) for phase, seconds in measured.items())
    # A reading no host could give is held to the limits.
    assert set(host_scales(coef, spec, dict.fromkeys(scales, 1.0)).values()) == {SCALE_LIMITS[1]}


def test_a_reference_step_that_cannot_be_fitted_leaves_the_micro_loops_host_costs(monkeypatch):
    from ptp_callback import reference_step

    def untraceable(*args, **kwargs):
        raise RuntimeError("a torch this trace cannot run")

    monkeypatch.setattr(reference_step, "host_scales", untraceable)
    result = ProbeResult("cpu", torch.__version__, 2, {"fp32": {"256": 0.1}}, 20.0, 2e-6, 5e-6, 0.0, 80.0,
                         reference_step_s={"forward": 1e-4, "backward": 1e-4, "optimizer": 1e-4})
    fitted = probe.with_host_scales(result)
    assert fitted.reference_host_scales == {}
    assert probe.cpu_coefficients(fitted).host_op_s == probe.cpu_coefficients(result).host_op_s
