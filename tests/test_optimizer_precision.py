"""An optimizer eps that float16 rounds to 0: warned about once, and the warning is right."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import lightning as L
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from ptp_callback import PrecisionTimeCallback
from ptp_callback.notices import PrecisionHazard
from ptp_callback.optimizer_precision import eps_underflow, rounds_to_zero
from ptp_callback.step import predict_step

Factory = Callable[[list[nn.Parameter]], torch.optim.Optimizer]


class Classifier(L.LightningModule):
    def __init__(self, optimizer: Factory) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 256), nn.GELU(), nn.Linear(256, 4))
        self.optimizer = optimizer

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x).float(), y)

    def configure_optimizers(self):
        return self.optimizer(list(self.parameters()))


def fit(precision: str, optimizer: Factory) -> tuple[list[warnings.WarningMessage], int]:
    """A short real fit: the hazard warnings it gave, and how many weights ended non-finite."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 32), torch.randint(0, 4, (64,)))
    model = Classifier(optimizer)
    trainer = L.Trainer(accelerator="cpu", precision=precision, max_steps=3, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[PrecisionTimeCallback(advise=False)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, DataLoader(data, batch_size=16))
    hazards = [w for w in caught if issubclass(w.category, PrecisionHazard)]
    return hazards, sum(int((~torch.isfinite(p)).sum()) for p in model.parameters())


def test_adamw_default_eps_in_16_true_is_warned_about_and_does_make_the_weights_non_finite():
    hazards, non_finite = fit("16-true", lambda params: torch.optim.AdamW(params, lr=1e-4))
    assert len(hazards) == 1
    assert "AdamW(eps=1e-08) on float16 parameters: eps is 0 in float16" in str(hazards[0].message)
    assert non_finite > 0  # what the warning says happens, happened


@pytest.mark.parametrize("precision, optimizer", [
    ("16-true", lambda params: torch.optim.AdamW(params, lr=1e-4, eps=1e-4)),
    ("16-true", lambda params: torch.optim.AdamW(params, lr=1e-4, fused=True)),
    ("16-true", lambda params: torch.optim.SGD(params, lr=1e-2, momentum=0.9)),
    ("bf16-true", lambda params: torch.optim.AdamW(params, lr=1e-4)),
    ("bf16-mixed", lambda params: torch.optim.AdamW(params, lr=1e-4)),
], ids=["eps-1e-4", "fused", "sgd", "bf16-true", "bf16-mixed"])
def test_settings_that_train_get_no_warning_and_keep_finite_weights(precision, optimizer):
    hazards, non_finite = fit(precision, optimizer)
    assert hazards == []
    assert non_finite == 0


def test_rounding_to_zero_follows_the_smallest_subnormal():
    assert rounds_to_zero(1e-8, torch.float16)  # the smallest float16 above 0 is 2**-24, about 6e-8
    assert not rounds_to_zero(6e-8, torch.float16)
    assert not rounds_to_zero(1e-8, torch.bfloat16)
    assert not rounds_to_zero(1e-8, torch.float32)


def test_each_adam_style_optimizer_is_checked_and_sgd_has_nothing_to_check():
    params = [nn.Parameter(torch.zeros(4, dtype=torch.float16))]
    for cls in (torch.optim.Adam, torch.optim.AdamW, torch.optim.NAdam, torch.optim.RAdam, torch.optim.RMSprop,
                torch.optim.Adagrad, torch.optim.Adamax):
        note = eps_underflow(cls(params, eps=1e-8))
        assert note is not None and note.startswith(f"{cls.__name__}(eps=1e-08)")
    assert eps_underflow(torch.optim.SGD(params, lr=0.1)) is None


def test_the_step_prediction_says_so():
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4))
    batch = (torch.randn(8, 32), torch.randint(0, 4, (8,)))

    def step(m, b):
        return F.cross_entropy(m(b[0]).float(), b[1])

    half = predict_step(model, batch, step, lambda p: torch.optim.Adam(p), "16-true", "h100-sxm")
    assert any("Adam(eps=1e-08) on float16 parameters" in w for w in half.warnings)
    assert "Adam(eps=1e-08)" in str(half)
    bf16 = predict_step(model, batch, step, lambda p: torch.optim.Adam(p), "bf16-true", "h100-sxm")
    assert not any("eps" in w for w in bf16.warnings)


def test_a_hand_written_float16_loop_is_warned_once():
    import ptp_callback as ptp

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4)).half()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    loader = DataLoader(TensorDataset(torch.randn(32, 32).half(), torch.randint(0, 4, (32,))), batch_size=8)

    def step(m, b):
        return F.cross_entropy(m(b[0]).float(), b[1])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracker = ptp.track(model, optimizer, loader, step, epochs=1, precision="16-true", advise=False, bar=False,
                            verbose=False)
        for batch in tracker.iterate(loader):
            step(model, batch).backward()
            optimizer.step()
            optimizer.zero_grad()
        tracker.close()
    hazards = [w for w in caught if issubclass(w.category, PrecisionHazard)]
    assert len(hazards) == 1 and "Adam(eps=1e-08) on float16 parameters" in str(hazards[0].message)
    assert not all(bool(torch.isfinite(p).all()) for p in model.parameters())
