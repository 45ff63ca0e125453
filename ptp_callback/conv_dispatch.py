"""Which CUDA kernel PyTorch runs a depthwise convolution with: cuDNN's or its own.

PyTorch sends a depthwise convolution (one input channel per group) to its own CUDA kernel
(``_conv_depthwise2d``), except where ``ConvParams::use_cudnn_depthwise`` in
``aten/src/ATen/native/Convolution.cpp`` picks cuDNN: always for a channels-last input, and for
fp16 (not bf16, not fp32) NCHW inputs by a fixed table of filter size, stride, width, channels and
batch (``check_cudnn_depthwise_workload_with_filter``, cuDNN 8.2 and later). The two kernels are
far apart: on the H100 an fp16 3x3 depthwise convolution that cuDNN runs took 0.33x the time of
the same convolution in bf16, which PyTorch's kernel runs at its fp32 speed; a 7x7 one (PyTorch's
kernel in every dtype) took the same time in all three.

The rule is PyTorch's and is applied to the traced shapes whatever host traced them, so the
prediction for a CUDA target does not depend on the CPU the trace ran on.
"""

from __future__ import annotations

import torch


def cudnn_runs_depthwise(data: torch.Tensor, weight: torch.Tensor, stride: list[int], dilation: list[int],
                         channels_first: bool) -> bool:
    """Whether PyTorch runs this depthwise convolution with cuDNN on a CUDA device.

    >>> x, w = torch.empty(8, 64, 56, 56, dtype=torch.float16), torch.empty(64, 1, 3, 3, dtype=torch.float16)
    >>> cudnn_runs_depthwise(x, w, [1, 1], [1, 1], channels_first=True)
    True
    >>> cudnn_runs_depthwise(x.bfloat16(), w.bfloat16(), [1, 1], [1, 1], channels_first=True)
    False
    """
    if data.dim() != 4 or weight.dim() != 4:
        return False
    if not channels_first:
        return True  # "always use cudnn_depthwise for channels_last format"
    if data.dtype != torch.float16 or weight.dtype != torch.float16:
        return False
    if any(d != 1 for d in dilation) or data.shape[1] < 32:
        return False
    height, width = int(data.shape[2]), int(data.shape[3])
    stride_h, stride_w = (list(stride) * 2)[:2] if stride else (1, 1)
    if stride_h != stride_w and height != 1:
        return False
    return _workload_suits_cudnn(int(data.shape[0]), int(data.shape[1]), height, width, stride_w,
                                 int(weight.shape[2]), int(weight.shape[3]))


def _workload_suits_cudnn(batch: int, channels: int, height: int, width: int, stride: int, filter_h: int,
                          filter_w: int) -> bool:
    """PyTorch's table for fp16 NCHW depthwise convolutions (cuDNN 8.2 and later)."""
    if height == 1 and stride == 1:
        return True
    if filter_h != filter_w or filter_w not in (1, 3, 5) or width < 7:
        return False
    if stride == 1:
        return True
    if stride != 2:
        return False
    if batch == 1:
        return filter_w in (3, 5) or width <= 28
    if filter_w == 1:
        return batch <= 16 and channels >= 128 and width <= 7
    return channels >= 512 or (channels >= 256 and width >= 28)
