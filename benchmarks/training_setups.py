"""Training setups the dev workloads do not have, predicted and measured.

usage: python benchmarks/training_setups.py [--data FILE] [--only NAME,...]
       python benchmarks/training_setups.py --device cuda --out FILE    (measure on this GPU)

Each setup is traced the way users write it: gradient checkpointing (Hugging Face's, both
forms), gradient clipping, ``nn.TransformerEncoder`` and torchvision's ViT (attention inside
``nn.MultiheadAttention``), a decoder with an attention mask of ones or with padding and
``use_cache=False``, a spectral-normed GAN discriminator, and two mixture-of-experts decoders
(8 experts of top-2 routing, 64 of top-8; not measured yet). The default run predicts every
setup for ``h100-sxm`` (traced here, on the CPU proxy) and prints the error against the steps
recorded in ``benchmarks/data/setups.jsonl`` (NVIDIA H100 80GB HBM3, torch 2.11, transformers
5.17; two runs on two machines for most setups, which shows how much the truth itself moves).
``--device cuda`` times the real steps on a local GPU (5 warm-up steps, median of 20) and
appends them to ``--out``. None of these setups was used to fit a coefficient.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "setups.jsonl")
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed")

# A setup builds (model, batch(device) -> batch, loss(model, batch) -> loss)
Setup = Callable[[], tuple[nn.Module, Callable[[Any], Any], Callable[[nn.Module, Any], torch.Tensor]]]


def encoder() -> Any:
    layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.1, batch_first=True)
    net = nn.Sequential()
    net.enc = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
    net.head = nn.Linear(512, 1000)
    return (net, lambda d: (torch.randn(32, 256, 512, device=d), torch.randint(0, 1000, (32, 256), device=d)),
            lambda m, b: F.cross_entropy(m.head(m.enc(b[0])).flatten(0, 1), b[1].flatten()))


def vit() -> Any:
    import torchvision

    return (torchvision.models.vit_b_16(),
            lambda d: (torch.randn(32, 3, 224, 224, device=d), torch.randint(0, 1000, (32,), device=d)),
            lambda m, b: F.cross_entropy(m(b[0]), b[1]))


def gpt2(checkpointing: str | None = None, mask: str | None = None) -> Setup:
    def build() -> Any:
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024))
        if checkpointing is not None:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": checkpointing == "reentrant"})

        def batch(device: Any) -> Any:
            ids = torch.randint(0, 50257, (8, 1024), device=device)
            if mask is None:
                return (ids,)
            attention_mask = torch.ones_like(ids)
            if mask == "padded":
                attention_mask[:2, -256:] = 0
            return (ids, attention_mask)

        def loss(m: nn.Module, b: Any) -> torch.Tensor:
            if len(b) == 1:
                return m(input_ids=b[0], labels=b[0]).loss
            return m(input_ids=b[0], attention_mask=b[1], labels=b[0], use_cache=False).loss

        return model, batch, loss
    return build


def spectral_norm_discriminator() -> Any:
    sn = nn.utils.spectral_norm
    net = nn.Sequential(sn(nn.Conv2d(3, 64, 4, 2, 1)), nn.LeakyReLU(0.2), sn(nn.Conv2d(64, 128, 4, 2, 1)),
                        nn.LeakyReLU(0.2), sn(nn.Conv2d(128, 256, 4, 2, 1)), nn.LeakyReLU(0.2),
                        sn(nn.Conv2d(256, 512, 4, 2, 1)), nn.LeakyReLU(0.2), nn.Flatten(), sn(nn.Linear(512 * 4 * 4, 1)))
    return net, lambda d: (torch.randn(256, 3, 64, 64, device=d),), lambda m, b: F.softplus(-m(b[0])).mean()


def mixture_of_experts(experts: int, top_k: int, expert_hidden: int) -> Setup:
    """A Mixtral-style decoder (transformers' experts: grouped GEMMs of the routed tokens)."""
    def build() -> Any:
        from transformers import MixtralConfig, MixtralForCausalLM

        config = MixtralConfig(num_hidden_layers=8, hidden_size=1024, intermediate_size=expert_hidden,
                               num_attention_heads=16, num_key_value_heads=4, num_local_experts=experts,
                               num_experts_per_tok=top_k, vocab_size=32000, max_position_embeddings=1024)
        model = MixtralForCausalLM(config)

        def batch(device: Any) -> Any:
            return (torch.randint(0, 32000, (8, 1024), device=device),)

        def loss(m: nn.Module, b: Any) -> torch.Tensor:
            return m(input_ids=b[0], labels=b[0]).loss
        return model, batch, loss
    return build


# name, builder, gradient clipping limit (clip_grad_norm_)
SETUPS: list[tuple[str, Setup, float | None]] = [
    ("transformer_encoder_4x512_b32_s256", encoder, None),
    ("vit_b16_b32", vit, None),
    ("gpt2_small_b8_s1024", gpt2(), None),
    ("gpt2_small_b8_s1024_ckpt", gpt2("non-reentrant"), None),
    ("gpt2_small_b8_s1024_ckpt_reentrant", gpt2("reentrant"), None),
    ("gpt2_small_b8_s1024_clip1", gpt2(), 1.0),
    ("gpt2_small_b8_s1024_mask1_nocache", gpt2(mask="ones"), None),
    ("gpt2_small_b8_s1024_padded_nocache", gpt2(mask="padded"), None),
    ("sn_disc_b256_64px", spectral_norm_discriminator, None),
    ("sn_disc_b256_64px_clip1", spectral_norm_discriminator, 1.0),
    ("moe_8x2816_top2_b8_s1024", mixture_of_experts(8, 2, 2816), None),
    ("moe_64x256_top8_b8_s1024", mixture_of_experts(64, 8, 256), None),
]


def predict(build: Setup, clip: float | None, precision: str) -> tuple[float, float]:
    """The predicted H100 step and the trace's seconds here."""
    import ptp_callback as ptp

    torch.manual_seed(0)
    with torch.device("meta"):  # the trace reads no weight: none is made
        model, batch, loss = build()
    optimizer: Any = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if clip:
        optimizer = ptp.ClippedGradients(optimizer, clip)
    started = time.perf_counter()
    prediction = ptp.predict_step(model, batch("cpu"), loss, optimizer, precision=precision, device="h100-sxm",
                                  trace_on="cpu")
    return prediction.step_s, time.perf_counter() - started


def measure(build: Setup, clip: float | None, precision: str, device: torch.device) -> float:
    """The median of 20 real steps after 5, as Lightning runs them (GradScaler under 16-mixed)."""
    torch.manual_seed(0)
    model, batch, loss_fn = build()
    model = model.to(device).train()
    data = batch(device)
    amp = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}.get(precision)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(device.type) if precision == "16-mixed" else None

    def step() -> None:
        with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
            loss = loss_fn(model, data)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(optimizer)
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(5):
        step()
    sync()
    times = []
    for _ in range(20):
        started = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=DATA, help="recorded steps (JSON lines: setup, precision, measured_s, run)")
    parser.add_argument("--only", default="", help="comma-separated setup names")
    parser.add_argument("--device", default="", help="'cuda': time the real steps here instead of predicting")
    parser.add_argument("--out", default="", help="with --device: the JSON-lines file to append to")
    parser.add_argument("--run", default=time.strftime("%Y-%m-%d"), help="with --device: the run's label")
    args = parser.parse_args()
    chosen = [s for s in SETUPS if not args.only or s[0] in args.only.split(",")]
    if args.device:
        device = torch.device(args.device)
        with open(args.out, "a") as out:
            for name, build, clip in chosen:
                for precision in PRECISIONS:
                    step_s = measure(build, clip, precision, device)
                    out.write(json.dumps({"setup": name, "precision": precision, "measured_s": step_s,
                                          "run": args.run, "device": torch.cuda.get_device_name(device)
                                          if device.type == "cuda" else "cpu"}) + "\n")
                    print(f"{name:36s} {precision:10s} {step_s * 1e3:9.2f} ms", flush=True)
        return

    measured: dict[tuple[str, str], dict[str, float]] = {}
    with open(args.data) as f:
        for line in f:
            row = json.loads(line)
            measured.setdefault((row["setup"], row["precision"]), {})[row["run"]] = row["measured_s"]
    runs = sorted({run for by_run in measured.values() for run in by_run})
    errors: dict[str, list[float]] = {run: [] for run in runs}
    print(f"{'setup':36s} {'precision':10s} {'predicted':>10s} " + " ".join(f"{run:>22s}" for run in runs)
          + "   trace")
    for name, build, clip in chosen:
        for precision in PRECISIONS:
            by_run = measured.get((name, precision), {})
            step_s, trace_s = predict(build, clip, precision)
            cells = []
            for run in runs:
                if run in by_run:
                    error = 100.0 * (step_s / by_run[run] - 1.0)
                    errors[run].append(abs(error))
                    cells.append(f"{by_run[run] * 1e3:9.2f} ms {error:+6.1f}%")
                else:
                    cells.append(f"{'not measured' if not by_run else '':>20s}")
            print(f"{name:36s} {precision:10s} {step_s * 1e3:7.2f} ms " + " ".join(f"{c:>22s}" for c in cells)
                  + f"  {trace_s:5.2f}s", flush=True)
    for run in runs:
        if errors[run]:
            print(f"run {run}: {len(errors[run])} steps, MAPE {statistics.mean(errors[run]):.1f}%, "
                  f"median {statistics.median(errors[run]):.1f}%, worst {max(errors[run]):.1f}%")


if __name__ == "__main__":
    main()
