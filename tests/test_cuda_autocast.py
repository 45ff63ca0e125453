"""CUDA's autocast policy replayed on CPU."""

from __future__ import annotations

import os
import re

import pytest
import torch
import torch.nn.functional as F

from ptp_callback import cuda_autocast


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
    assert set(_header_list(text, "AT_FORALL_FP32")) == set(cuda_autocast.CUDA_FP32_OPS)
    assert set(_header_list(text, "AT_FORALL_FP32_SET_OPT_DTYPE")) == set(cuda_autocast.CUDA_FP32_SET_OPT_DTYPE_OPS)
    lower = set(_header_list(text, "AT_FORALL_LOWER_PRECISION_FP"))
    assert set(cuda_autocast.CUDA_ONLY_LOWER_PRECISION_OPS) <= lower


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
