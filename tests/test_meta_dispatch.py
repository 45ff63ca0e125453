"""Ops that the fake mode decomposes in Python, run on meta tensors: the same outputs, the same trace."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from ptp_callback import TraceError, trace_step
from ptp_callback import meta_dispatch
from ptp_callback.meta_dispatch import MetaShortcut

aten = torch.ops.aten


def layouts(out):
    return [(tuple(t.shape), t.stride(), t.dtype, t.device.type) if isinstance(t, torch.Tensor) else t
            for t in (out if isinstance(out, (tuple, list)) else [out])]


def activation_cases(x, g):
    return [(aten.hardswish.default, (x,), {}), (aten.hardsigmoid.default, (x,), {}),
            (aten.gelu_backward.default, (g, x), {"approximate": "tanh"}),
            (aten.hardswish_backward.default, (g, x), {}), (aten.hardsigmoid_backward.default, (g, x), {}),
            (aten.threshold_backward.default, (g, x, 0.0), {}), (aten.silu_backward.default, (g, x), {}),
            (aten.sigmoid_backward.default, (g, x), {}), (aten.tanh_backward.default, (g, x), {})]


def norm_cases(x, g, dtype, device):
    c = x.shape[1]
    w = torch.empty(c, device=device)
    stats = torch.empty(c, device=device)
    mean, invstd = torch.empty(c, device=device), torch.empty(c, device=device)
    ln_x = x.flatten(2).transpose(1, 2).contiguous()
    ln_w = torch.empty(c, dtype=dtype, device=device)
    ln_mean, ln_rstd = torch.empty(ln_x.shape[:2] + (1,), device=device), torch.empty(ln_x.shape[:2] + (1,), device=device)
    return [(aten.native_batch_norm.default, (x, w, w, stats, stats, True, 0.1, 1e-5), {}),
            (aten.native_batch_norm.default, (x, w, w, stats, stats, False, 0.1, 1e-5), {}),
            (aten.native_batch_norm_backward.default, (g, x, w, stats, stats, mean, invstd, True, 1e-5, [True] * 3), {}),
            (aten.native_layer_norm.default, (ln_x, [c], ln_w, ln_w, 1e-5), {}),
            (aten.native_layer_norm_backward.default, (ln_x, ln_x, [c], ln_mean, ln_rstd, ln_w, ln_w, [True] * 3), {})]


def inputs(dtype, channels_last, device="cpu"):
    x = torch.empty(4, 8, 5, 6, dtype=dtype, device=device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, torch.empty_like(x)


def assert_as_the_fake_mode(shortcut, cases):
    """Each op takes the meta path and gives the layouts the fake mode gives."""
    for func, args, kwargs in cases:
        fast = shortcut.run(func, args, kwargs)
        assert fast is not NotImplemented, func
        assert layouts(fast) == layouts(func(*args, **kwargs)), func


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_cudnn_batch_norm_gives_what_the_fake_mode_gives(dtype, channels_last):
    """A trace on a GPU machine meets cuDNN's batch norm on fake CUDA tensors (no GPU needed here)."""
    shortcut = MetaShortcut(cuda_target=True)
    with FakeTensorMode():
        x, g = inputs(dtype, channels_last, "cuda")
        w, stats = torch.empty(8, device="cuda"), torch.empty(8, device="cuda")
        out = aten.cudnn_batch_norm.default(x, w, w, stats, stats, True, 0.1, 1e-5)
        cases = [(aten.cudnn_batch_norm.default, (x, w, w, stats, stats, True, 0.1, 1e-5), {}),
                 (aten.cudnn_batch_norm_backward.default, (x, g, w, stats, stats, out[1], out[2], 1e-5, out[3]), {})]
        for func, args, kwargs in cases:
            fast = shortcut.run(func, args, kwargs)
            assert fast is not NotImplemented
            assert layouts(fast) == layouts(func(*args, **kwargs)), func


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_norms_give_what_the_fake_mode_gives_on_cuda(dtype, channels_last):
    """On the CPU proxy the norms' outputs are CUDA's (fp32 statistics for half inputs), as a
    fake CUDA device (which needs no GPU for these forward and backward rules) gives them."""
    shortcut = MetaShortcut(cuda_target=True)
    with FakeTensorMode():
        on_cpu = norm_cases(*inputs(dtype, channels_last), dtype, "cpu")
        on_cuda = norm_cases(*inputs(dtype, channels_last, "cuda"), dtype, "cuda")
        for (func, args, kwargs), (_, cuda_args, cuda_kwargs) in zip(on_cpu, on_cuda):
            fast = shortcut.run(func, args, kwargs)
            expected = [(shape, stride, dt, "cpu") if isinstance(shape, tuple) else shape
                        for shape, stride, dt, _device in layouts(func(*cuda_args, **cuda_kwargs))]
            assert layouts(fast) == expected, func


def test_norms_of_a_cpu_target_go_through_the_fake_mode():
    shortcut = MetaShortcut(cuda_target=False)
    with FakeTensorMode():
        x, g = inputs(torch.bfloat16, False)
        for func, args, kwargs in norm_cases(x, g, torch.bfloat16, "cpu"):
            assert shortcut.run(func, args, kwargs) is NotImplemented


def test_real_and_other_ops_go_through_the_fake_mode():
    shortcut = MetaShortcut(cuda_target=True)
    with FakeTensorMode():
        x, g = inputs(torch.float32, False)
        assert shortcut.run(aten.cat.default, ([x, g],), {}) is NotImplemented
        constant = torch.tensor(2.0)  # a scalar made under the fake mode: a fake tensor with a value
        assert constant.constant is not None
        assert shortcut.run(aten.hardswish.default, (constant,), {}) is NotImplemented
    real = torch.zeros(3)
    with FakeTensorMode(allow_non_fake_inputs=True):
        assert shortcut.run(aten.hardswish.default, (real,), {}) is NotImplemented


def test_a_signature_seen_before_is_not_run_again_by_any_trace(monkeypatch):
    """The outputs' layouts are remembered for the process: a second trace (the validation step,
    another precision) does not run the op again."""
    runs = []
    as_meta = meta_dispatch.as_meta
    monkeypatch.setattr(meta_dispatch, "as_meta", lambda value: runs.append(1) or as_meta(value))
    with FakeTensorMode():
        g, x = torch.empty(3, 7, 11, 13, dtype=torch.bfloat16), torch.empty(3, 7, 11, 13, dtype=torch.bfloat16)
        first = MetaShortcut(cuda_target=True).run(aten.hardswish_backward.default, (g, x), {})
        assert runs
        runs.clear()
        again = MetaShortcut(cuda_target=True).run(aten.hardswish_backward.default, (torch.empty_like(g), torch.empty_like(x)), {})
        assert not runs and layouts(first) == layouts(again) and first is not again


class SqueezeExciteNet(nn.Module):
    """Batch norm, hardswish, hardsigmoid, GELU and layer norm: every op of the shortcut."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 16, 1), nn.Hardsigmoid())
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.hardswish(self.bn(self.conv(x)))
        x = x * self.se(x)
        x = F.silu(x) + torch.tanh(x) + torch.sigmoid(x) + F.relu(x)
        x = F.gelu(self.norm(x.mean((2, 3))), approximate="tanh")
        return self.head(x)


def ce_step(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-true"])
@pytest.mark.parametrize("device", ["h100-sxm", "cpu"])
def test_the_trace_is_the_one_the_fake_mode_gives(monkeypatch, precision, device):
    from ptp_callback.step import resolve_device

    target = "cpu" if resolve_device(device)[0].arch == "cpu" else "cuda"
    batch = (torch.randn(8, 3, 12, 12), torch.randint(0, 10, (8,)))
    fast = trace_step(SqueezeExciteNet(), batch, ce_step, None, precision, target_type=target, trace_on="cpu")
    monkeypatch.setattr(meta_dispatch.MetaShortcut, "run", lambda self, func, args, kwargs: NotImplemented)
    slow = trace_step(SqueezeExciteNet(), batch, ce_step, None, precision, target_type=target, trace_on="cpu")
    assert [(op.name, op.phase) for op in fast.ops] == [(op.name, op.phase) for op in slow.ops]
    for a, b in zip(fast.ops, slow.ops):
        if "layer_norm" in a.name and precision == "bf16-true" and target == "cuda":
            # CUDA keeps a half layer norm's statistics in fp32, the CPU in the input's dtype: two
            # statistics per row (8 rows), 2 bytes more each.
            assert a.cost.bytes - b.cost.bytes == 2 * 8 * 2
        else:
            assert a.cost == b.cost and a.out_shapes == b.out_shapes, a.name


def view_cases(x):
    """``view`` of a contiguous tensor (with -1), of a transposed one it can still view, of a
    window partition (6-D, permuted); ``_unsafe_view``; ``_reshape_alias`` as reshape calls it."""
    t = x.transpose(1, 2)  # (4, 5, 8, 6): its last dim can still be split
    windows = x.view(4, 8, 5, 1, 3, 2).permute(0, 3, 1, 4, 2, 5)
    return [(aten.view.default, (x, [4, -1]), {}), (aten.view.default, (t, [4, 5, 8, 2, 3]), {}),
            (aten.view.default, (windows, [4, 1, 8, 3, 5, 2]), {}), (aten._unsafe_view.default, (x, [32, 30]), {}),
            (aten._reshape_alias.default, (x[1:], [3, 240], [240, 1]), {})]


def geometry(t):
    return (tuple(t.shape), tuple(st for size, st in zip(t.shape, t.stride()) if size != 1), t.dtype,
            t.storage_offset())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_views_give_what_the_fake_mode_gives_and_alias_their_input(dtype):
    shortcut = MetaShortcut(cuda_target=True)
    with FakeTensorMode():
        x = torch.empty(4, 8, 5, 6, dtype=dtype)
        for func, args, kwargs in view_cases(x):
            fast = shortcut.run(func, args, kwargs)
            assert fast is not NotImplemented, func
            slow = func(*args, **kwargs)
            # the strides of size-1 dims, which address nothing, are ATen's (what a real run has)
            assert geometry(fast) == geometry(slow), func
            assert torch._C._is_alias_of(fast, args[0]), func  # the input's storage, as a view is
        # a shape the input cannot be viewed as, and a tensor with values: the fake mode's answer
        assert shortcut.run(aten.view.default, (x.transpose(1, 2), [4, -1]), {}) is NotImplemented
        count = torch.tensor(3)  # made under the fake mode: a fake tensor with a value
        assert count.constant is not None
        assert shortcut.run(aten.view.default, (count, [1]), {}) is NotImplemented


class WindowAttention(nn.Module):
    """Windows cut from a feature map and put back (views of permuted tensors), attention inside."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.proj = nn.Linear(16, 48), nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        win = x.view(b, h // 4, 4, w // 4, 4, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 16, c)
        q, k, v = self.qkv(win).chunk(3, dim=-1)
        out = self.proj(F.scaled_dot_product_attention(q, k, v))
        return out.view(b, h // 4, w // 4, 4, 4, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c).mean((1, 2))


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_trace_with_views_is_the_one_the_fake_mode_gives(monkeypatch, precision):
    batch = (torch.randn(2, 8, 8, 16), torch.randint(0, 16, (2,)))
    fast = trace_step(WindowAttention(), batch, ce_step, None, precision, trace_on="cpu")
    # the meta path off: views, products and elementwise ops all through the fake mode
    monkeypatch.setattr(meta_dispatch.MetaShortcut, "run", lambda self, func, args, kwargs: NotImplemented)
    slow = trace_step(WindowAttention(), batch, ce_step, None, precision, trace_on="cpu")
    assert [(op.name, op.phase, op.cost, op.out_shapes, op.views) for op in fast.ops] == \
        [(op.name, op.phase, op.cost, op.out_shapes, op.views) for op in slow.ops]
    assert fast.peak_new_bytes == slow.peak_new_bytes


def cast_fill_and_list_cases(x):
    """A cast (autocast's, keeping channels-last), an optimizer's state fills, and the multi-tensor
    ops that return new tensors (AdamW's ``_foreach_sqrt``)."""
    params = [x, torch.empty(8, dtype=x.dtype)]
    return [(aten._to_copy.default, (x,), {"dtype": torch.bfloat16}),
            (aten._to_copy.default, (x,), {"dtype": torch.float16, "device": torch.device("cpu")}),
            (aten.zeros_like.default, (x,), {"memory_format": torch.preserve_format}),
            (aten.ones_like.default, (x,), {"dtype": torch.float32}),
            (aten.empty_like.default, (x,), {}),
            (aten._foreach_sqrt.default, (params,), {}),
            (aten._foreach_add.List, (params, params), {"alpha": 2})]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_casts_fills_and_list_ops_give_what_the_fake_mode_gives(dtype, channels_last):
    shortcut = MetaShortcut(cuda_target=True)
    with FakeTensorMode():
        assert_as_the_fake_mode(shortcut, cast_fill_and_list_cases(inputs(dtype, channels_last)[0]))


def test_integer_fills_and_copies_to_another_device_go_through_the_fake_mode():
    """An integer fill may keep its values (``known_values``); a copy to the GPU is the fake mode's."""
    shortcut = MetaShortcut(cuda_target=True)
    with FakeTensorMode():
        x, _ = inputs(torch.float32, False)
        labels = torch.empty(4, dtype=torch.long)
        assert shortcut.run(aten.zeros_like.default, (labels,), {}) is NotImplemented
        assert shortcut.run(aten.zeros_like.default, (x,), {"dtype": torch.long}) is NotImplemented
        assert shortcut.run(aten._to_copy.default, (x,), {"device": torch.device("cuda")}) is NotImplemented


def test_a_host_tensor_keeps_the_value_the_fake_mode_would_keep():
    from ptp_callback.known_values import VALUE_LIMIT, ValuedFakeTensorMode

    shortcut = MetaShortcut(cuda_target=True)
    count, big = torch.tensor(3.0), torch.zeros(2 * VALUE_LIMIT)  # host tensors, as ``torch.tensor`` makes them
    with ValuedFakeTensorMode(allow_non_fake_inputs=True) as mode:
        step = shortcut.run(aten.lift_fresh.default, (count,), {})
        assert step.fake_mode is mode and step.shape == () and step.item() == 3.0
        fast, slow = shortcut.run(aten.lift_fresh.default, (big,), {}), aten.lift_fresh.default(big)
        assert layouts(fast) == layouts(slow) and fast.constant is None and slow.constant is None
    # an AdamW step reads its step counts (made by ``torch.tensor``) for the bias correction: known
    # values, no wait for the device
    trace = trace_step(nn.Linear(4, 4), torch.randn(2, 4), lambda m, b: m(b).sum(), None, "32-true",
                       target_type="cuda", trace_on="cpu")
    assert not [op for op in trace.ops if op.name == "ptp.sync"]


def test_the_backward_is_recorded_outside_the_torch_function_mode(monkeypatch):
    """The autograd engine dispatches the backward's ops with the trace's torch function mode on its
    stack: the recording (its tensor methods, the fake mode's) must not pass through it."""
    from ptp_callback import tracer

    calls: dict[str, int] = {}
    handler = tracer._CudaKernels.__torch_function__

    def counting(self, func, types, args=(), kwargs=None):
        calls[self.recorder.phase] = calls.get(self.recorder.phase, 0) + 1
        return handler(self, func, types, args, kwargs)

    monkeypatch.setattr(tracer._CudaKernels, "__torch_function__", counting)
    batch = (torch.randn(8, 3, 12, 12), torch.randint(0, 10, (8,)))
    trace = trace_step(SqueezeExciteNet(), batch, ce_step, None, "16-mixed", target_type="cuda", trace_on="cpu")
    # what is left is the step's own Python in the backward phase (the loss's scaling, the engine's call)
    assert calls.get("backward", 0) < sum(op.phase == "backward" for op in trace.ops) / 4, calls


def plain_view_cases(x):
    return [(aten.transpose.int, (x, 1, 2), {}), (aten.permute.default, (x, [0, 2, 3, 1]), {}),
            (aten.expand.default, (x[:, :1], [4, 8, 5, 6]), {}), (aten.slice.Tensor, (x, 3, 1, 5, 2), {}),
            (aten.select.int, (x, 1, 3), {}), (aten.unbind.int, (x, 0), {}), (aten.split.Tensor, (x, 3, 1), {}),
            (aten.detach.default, (x,), {}), (aten.unsqueeze.default, (x, 2), {}), (aten.t.default, (x[0, 0],), {}),
            (aten.diagonal.default, (x, 0, 2, 3), {}), (aten.as_strided.default, (x, [4, 6], [240, 1], 7), {})]


@pytest.mark.parametrize("channels_last", [False, True])
def test_plain_views_give_what_the_fake_mode_gives_and_alias_their_input(channels_last):
    shortcut = MetaShortcut(cuda_target=True)
    with FakeTensorMode():
        x, _ = inputs(torch.bfloat16, channels_last)
        for func, args, kwargs in plain_view_cases(x):
            fast = shortcut.run(func, args, kwargs)
            assert fast is not NotImplemented, func
            slow = func(*args, **kwargs)
            assert [geometry(t) for t in fast] == [geometry(t) for t in slow] if isinstance(slow, (list, tuple)) \
                else geometry(fast) == geometry(slow), func
            for t in fast if isinstance(fast, (list, tuple)) else [fast]:
                assert type(t) is FakeTensor and t.fake_device == x.fake_device and torch._C._is_alias_of(t, x), func
        # in place (``t_`` changes its input's strides), and a view of a tensor with values: the fake mode's
        assert shortcut.run(aten.t_.default, (x[0, 0],), {}) is NotImplemented
        valued = torch.tensor([[3]])
        assert valued.constant is not None and shortcut.run(aten.transpose.int, (valued, 0, 1), {}) is NotImplemented


def product_reduction_and_elementwise_cases(x, g):
    n, c = x.shape[0], x.shape[1]
    rows = x.flatten(1)  # (4, 240), a view of a channels-last tensor is not contiguous
    weight = torch.empty(16, rows.shape[1], dtype=x.dtype).t()  # a linear layer's transposed weight
    bias = torch.empty(16, dtype=x.dtype)
    batched = x.flatten(2)  # (4, 8, 30)
    logits = torch.empty(n, c, dtype=x.dtype)
    log_probs = aten._log_softmax.default(logits, 1, False)
    target = torch.empty(n, dtype=torch.long)
    loss, total = aten.nll_loss_forward.default(log_probs, target, None, 1, -100)
    mask = torch.empty_like(x, dtype=torch.bool)
    return [(aten.mul.Tensor, (x, g), {}), (aten.add.Tensor, (x, g), {"alpha": 2}), (aten.div.Scalar, (x, 3.0), {}),
            (aten.gelu.default, (x,), {}), (aten.clone.default, (x,), {}),
            (aten.clone.default, (x,), {"memory_format": torch.contiguous_format}),
            (aten.sum.dim_IntList, (x, [1], True), {}), (aten.mean.dim, (x, [2, 3]), {}),
            (aten.mul.Tensor, (x, x[:, :1]), {}),  # broadcast
            (aten.mm.default, (rows, weight), {}), (aten.bmm.default, (batched, batched.transpose(1, 2)), {}),
            (aten.addmm.default, (bias, rows, weight), {}),
            (aten._log_softmax.default, (logits, 1, False), {}),
            (aten._log_softmax_backward_data.default, (logits, log_probs, 1, x.dtype), {}),
            (aten.nll_loss_forward.default, (log_probs, target, None, 1, -100), {}),
            (aten.nll_loss_backward.default, (loss, log_probs, target, None, 1, -100, total), {}),
            (aten._softmax_backward_data.default, (g, x, 1, x.dtype), {}),
            (aten.slice_backward.default, (x[:, 2:6], list(x.shape), 1, 2, 6, 1), {}),
            (aten.native_dropout.default, (x, 0.1, True), {}), (aten.native_dropout_backward.default, (g, mask, 1.1), {})]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("make_cases", [activation_cases, product_reduction_and_elementwise_cases])
def test_activations_products_reductions_and_elementwise_ops_give_what_the_fake_mode_gives(
        make_cases, dtype, channels_last):
    """For any target: unlike the norms, these ops' outputs are the same on every device."""
    shortcut = MetaShortcut(cuda_target=False)
    with FakeTensorMode():
        assert_as_the_fake_mode(shortcut, make_cases(*inputs(dtype, channels_last)))


def test_a_remembered_layout_is_told_apart_by_the_type_of_a_number_argument():
    """Python holds ``2 == 2.0 == True``, but an integer tensor's ``pow(x, 2.0)`` is floating point and
    its ``pow(x, 2)`` an integer: a layout remembered for one is never the other's."""
    shortcut = MetaShortcut(cuda_target=True)
    with FakeTensorMode():
        counts = torch.empty(4, 3, dtype=torch.long)
        flags = torch.empty(4, 3, dtype=torch.bool)
        cases = [(aten.pow.Tensor_Scalar, (counts, 2.0), {}), (aten.pow.Tensor_Scalar, (counts, 2), {}),
                 (aten.mul.Scalar, (counts, 0.5), {}), (aten.mul.Scalar, (counts, 1), {}),
                 (aten.add.Scalar, (flags, 1.0), {}), (aten.add.Scalar, (flags, True), {}), (aten.add.Scalar, (flags, 1), {})]
        for func, args, kwargs in cases:
            out = shortcut.run(func, args, kwargs)
            expected = func(*args, **kwargs)
            assert out is NotImplemented or layouts(out) == layouts(expected), (func, args[1])
        assert shortcut.run(aten.pow.Tensor_Scalar, (counts, 2), {}) is NotImplemented  # an integer: the fake mode's


def test_in_place_random_integer_and_other_ops_go_through_the_fake_mode():
    """An in-place op returns its input, a random draw may be read (``value_reads``), a check of the
    model's numbers and integer arithmetic may be answered by known values (``known_values``), a
    convolution's layout is the fake mode's rule for the device: none takes the meta path."""
    shortcut = MetaShortcut(cuda_target=True)
    with FakeTensorMode():
        x, g = inputs(torch.float32, False)
        w = torch.empty(8, 8, 3, 3)
        labels = torch.empty(4, dtype=torch.long)
        for func, args in [(aten.isnan.default, (x,)), (aten.eq.Tensor, (x, x)), (aten.add.Tensor, (labels, labels)),
                           (aten.sum.default, (labels,))]:
            assert shortcut.run(func, args, {}) is NotImplemented, func
        for func, args in [(aten.add_.Tensor, (x, g)), (aten.mul_.Scalar, (x, 2.0)), (aten.bernoulli.default, (x,)),
                           (aten.rand_like.default, (x,)), (aten.convolution.default, (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)),
                           (aten.index.Tensor, (x, [torch.empty(2, dtype=torch.long)]))]:
            assert shortcut.run(func, args, {}) is NotImplemented, func


def test_the_meta_path_makes_the_fake_tensors_the_fake_mode_makes():
    """Fake tensors made from a template of the constructor's: the same type, attributes, device and
    dispatch keys; the template does not keep a trace's fake mode alive."""
    import gc
    import weakref

    for device in ("cpu", "cuda"):
        mode = FakeTensorMode()
        with mode:
            x, g = inputs(torch.bfloat16, True, device)
            fast = MetaShortcut(cuda_target=True).run(aten.mul.Tensor, (x, g), {})
            slow = aten.mul.Tensor(x, g)
        assert type(fast) is FakeTensor and fast.fake_mode is mode and fast.fake_device == slow.fake_device
        assert fast.__dict__ == slow.__dict__
        assert torch._C._dispatch_keys(fast) == torch._C._dispatch_keys(slow)
        with mode:
            assert layouts(fast + 1) == layouts(slow + 1)
        alive = weakref.ref(mode)
        del mode, x, g, fast, slow
        gc.collect()
        assert alive() is None, device


@pytest.mark.parametrize("precision", ["bf16-true", "16-true"])
def test_a_gemm_of_two_dtypes_stops_the_trace_as_it_stops_a_real_step(precision):
    # An fp32 input to a half-precision Linear: torch's meta kernels of mm/addmm accept it, no real kernel does.
    class Casts(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(8, 8)

        def forward(self, x):
            return self.layer(x.float()).mean()

    with pytest.raises(TraceError, match="mat1 and mat2 must have the same dtype, but got Float and (BFloat16|Half)"):
        trace_step(Casts(), (torch.randn(4, 8),), lambda m, b: m(b[0]), None, precision, target_type="cuda")
    with pytest.raises(RuntimeError, match="mat1 and mat2 must have the same dtype"):
        Casts().to(torch.bfloat16)(torch.randn(4, 8))  # what the real step does
