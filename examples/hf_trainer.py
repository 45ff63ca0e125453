"""The Hugging Face ``Trainer`` with the whole run's ETA (CPU, under a minute, no downloads).

    pip install -e ".[hf]" && python examples/hf_trainer.py

A small GPT-2 built from a config (random weights) trains on random tokens with evaluations every
8 steps and saves every 16. ``PrecisionTimeTrainerCallback`` prints the run predicted before step
one, adds ``eta=MM:SS 32-true`` to the Trainer's progress bar and ``'eta'`` to its logs, and at the
end prints each part's prediction beside what it took (``advise=True``: and warns when another
precision is predicted to be faster).
"""

from __future__ import annotations

import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from ptp_callback.integrations.transformers import PrecisionTimeTrainerCallback


class RandomTokens(torch.utils.data.Dataset):
    """Token sequences for a causal language model (labels are the inputs)."""

    def __init__(self, n: int, length: int, vocab: int, seed: int) -> None:
        self.ids = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main(output_dir: str | None = None, *, samples: int = 512, epochs: float = 2, device: str | None = None,
         advise: bool | str = True, callbacks: list | None = None, resume: str | None = None,
         **arguments) -> tuple[Trainer, PrecisionTimeTrainerCallback]:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=64)
    model = GPT2LMHeadModel(config)
    settings = dict(output_dir=output_dir or tempfile.mkdtemp(prefix="hf_trainer_"), num_train_epochs=epochs,
                    per_device_train_batch_size=16, per_device_eval_batch_size=32, gradient_accumulation_steps=2,
                    eval_strategy="steps", eval_steps=8, save_strategy="steps", save_steps=16, logging_steps=4,
                    learning_rate=1e-3, use_cpu=not torch.cuda.is_available(), report_to="none")
    settings.update(arguments)
    callback = PrecisionTimeTrainerCallback(device=device, advise=advise)
    trainer = Trainer(model=model, args=TrainingArguments(**settings),
                      train_dataset=RandomTokens(samples, 32, config.vocab_size, seed=0),
                      eval_dataset=RandomTokens(64, 32, config.vocab_size, seed=1), callbacks=[callback])
    for extra in callbacks or []:
        trainer.add_callback(extra)  # after the progress bar: sees what it shows
    trainer.train(resume_from_checkpoint=resume)
    # a resume with restore_callback_states_from_checkpoint=True replaces the callback by a restored copy
    callback = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, PrecisionTimeTrainerCallback))
    return trainer, callback


if __name__ == "__main__":
    main()
