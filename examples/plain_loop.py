"""A plain PyTorch training loop with the whole run's ETA (CPU, under a minute).

    python examples/plain_loop.py

``ptp.track`` predicts the run before its first step; ``tracker.iterate`` times every batch and
epoch, ``tracker.phase`` the evaluations and saves. The bar shows ``eta=MM:SS 32-true`` for the whole
run (evaluations and saves included); at the end each part's prediction is printed beside what it
took.
"""

from __future__ import annotations

import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import ptp_callback as ptp
from ptp_callback.tracker import RunTracker


def step_fn(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def main(epochs: int = 3, *, device: str | None = None, advise: bool | str = True, bar: bool = True,
         checkpoint_dir: str | None = None, samples: int = 4096) -> RunTracker:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train = DataLoader(TensorDataset(torch.randn(samples, 256), torch.randint(0, 10, (samples,))), batch_size=64,
                       shuffle=True)
    val = DataLoader(TensorDataset(torch.randn(1024, 256), torch.randint(0, 10, (1024,))), batch_size=128)
    checkpoint_dir = checkpoint_dir or tempfile.mkdtemp(prefix="plain_loop_")

    # device=None predicts for this machine; device="h100" would predict the same run on an H100.
    # advise=True: a run this short would otherwise skip the precision advice (it costs over 1% of it).
    tracker = ptp.track(model, optimizer, train, step_fn, epochs=epochs, eval_loader=val, save_every="epoch",
                        checkpoint_dir=checkpoint_dir, device=device, advise=advise, bar=bar)
    with tracker:
        for epoch in range(epochs):
            model.train()
            for batch in tracker.iterate(train):
                loss = step_fn(model, batch)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            with tracker.phase("eval"):
                model.eval()
                with torch.no_grad():
                    val_loss = sum(step_fn(model, b).item() for b in val) / len(val)
            with tracker.phase("save"):
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                           os.path.join(checkpoint_dir, "last.pt"))
    print(f"val_loss {val_loss:.3f}")
    return tracker


if __name__ == "__main__":
    main()
