"""CUDA's autocast policy replayed on CPU."""

from __future__ import annotations

import os
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from ptp_callback import cuda_autocast, trace_step


def _header_list(text: str, macro: str) -> list[str]:
    body = text.split(f"#define {macro}(_)", 1)[1].split("\n\n", 1)[0]
    ops = []
    for name, overload in re.findall(r"_\((\w+)(?:,\s*(\w+))?\)", body):
        ops.append(f"{name}.{overload}" if overload and overload != "deprecated" else name)
    return ops


def test_lists_match_the_installed_pytorch_header():
    header = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "autocast_mode.h")
    if not os.path.exists(header):
        pytest.skip("this PyTorch build ships no ATen headers")
    text = open(header).read()
    policy = cuda_autocast.active_policy()  # what the installed PyTorch's CUDA autocast casts
    if cuda_autocast._cuda_autocast_kernel("mm"):  # its registrations: exactly the header's lists
        assert set(_header_list(text, "AT_FORALL_FP32")) == set(policy["fp32"])
        assert set(_header_list(text, "AT_FORALL_FP32_SET_OPT_DTYPE")) == set(policy["fp32_set_opt_dtype"])
    else:  # a CPU-only build cannot say which it casts: the policy covers every version's lists
        assert set(_header_list(text, "AT_FORALL_FP32")) <= set(policy["fp32"])
        assert set(_header_list(text, "AT_FORALL_FP32_SET_OPT_DTYPE")) <= set(policy["fp32_set_opt_dtype"])
    lower = set(_header_list(text, "AT_FORALL_LOWER_PRECISION_FP"))
    assert set(policy["lower_precision"]) <= lower
    assert set(policy["promote"]) <= set(_header_list(text, "AT_FORALL_PROMOTE"))


def test_ops_cuda_autocast_promotes_run_in_the_widest_input_type():
    # spectral_norm under autocast: an fp32 vector meets CUDA's bf16 mv in vdot.
    u, w, v = torch.randn(16), torch.randn(16, 8), torch.randn(8)
    with cuda_autocast.cuda_autocast_on_cpu(), torch.autocast("cpu", dtype=torch.bfloat16):
        product = torch.mv(w, v)
        assert product.dtype == torch.bfloat16
        assert torch.vdot(u, product).dtype == torch.float32
        assert torch.addcmul(product, product, product).dtype == torch.bfloat16  # no fp32 input: stays


def test_policy_keeps_only_ops_the_installed_pytorch_casts(monkeypatch):
    # As on PyTorch 2.11, where CUDA autocast has no kernel for rms_norm: it is not cast to fp32.
    registered = cuda_autocast._cuda_autocast_kernel
    monkeypatch.setattr(cuda_autocast, "_cuda_autocast_kernel", lambda op: op != "rms_norm" and registered(op))
    assert "rms_norm" not in cuda_autocast.active_policy()["fp32"]
    assert not cuda_autocast.casts_to_fp32("rms_norm") and cuda_autocast.casts_to_fp32("layer_norm")
    x = torch.randn(4, 16).bfloat16()
    with cuda_autocast.cuda_autocast_on_cpu() as overridden, torch.autocast("cpu", dtype=torch.bfloat16):
        assert "rms_norm" not in overridden and "layer_norm" in overridden
        assert F.layer_norm(x, (16,)).dtype == torch.float32


def test_policy_applies_inside_and_is_removed_after():
    x = torch.randn(4, 16).bfloat16()

    def dtypes():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.layer_norm(x, (16,)).dtype, F.softmax(x, -1).dtype, x.pow(2).dtype, x.sum().dtype

    assert dtypes() == (torch.bfloat16,) * 4  # CPU autocast keeps bf16
    with cuda_autocast.cuda_autocast_on_cpu() as overridden:
        assert dtypes() == (torch.float32,) * 4  # CUDA runs these in fp32
        assert "layer_norm" in overridden
    assert dtypes() == (torch.bfloat16,) * 4  # CPU's own kernels are back


def test_matmuls_still_run_in_lower_precision():
    with cuda_autocast.cuda_autocast_on_cpu(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert F.linear(torch.randn(2, 8), torch.randn(4, 8)).dtype == torch.bfloat16
        assert torch.einsum("ij,jk->ik", torch.randn(2, 8), torch.randn(8, 3)).dtype == torch.bfloat16


class Islands(torch.nn.Module):
    """GPU code's own autocast regions: an fp32 island, an fp16 region, the older CUDA-only API."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = (torch.nn.Linear(16, 16) for _ in range(4))

    def forward(self, x):
        x = self.a(x)
        with torch.autocast("cuda", enabled=False):
            x = self.b(x.float())
        with torch.autocast("cuda", dtype=torch.float16):
            x = self.c(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.cuda.amp.autocast is deprecated
            island = torch.cuda.amp.autocast(enabled=False)
        with island:
            return self.d(x.float()).float().sum()


def test_a_steps_own_cuda_autocast_regions_are_kept_on_the_cpu_proxy():
    trace = trace_step(Islands(), (torch.randn(4, 16),), lambda m, b: m(b[0]), None, "bf16-mixed",
                       target_type="cuda", trace_on="cpu")
    gemms = {op.module.rsplit(".", 1)[-1]: op.cost.dtype for op in trace.ops
             if op.phase == "forward" and op.cost.op_class == "gemm"}
    assert gemms == {"a": "bf16", "b": "fp32", "c": "fp16", "d": "fp32"}
    # Outside a trace, torch.autocast("cuda") is PyTorch's own again.
    assert torch.amp.autocast_mode.autocast.__init__.__module__ == "torch.amp.autocast_mode"
