"""Training steps on this CPU against their prediction for it: how the probe-based CPU model does
on models of several kinds (among them the models of ``lightning_eta.py``'s fits), and how fast
their GEMMs run inside a step against the probe's rate.

usage: python benchmarks/cpu_steps.py [--only a,b] [--steps N] [--precision P]

Each model runs in a fresh process with glibc's allocator in the state CPU predictions assume
(``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` set: see the README's limits): its
step (forward, loss, backward, AdamW, ``zero_grad``) predicted for ``device="cpu"``, then
timed over ``--steps`` steps after as many warm-up steps (the median). A profiled run of a few
more steps gives the GEMMs' own time (``aten::mm``, ``addmm``, ``bmm`` self time, with the
profiler's overhead in it) beside what the cost model gives them. The probe is this machine's
cached one. A shared machine is noisy: compare runs made within minutes of each other.

``--precision`` (default ``32-true``): ``bf16-mixed`` runs the forward and loss under CPU autocast,
``bf16-true`` casts the model and its float inputs to bf16.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

MODELS = ("mlp", "mlp_wide", "cnn", "resnet18_64px", "gpt_tiny", "gpt_4l", "lstm")

_CHILD = r"""
import json, statistics, sys, time, warnings
sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r})
warnings.simplefilter("ignore")
import torch, torch.nn as nn, torch.nn.functional as F
import ptp_callback as ptp
from lightning_eta import CNN, LSTMLM, MLP, TinyGPT  # the models of the CPU Lightning fits
torch.manual_seed(0)
name = {name!r}

def classify(model, batch):
    return F.cross_entropy(model(batch[0]), batch[1])

def lm(model, batch):
    return model(input_ids=batch[0], labels=batch[0]).loss

if name == "mlp":
    model, batch, loss_fn = MLP().net, (torch.randn(128, 784), torch.randint(0, 10, (128,))), classify
elif name == "mlp_wide":
    model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    batch, loss_fn = (torch.randn(512, 2048), torch.randint(0, 10, (512,))), classify
elif name == "cnn":
    model, batch, loss_fn = CNN().net, (torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))), classify
elif name == "resnet18_64px":
    import torchvision
    model = torchvision.models.resnet18(num_classes=100)
    batch, loss_fn = (torch.randn(32, 3, 64, 64), torch.randint(0, 100, (32,))), classify
elif name == "gpt_tiny":
    model, batch, loss_fn = TinyGPT().model, (torch.randint(0, 1000, (16, 64)),), lm
elif name == "gpt_4l":
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=256, vocab_size=5000))
    batch, loss_fn = (torch.randint(0, 5000, (8, 256)),), lm
else:
    model, batch = LSTMLM(), (torch.randint(0, 1000, (32, 65)),)
    loss_fn = lambda m, b: m._loss(b)

precision = {precision!r}
half = torch.bfloat16
if precision == "bf16-true":
    model = model.to(half)
    batch = tuple(t.to(half) if t.is_floating_point() else t for t in batch)
autocast = precision.endswith("-mixed")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
prediction = ptp.predict_step(model, batch, loss_fn, optimizer, precision=precision, device="cpu")
gemm_ops = ("mm", "addmm", "bmm")
predicted_gemm = sum(s for op, s in zip(prediction.ops, prediction.kernel_s)
                     if op.name.split(".")[1] in gemm_ops)

def step():
    with torch.autocast("cpu", dtype=half, enabled=autocast):
        loss = loss_fn(model, batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

for _ in range({steps}):
    step()
times = []
for _ in range({steps}):
    started = time.perf_counter()
    step()
    times.append(time.perf_counter() - started)
from torch.profiler import ProfilerActivity, profile
profiled = 4
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(profiled):
        step()
measured_gemm = sum(e.self_cpu_time_total for e in prof.key_averages()
                    if e.key in tuple("aten::" + g for g in gemm_ops)) / profiled / 1e6
print(json.dumps({{"predicted": prediction.step_s, "measured": statistics.median(times),
                  "predicted_gemm": predicted_gemm, "measured_gemm": measured_gemm}}))
"""


def run(name: str, steps: int, precision: str = "32-true") -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="67108864")
    code = _CHILD.format(root=os.path.dirname(HERE), here=HERE, name=name, steps=steps, precision=precision)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--precision", default="32-true", choices=("32-true", "bf16-mixed", "bf16-true"))
    args = parser.parse_args()
    names = [n for n in MODELS if not args.only or n in args.only.split(",")]
    import torch

    print(f"CPU training steps at {args.precision} against their prediction, {time.strftime('%Y-%m-%d')}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'model':16s} {'predicted':>10s} {'measured':>10s} {'error':>7s}   GEMMs: {'predicted':>10s} "
          f"{'profiled':>10s} {'ratio':>6s}")
    errors = []
    for name in names:
        r = run(name, args.steps, args.precision)
        error = r["predicted"] / r["measured"] - 1.0
        errors.append(error)
        ratio = r["measured_gemm"] / r["predicted_gemm"] if r["predicted_gemm"] else float("nan")
        print(f"{name:16s} {r['predicted'] * 1e3:8.2f} ms {r['measured'] * 1e3:8.2f} ms {100 * error:+6.1f}%   "
              f"       {r['predicted_gemm'] * 1e3:8.2f} ms {r['measured_gemm'] * 1e3:8.2f} ms {ratio:6.2f}")
    print(f"MAPE {100 * statistics.mean(abs(e) for e in errors):.1f}%, median error "
          f"{100 * statistics.median(errors):+.1f}% over {len(errors)} models")


if __name__ == "__main__":
    main()
