"""A 2-process CPU DDP fit with PrecisionTimeCallback (run by tests/test_lightning.py).

``python ddp_fit.py [ddp|ddp_spawn] [DEVICE]``: Lightning's ``strategy="ddp"`` re-launches this script for
rank 1; ``"ddp_spawn"`` pickles the trainer, its callbacks included, into two new processes. Both
ranks join a real gloo process group. Rank zero prints the callback's lines; each rank reports when
it is done. The callback predicts for ``DEVICE`` (default: the CPU it runs on).
"""

import sys

import lightning as L
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from ptp_callback import PrecisionTimeCallback


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class Done(L.Callback):
    def on_fit_end(self, trainer, pl_module):
        done = torch.ones(1)
        dist.all_reduce(done)  # every rank reaches the end: the callback hung no one
        if trainer.is_global_zero:
            print(f"world_size={trainer.world_size} ranks_done={int(done.item())}", flush=True)

    def teardown(self, trainer, pl_module, stage):
        # Lightning's last hook on every rank. Lightning leaves the gloo group up; torn down at
        # interpreter exit instead, its threads aborted a rank once in about ten runs ("terminate
        # called without an active exception"), and ddp_spawn's ranks exit without returning here.
        if dist.is_initialized():
            dist.destroy_process_group()


def main(strategy: str, device: str | None) -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=2, callbacks=[PrecisionTimeCallback(device=device), Done()])
    trainer.fit(Tiny(), DataLoader(data, batch_size=16), DataLoader(data, batch_size=16))
    if dist.is_initialized():  # Done.teardown destroyed it unless the fit failed
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ddp", sys.argv[2] if len(sys.argv) > 2 else None)
