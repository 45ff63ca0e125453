"""An Accelerate training loop with the whole run's ETA (CPU, under a minute; GPUs when present).

    python examples/accelerate_loop.py                                # mixed_precision="no", accumulate 2
    python examples/accelerate_loop.py --mixed-precision bf16
    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 examples/accelerate_loop.py  # two CPU processes (gloo)
    python examples/accelerate_loop.py --stop-after 20 --state-dir ckpt    # save_state after 20 steps, stop
    python examples/accelerate_loop.py --resume ckpt                        # load_state, go on to the end

``ptp.track(..., accelerator=accelerator)`` reads the accelerator's precision, gradient
accumulation and processes, shows the bar on the local main process only, and registers for
``save_state`` / ``load_state``, so a resumed run starts from the calibration and position it saved.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

import ptp_callback as ptp
from ptp_callback.tracker import RunTracker


def step_fn(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


class Progress:
    """Optimizer steps and batches done: saved with the run, so a resumed loop knows where it was."""

    def __init__(self) -> None:
        self.batches = 0

    def state_dict(self) -> dict:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict) -> None:
        self.batches = int(state["batches"])


MAX_GRAD_NORM = 1.0


def main(mixed_precision: str = "no", accumulate: int = 2, epochs: int = 2, *, device: str | None = None,
         advise: bool | str = "auto", bar: bool = True, stop_after: int | None = None, state_dir: str | None = None,
         resume: str | None = None, samples: int = 4096) -> RunTracker:
    accelerator = Accelerator(mixed_precision=mixed_precision, gradient_accumulation_steps=accumulate)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train = DataLoader(TensorDataset(torch.randn(samples, 256), torch.randint(0, 10, (samples,))), batch_size=32,
                       shuffle=True)
    val = DataLoader(TensorDataset(torch.randn(512, 256), torch.randint(0, 10, (512,))), batch_size=128)
    model, optimizer, train, val = accelerator.prepare(model, optimizer, train, val)

    # The loop clips its gradients before each step: traced with the step, so that its cost is predicted.
    tracker = ptp.track(model, ptp.ClippedGradients(optimizer, MAX_GRAD_NORM), train, step_fn, epochs=epochs,
                        accelerator=accelerator, eval_loader=val,
                        save_every=stop_after, device=device, advise=advise, bar=bar)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    if resume:
        accelerator.load_state(resume)  # restores the model, the optimizer, the progress and the tracker
    first_epoch, skip = divmod(progress.batches, len(train))

    for epoch in range(first_epoch, epochs):
        model.train()
        batches = accelerator.skip_first_batches(train, skip) if epoch == first_epoch and skip else train
        for batch in tracker.iterate(batches):
            with accelerator.accumulate(model):
                loss = step_fn(model, batch)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
                optimizer.step()
                optimizer.zero_grad()
            progress.batches += 1
            if accelerator.sync_gradients and stop_after and progress.batches == stop_after * accumulate:
                accelerator.save_state(state_dir)  # timed as a checkpoint save
                tracker.close()
                return tracker
        with tracker.phase("eval"):
            model.eval()
            with torch.no_grad():
                losses = accelerator.gather_for_metrics(torch.stack([step_fn(model, b) for b in val]))
        accelerator.print(f"epoch {epoch}: val_loss {losses.mean().item():.3f}")
    tracker.close()
    # Every process reaches the end before end_training takes the process group down. CPU processes
    # meet at a plain barrier: wait_for_everyone() names a GPU per process, which a gloo group on a
    # machine with fewer GPUs than processes cannot use (Accelerate 1.15, PyTorch 2.11).
    if accelerator.device.type == "cpu" and torch.distributed.is_initialized():
        torch.distributed.barrier()
    else:
        accelerator.wait_for_everyone()
    accelerator.end_training()
    return tracker


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixed-precision", default="no", choices=["no", "fp16", "bf16"])
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--device", help="predict for this GPU (h100, a100 ...) instead of this machine")
    parser.add_argument("--stop-after", type=int, help="save_state after this many optimizer steps and stop")
    parser.add_argument("--state-dir", default="accelerate_state")
    parser.add_argument("--resume", help="load_state from this directory first")
    parser.add_argument("--samples", type=int, default=4096)
    args = parser.parse_args()
    main(args.mixed_precision, args.accumulate, args.epochs, device=args.device, stop_after=args.stop_after,
         state_dir=args.state_dir, resume=args.resume, samples=args.samples)
