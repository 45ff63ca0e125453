"""Quickstart: a Lightning fit on CPU with the whole fit's ETA in its progress bar.

    python examples/lightning_quickstart.py

Before step one the callback prints its prediction of the whole fit (train, validation), the bar
shows ``eta H:MM:SS 32-true`` for the whole fit (not Lightning's per-epoch estimate), and at the end
it prints the prediction made before step one and the calibrated one against the actual time,
and whether another precision is predicted to be faster on this machine.
"""

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from ptp_callback import PrecisionTimeCallback


class Classifier(L.LightningModule):
    def __init__(self, width: int = 1024) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
                                 nn.Linear(width, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> None:
    torch.manual_seed(0)
    train = TensorDataset(torch.randn(25_600, 784), torch.randint(0, 10, (25_600,)))
    val = TensorDataset(torch.randn(2_560, 784), torch.randint(0, 10, (2_560,)))
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=3,
        val_check_interval=0.5,
        # advise=True: a fit this short would otherwise skip the advice (it costs over 1% of it)
        callbacks=[PrecisionTimeCallback(advise=True)],
        logger=False,
        enable_checkpointing=False,
    )
    trainer.fit(Classifier(), DataLoader(train, batch_size=128, shuffle=True), DataLoader(val, batch_size=256))


if __name__ == "__main__":
    main()
