"""Gradient clipping is traced with the optimizer step it precedes: ``ClippedGradients``,
Lightning's ``gradient_clip_val`` and the Hugging Face Trainer's ``max_grad_norm``."""

from __future__ import annotations

import os
import sys

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from ptp_callback import ClippedGradients, ManualOptimization, PrecisionTimeCallback, predict_step
from ptp_callback.precision import as_precision
from ptp_callback.trace_cache import trace_key
from ptp_callback.tracer import trace_step

BATCH = torch.randn(8, 256)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 4))


def optimizer_ops(net: torch.nn.Module, optimizer, precision: str = "32-true") -> list[str]:
    trace = trace_step(net, BATCH, optimizer=optimizer, precision=precision, target_type="cuda")
    return [op.name.split(".")[1] for op in trace.ops if op.phase == "optimizer"]


def test_clipping_by_norm_runs_on_unscaled_gradients_before_the_update():
    net = model()
    ops = optimizer_ops(net, ClippedGradients(torch.optim.AdamW(net.parameters()), 1.0), "16-mixed")
    unscale, norm, update = (ops.index(name) for name in
                             ("_amp_foreach_non_finite_check_and_unscale_", "_foreach_norm", "optimizer_python"))
    assert unscale < norm < update < ops.index("_foreach_lerp_")  # AdamW's update starts at its Python loop
    assert ops[norm:update].count("_foreach_mul_") == 1  # the gradients scaled by the clip coefficient


def test_clipping_by_value_clamps_each_gradient_and_no_clipping_adds_nothing():
    net = model()
    by_value = optimizer_ops(net, ClippedGradients(torch.optim.AdamW(net.parameters()), 0.5, algorithm="value"))
    assert {"_foreach_clamp_min_", "_foreach_clamp_max_"} <= set(by_value) and "_foreach_norm" not in by_value
    plain = optimizer_ops(net, torch.optim.AdamW(net.parameters()))
    assert not {"_foreach_norm", "_foreach_clamp_min_", "_foreach_clamp_max_"} & set(plain)


def deep() -> torch.nn.Module:
    return torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(10)])  # 20 gradients


def clip_kernels(trace) -> dict[str, int]:
    names = [op.name.split(".")[1] for op in trace.ops if op.phase != "backward"]  # a step's own: in its code
    return {name: names.count(name) for name in ("_foreach_norm", "linalg_vector_norm", "_foreach_mul_", "mul_")}


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_clipping_is_traced_with_the_multi_tensor_kernels_a_real_step_runs(target):
    net = deep()
    batch = torch.randn(4, 32)
    clipped = trace_step(net, batch, optimizer=ClippedGradients(torch.optim.SGD(net.parameters(), lr=0.1), 1.0),
                         target_type=target)
    # one norm over all 20 gradients and one scaling of them, not two kernels per gradient
    assert clip_kernels(clipped) == {"_foreach_norm": 1, "linalg_vector_norm": 1, "_foreach_mul_": 1, "mul_": 0}

    def own_clipping(model, batch, step):  # a step that clips its gradients itself
        step.backward(model(batch).sum())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        step.optimizers[0].step()
        step.optimizers[0].zero_grad()

    manual = trace_step(net, batch, own_clipping, ManualOptimization(torch.optim.SGD(net.parameters(), lr=0.1)),
                        target_type=target)
    assert clip_kernels(manual)["_foreach_norm"] == 1 and clip_kernels(manual)["linalg_vector_norm"] == 1


def test_a_clipped_step_is_predicted_longer_by_passes_over_the_gradients():
    net = model()
    plain = predict_step(net, BATCH, None, torch.optim.AdamW(net.parameters()), "32-true", "h100-sxm")
    clipped = predict_step(net, BATCH, None, ClippedGradients(torch.optim.AdamW(net.parameters()), 1.0), "32-true",
                           "h100-sxm")
    assert clipped.step_s > plain.step_s
    grad_bytes = sum(p.numel() * 4 for p in net.parameters())
    clip_ops = [op for op in clipped.ops if op.name in ("aten._foreach_norm.Scalar", "aten._foreach_mul_.Tensor")
                and op.phase == "optimizer"]
    # The norm reads every gradient; the scaling reads and writes it (AdamW's own _foreach_mul_ is a .Scalar).
    assert sum(op.cost.bytes for op in clip_ops) >= 3 * grad_bytes


def test_the_trace_cache_tells_clipped_steps_apart():
    net = model()
    optimizer = torch.optim.AdamW(net.parameters())
    keys = {trace_key(net, BATCH, None, opt, as_precision("32-true"), target_type="cuda", train=True)
            for opt in (optimizer, ClippedGradients(optimizer, 1.0), ClippedGradients(optimizer, 2.0),
                        ClippedGradients(optimizer, 1.0, algorithm="value"))}
    assert len(keys) == 4


@pytest.mark.parametrize("settings, message", [(dict(limit=0.0), "positive"), (dict(limit=1.0, algorithm="l2"),
                                                                                   "'norm' or 'value'")])
def test_a_clipping_that_cannot_run_is_an_error_that_says_why(settings, message):
    with pytest.raises(ValueError, match=message):
        ClippedGradients(None, **settings)


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


@pytest.mark.parametrize("clip, expected", [(dict(), set()), (dict(gradient_clip_val=1.0), {"_foreach_norm"}),
                                            (dict(gradient_clip_val=0.5, gradient_clip_algorithm="value"),
                                             {"_foreach_clamp_min_", "_foreach_clamp_max_"})])
def test_a_lightning_fit_traces_the_clipping_its_trainer_runs(clip, expected):
    data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    callback = PrecisionTimeCallback(device="h100-sxm")
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, enable_progress_bar=False, callbacks=[callback], **clip)
    trainer.fit(Classifier(), DataLoader(data, batch_size=16))
    names = {op.name.split(".")[1] for op in callback.prediction.trace.ops if op.phase == "optimizer"}
    assert names & {"_foreach_norm", "_foreach_clamp_min_", "_foreach_clamp_max_"} == expected


@pytest.mark.parametrize("max_grad_norm, clipped", [(1.0, True), (0.0, False)])
def test_a_hugging_face_trainer_run_traces_its_gradient_clipping(tmp_path, max_grad_norm, clipped):
    pytest.importorskip("transformers")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import hf_trainer

    _trainer, callback = hf_trainer.main(str(tmp_path / "out"), samples=64, epochs=1, device="h100-sxm",
                                         advise=False, max_grad_norm=max_grad_norm)
    names = {op.name.split(".")[1] for op in callback.tracker.prediction.trace.ops}
    assert ("_foreach_norm" in names) == clipped
