"""The per-op H100 timings of ``data/ops.jsonl`` as the op records a trace would hold for them.

Each measured row is re-run here on fake tensors through :func:`ptp_callback.tracer.record_ops`,
so the cost model is fitted and scored on exactly the records a traced training step contains
(same op names, classes, FLOPs, bytes, alignment, kernel families), not on a re-derivation. A
row gives one or two measurements: its forward alone (``us``) and, where measured, its backward
(``us_backward``: convolutions) or forward plus backward (``us_forward_backward``).

The ``host`` rows are host-side microseconds per call in the launch-bound regime (tiny ops, with
and without autocast; an AdamW step over 100 parameters); they are recorded the same way and
fit the host costs.

Building the records takes about a minute; they are cached in ``.ptp_cache/`` (git-ignored),
keyed by the ops file and the source of the tracer and cost descriptions.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ptp_callback.precision import PrecisionSpec  # noqa: E402
from ptp_callback.tracer import OpContext, OpRecord, record_ops  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.environ.get("PTP_BENCH_CACHE", os.path.join(os.path.dirname(HERE), ".ptp_cache"))
_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Groups of rows, the unit the op benchmark reports (and the seeded split is stratified by).
GROUPS = {"mm": "gemm", "bmm": "gemm", "conv2d": "conv", "sdpa": "attention", "lstm": "recurrent", "gru": "recurrent",
          "layer_norm": "norm", "rms_norm": "norm", "batch_norm": "norm", "group_norm": "norm", "add": "memory",
          "mul_": "memory", "gelu": "memory", "silu": "memory", "sum": "memory", "copy_to_fp32": "memory", "copy_to_bf16": "memory",
          "cross_entropy": "memory", "embedding": "memory", "host": "host"}


@dataclass(frozen=True)
class Measurement:
    """One measured time of one row and the op records that ran in it.

    ``part`` is ``"fwd"``, ``"bwd"`` or ``"fwd+bwd"``; ``us`` the measured microseconds (device
    time per call, or host time per call for ``host`` rows).
    """

    key: str
    group: str
    op: str
    dtype: str
    shape: tuple[tuple[str, Any], ...]
    part: str
    us: float
    ops: tuple[OpRecord, ...]
    session: str = "ops.jsonl"


def _precision(dtype: str) -> PrecisionSpec:
    # Matmuls in TF32 only for the "tf32" rows; cuDNN convolutions and RNNs in TF32 always
    # (PyTorch's default, which op_bench.py kept). "*-autocast" rows ran under autocast.
    name = {"bf16-autocast": "bf16-mixed", "fp16-autocast": "16-mixed"}.get(dtype, "32-true")
    return PrecisionSpec.from_setting(name, matmul_tf32=dtype == "tf32", conv_tf32=True)


def _gemm(row: dict) -> dict[str, Callable[[OpContext], Any]]:
    s, dt = row["shape"], _DTYPES[row["dtype"]]
    if row["op"] == "mm":
        def mm(ctx: OpContext) -> None:
            with ctx.setup():
                a, b = torch.randn(s["m"], s["k"], dtype=dt), torch.randn(s["k"], s["n"], dtype=dt)
            torch.mm(a, b)

        return {"fwd": mm}

    def bmm(ctx: OpContext) -> None:
        with ctx.setup():
            a, b = torch.randn(s["b"], s["m"], s["k"], dtype=dt), torch.randn(s["b"], s["k"], s["n"], dtype=dt)
        torch.bmm(a, b)

    return {"fwd": bmm}


def _conv(row: dict) -> dict[str, Callable[[OpContext], Any]]:
    s, dt = row["shape"], _DTYPES[row["dtype"]]
    pad = s["k"] // 2

    def tensors() -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randn(s["n"], s["cin"], s["hw"], s["hw"], dtype=dt),
                torch.randn(s["cout"], s["cin"] // s["groups"], s["k"], s["k"], dtype=dt))

    def fwd(ctx: OpContext) -> None:
        with ctx.setup():
            x, w = tensors()
        F.conv2d(x, w, None, s["stride"], pad, 1, s["groups"])

    def bwd(ctx: OpContext) -> None:
        with ctx.setup():
            x, w = tensors()
            out = (s["hw"] + 2 * pad - s["k"]) // s["stride"] + 1
            grad = torch.randn(s["n"], s["cout"], out, out, dtype=dt)
        with ctx.phase("backward"):
            torch.ops.aten.convolution_backward(grad, x, w, [0], [s["stride"]] * 2, [pad] * 2, [1, 1],
                                                False, [0, 0], s["groups"], [True, True, False])

    return {"fwd": fwd, "bwd": bwd}


def _sdpa(row: dict) -> dict[str, Callable[[OpContext], Any]]:
    s, dt = row["shape"], _DTYPES[row["dtype"]]
    kw = dict(is_causal=s["causal"], enable_gqa=s["hkv"] != s["hq"])

    def qkv() -> list[torch.Tensor]:
        return [torch.randn(s["b"], h, s["s"], s["d"], dtype=dt, requires_grad=True) for h in (s["hq"], s["hkv"], s["hkv"])]

    def fwd(ctx: OpContext) -> None:
        with ctx.setup():
            q, k, v = qkv()
        F.scaled_dot_product_attention(q, k, v, **kw)

    def both(ctx: OpContext) -> None:
        with ctx.setup():
            q, k, v = qkv()
        out = F.scaled_dot_product_attention(q, k, v, **kw)
        with ctx.setup():
            grad = torch.randn_like(out)
        with ctx.phase("backward"):
            torch.autograd.grad(out, (q, k, v), grad)

    return {"fwd": fwd, "fwd+bwd": both}


def _recurrent(row: dict) -> dict[str, Callable[[OpContext], Any]]:
    s, name = row["shape"], row["dtype"]
    dt = _DTYPES[name.split("-")[0]]
    param_dt = torch.float32 if "autocast" in name else dt

    def module_and_input() -> tuple[torch.nn.Module, torch.Tensor]:
        cls = torch.nn.LSTM if row["op"] == "lstm" else torch.nn.GRU
        m = cls(s["input"], s["hidden"], s["layers"], batch_first=True, dtype=param_dt)
        return m, torch.randn(s["b"], s["s"], s["input"], dtype=param_dt, requires_grad=True)

    # As benchmarked: the forward alone ran without autocast, forward+backward under it.
    return _module_calls(module_and_input, autocast="autocast" in name)


def _as_benchmarked(*leaves: torch.Tensor) -> None:
    """The benchmark timed each backward many times over the same leaves without clearing their
    gradients, so every timed call also added its gradients into those already there (autograd's
    ``grad += new``, a full read-read-write pass over each leaf): the leaves get gradients, and the
    records hold those adds."""
    for leaf in leaves:
        if leaf.requires_grad and leaf.grad is None:
            leaf.grad = torch.zeros_like(leaf)


def _module_calls(make: Callable[[], tuple[torch.nn.Module, torch.Tensor]], contiguous_grad: bool = False,
                  autocast: bool = False) -> dict[str, Callable[[OpContext], Any]]:
    """``fwd``: a fresh module on its input; ``fwd+bwd``: the same, then the backward of the
    output's sum in fp32 (module and input are built in setup, untimed; a tuple output, as a
    recurrent layer returns, counts by its first tensor). ``contiguous_grad``: the module's CUDA
    backward copies the sum's expanded gradient into a dense tensor first (cuDNN batch norm does),
    a copy the CPU kernels the records come from never make. ``autocast``: the forward of
    ``fwd+bwd`` runs under the row's autocast."""
    def fwd(ctx: OpContext) -> None:
        with ctx.setup():
            m, x = make()
        m(x)

    def both(ctx: OpContext) -> None:
        with ctx.setup():
            m, x = make()
            _as_benchmarked(x, *m.parameters())
        with ctx.autocast() if autocast else contextlib.nullcontext():
            y = m(x)
        if isinstance(y, tuple):
            y = y[0]
        if contiguous_grad:
            y.register_hook(lambda grad: grad.contiguous())
        loss = y.float().sum()
        with ctx.phase("backward"):
            loss.backward()

    return {"fwd": fwd, "fwd+bwd": both}


def _norm(row: dict) -> dict[str, Callable[[OpContext], Any]]:
    s, name = row["shape"], row["dtype"]
    dt = _DTYPES[name.split("-")[0]]
    if row["op"] == "batch_norm":
        def module_and_input() -> tuple[torch.nn.Module, torch.Tensor]:
            m = torch.nn.BatchNorm2d(s["c"], dtype=torch.float32 if name in ("fp32", "bf16-autocast") else dt)
            return m, torch.randn(s["n"], s["c"], s["hw"], s["hw"], dtype=dt, requires_grad=True)

        # fp32 input and weights are the rows CUDA runs through cuDNN (the others its own kernels).
        return _module_calls(module_and_input, contiguous_grad=name == "fp32")

    def call(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if row["op"] == "layer_norm":
            return F.layer_norm(x, (s["d"],), w, b)
        if row["op"] == "group_norm":
            return F.group_norm(x, s["groups"], w, b)
        return F.rms_norm(x, (s["d"],), w)

    def tensors() -> tuple[torch.Tensor, ...]:
        # A group norm's rows are (n, c, hw, hw) maps with a weight and bias per channel (norm_sweep.py).
        shape, width = ((s["n"], s["c"], s["hw"], s["hw"]), s["c"]) if row["op"] == "group_norm" else \
            ((s["rows"], s["d"]), s["d"])
        return (torch.randn(*shape, dtype=dt, requires_grad=True),
                torch.ones(width, dtype=dt, requires_grad=True), torch.zeros(width, dtype=dt, requires_grad=True))

    def fwd(ctx: OpContext) -> None:
        with ctx.setup():
            x, w, b = tensors()
        call(x, w, b)

    def both(ctx: OpContext) -> None:
        with ctx.setup():
            x, w, b = tensors()
        y = call(x, w, b)
        with ctx.setup():
            grad = torch.randn_like(y)
        with ctx.phase("backward"):
            torch.autograd.grad(y, (x, w), grad)

    return {"fwd": fwd, "fwd+bwd": both}


def _memory(row: dict) -> dict[str, Callable[[OpContext], Any]]:
    s, dt, op = row["shape"], _DTYPES[row["dtype"]], row["op"]
    if op == "cross_entropy":
        def fwd(ctx: OpContext) -> None:
            with ctx.setup():
                logits, target = torch.randn(s["rows"], s["vocab"], dtype=dt), torch.randint(0, s["vocab"], (s["rows"],))
            F.cross_entropy(logits, target)

        def both(ctx: OpContext) -> None:
            with ctx.setup():
                logits = torch.randn(s["rows"], s["vocab"], dtype=dt, requires_grad=True)
                target = torch.randint(0, s["vocab"], (s["rows"],))
                _as_benchmarked(logits)
            loss = F.cross_entropy(logits.float() if dt != torch.float32 else logits, target)
            with ctx.phase("backward"):
                loss.backward()

        return {"fwd": fwd, "fwd+bwd": both}
    if op == "embedding":
        def module_and_index() -> tuple[torch.nn.Module, torch.Tensor]:
            return torch.nn.Embedding(s["vocab"], s["d"], dtype=dt), torch.randint(0, s["vocab"], (s["tokens"],))

        return _module_calls(module_and_index)
    n = s["n"]
    calls = {
        "add": lambda a, b: a + b, "mul_": lambda a, b: a.mul_(1.0000001), "gelu": lambda a, b: F.gelu(a),
        "silu": lambda a, b: F.silu(a), "sum": lambda a, b: a.sum(),
        "copy_to_fp32": lambda a, b: a.to(torch.float32), "copy_to_bf16": lambda a, b: a.to(torch.bfloat16),
    }
    def run(ctx: OpContext) -> None:
        with ctx.setup():
            a, b = torch.randn(n, dtype=dt), torch.randn(n, dtype=dt)
        calls[op](a, b)

    return {"fwd": run}


def _host(row: dict) -> dict[str, Callable[[OpContext], Any]]:
    what = row["shape"]["what"]

    def run(ctx: OpContext) -> None:
        if what.startswith("adamw"):
            with ctx.setup():
                params = [torch.nn.Parameter(torch.randn(64, 64)) for _ in range(100)]
                for p in params:
                    p.grad = torch.randn_like(p)
                opt = torch.optim.AdamW(params, foreach=what.endswith("True"))
                opt.step()  # state exists, as after warm-up
            with ctx.phase("optimizer"):
                opt.step()
            return
        with ctx.setup():
            lin = torch.nn.Linear(64, 64)
            x, a = torch.randn(8, 64), torch.randn(8)
            _as_benchmarked(*lin.parameters())
        if what == "add_tiny":
            a + a  # noqa: B018 - the op being timed
            return
        autocast = "autocast" in what
        with ctx.autocast() if autocast else _nothing():
            y = lin(x)
        if "fwd_bwd" in what:
            loss = y.float().sum() if autocast else y.sum()
            with ctx.phase("backward"):
                loss.backward()

    return {"host": run}


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_BUILDERS = {"gemm": _gemm, "conv": _conv, "attention": _sdpa, "recurrent": _recurrent, "norm": _norm,
             "memory": _memory, "host": _host}
_PARTS = {"fwd": "us", "bwd": "us_backward", "fwd+bwd": "us_forward_backward", "host": "us"}


def _host_precision(row: dict) -> PrecisionSpec:
    what = row["shape"].get("what", "")
    if "autocast_fp16" in what:
        return PrecisionSpec.from_setting("16-mixed")
    if "autocast" in what:
        return PrecisionSpec.from_setting("bf16-mixed")
    return PrecisionSpec.from_setting("32-true", matmul_tf32=False, conv_tf32=True)


def _row_key(row: dict) -> str:
    return f"{row['op']}|{row['dtype']}|{json.dumps(row['shape'], sort_keys=True)}"


def build(rows: list[dict], session: str = "ops.jsonl") -> list[Measurement]:
    """Every measurement of ``rows`` with its op records (skipping rows that recorded an error)."""
    out = []
    for row in rows:
        if "us" not in row:
            continue
        group = GROUPS[row["op"]]
        spec = _host_precision(row) if group == "host" else _precision(row["dtype"])
        for part, fn in _BUILDERS[group](row).items():
            us = row.get(_PARTS[part])
            if us is None:
                continue
            ops = record_ops(fn, spec)
            if part == "bwd":
                ops = [op for op in ops if op.phase == "backward"]
            shape = tuple(sorted(row["shape"].items()))
            out.append(Measurement(_row_key(row), group, row["op"], row["dtype"], shape, part, float(us), tuple(ops),
                                   session))
    return out


#: The op timings the fit reads, each one session of the benchmark on one H100: ``ops.jsonl`` (every
#: group) and a later session's recurrent layers (``recurrent_sweep.py``; its H200 rows time
#: another device and are left out). A cuDNN RNN's time steps are bound by the host launching
#: them, and the two sessions' hosts launched them 1.7x apart on the same shapes: two draws of the
#: host a user's run may get, so the fit weighs each session equally (``fit_coefficients.op_loss``).
SESSIONS = ("ops.jsonl", "ops_recurrent_2026-11-26.jsonl")
SESSION_DEVICE = "NVIDIA H100 80GB HBM3"


def _fingerprint(paths: list[str]) -> str:
    digest = hashlib.sha1()
    root = os.path.join(os.path.dirname(HERE), "ptp_callback")
    for name in sorted(os.listdir(root)):
        if name.endswith(".py"):
            with open(os.path.join(root, name), "rb") as f:
                digest.update(f.read())
    for extra in (*paths, os.path.abspath(__file__)):
        with open(extra, "rb") as f:
            digest.update(f.read())
    digest.update(torch.__version__.encode())
    return digest.hexdigest()[:16]


def load(path: str | None = None) -> list[Measurement]:
    """The measurements of the op sessions (:data:`SESSIONS`, or the one file ``path``) with their
    records, from the cache when it is current."""
    paths = [path] if path else [os.path.join(HERE, "data", name) for name in SESSIONS]
    cached = os.path.join(CACHE, f"ops-{_fingerprint(paths)}.pkl")
    if os.path.exists(cached):
        with open(cached, "rb") as f:
            return pickle.load(f)
    measurements = []
    for one in paths:
        with open(one) as f:
            rows = [json.loads(line) for line in f]
        rows = [row for row in rows if row.get("device", SESSION_DEVICE) == SESSION_DEVICE]
        measurements += build(rows, os.path.basename(one))
    os.makedirs(CACHE, exist_ok=True)
    for stale in os.listdir(CACHE):
        if stale.startswith("ops-") and stale.endswith(".pkl"):
            os.remove(os.path.join(CACHE, stale))
    with open(cached, "wb") as f:
        pickle.dump(measurements, f)
    return measurements
