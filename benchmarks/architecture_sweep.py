"""Trace and predict architectures outside the dev workloads: does every one trace, how long does
it take, and are its convolutions and GEMMs shaped as the kernels that will run them?

usage: python benchmarks/architecture_sweep.py [--only a,b] [--precisions 32-true,bf16-mixed]
       python benchmarks/architecture_sweep.py --time OUT.jsonl [--profile P.jsonl] [--only a,b] [--precisions ...]
       python benchmarks/architecture_sweep.py --score [FILE ...] [--trace-on cpu|auto]        (no GPU)

Each model is built from its constructor or config with random weights (no download) and a
batch of a typical training size, traced on this machine's CPU for ``h100-sxm`` and predicted.
Printed per model and precision: the predicted step, whether host or device bound, the trace
and predict seconds, the recorded ops, whether some have no rule in the cost model (a warning), and the largest
*GEMM cover* of its convolutions: the multiply-adds of the implicit GEMMs a convolution op is
priced as, over the op's own (``torch.utils.flop_counter``). Where it is above 1, the kernels do
more than the convolution's own multiply-adds, or the op is priced at a rate fitted with that
excess in it: whole 128-byte channel chunks per filter tap (an RGB input's 3 channels run as 4
in fp32, 8 in half precision; a 1-channel audio input 4 or 8 times its work), and a strided 1x1
convolution's data gradient over every input pixel (2.5-4x; its efficiency was fitted on H100
rows of such convolutions). A shape read the wrong way shows as a larger multiple: until
2026-11-27 a ``ConvTranspose2d`` counted 8x its multiply-adds, taken as a forward convolution of
its own shapes, and a generator's first layer (a 4x4 filter over a 1x1 latent) 20x.

``--time`` times each model's real AdamW step on this machine's GPU as ``data/steps.jsonl`` was
timed (``profile_steps.build_step``: median of 10 after 5 warm-up steps) and appends one JSON line
per model and precision, with this host's dispatch speed probed just before the step
(``ptp_callback.probe.host_op_seconds``: seconds per tiny op on the GPU and on the CPU) and once per
run as ``data/micro.json``'s reference host was (``host_launch_us_as_micro``). ``--score`` predicts every recorded line for the GPU it was timed on
(traced on this CPU, with the engine as it is now) and prints each error, the MAPE, and how far each
precision's predicted speed-up over 32-true is from the measured one. None of these models was
used to fit a coefficient, so the score is a held-out figure. Where a step was recorded with a
host probe, it is also predicted with every host cost scaled by the probe (this host's time per
tiny op over the reference host's), and the two are compared: whether probing a GPU machine's host
before step one would make its predictions better. On the third H200 machine (2026-11-27, 60
steps) it made them worse: 15.3% MAPE with the reference host's costs, 18.0% scaled (scored 2026-11-29). The probe
read 6-12 us per op within one run, and fp32 steps ran faster than the reference host's costs
say while autocast steps did not; so the callback does not probe it, and its calibration from the
first measured steps corrects the host instead. ``--trace-on auto`` traces as the callback does:
on this machine's GPU when it has one (fake CUDA tensors), else on the CPU proxy; on an H200
machine (2026-11-29) that scored 16.9% MAPE over the 215 steps, the CPU proxy 17.0% (wav2vec 2.0,
whose SpecAugment reads values fake CUDA tensors do not keep, fell back to the proxy).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
import warnings
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence  # noqa: E402

import ptp_callback as ptp  # noqa: E402
from ptp_callback.predict import simulate  # noqa: E402
from ptp_callback.probe import host_op_seconds, host_speed  # noqa: E402
from ptp_callback.step import resolve_device  # noqa: E402
from ptp_callback.tracer import trace_step  # noqa: E402

Built = tuple[nn.Module, tuple, Callable[[nn.Module, tuple], torch.Tensor]]


def _classify(model: nn.Module, batch: tuple) -> torch.Tensor:
    out = model(batch[0])
    return F.cross_entropy(out["out"] if isinstance(out, dict) else out, batch[1])


def _regress(model: nn.Module, batch: tuple) -> torch.Tensor:
    return F.mse_loss(model(batch[0]), batch[1])


def _vision(name: str, batch: int = 32, side: int = 224, **kwargs: Any) -> Callable[[], Built]:
    def build() -> Built:
        import torchvision

        model = getattr(torchvision.models, name)(**kwargs)
        return model, (torch.randn(batch, 3, side, side), torch.randint(0, 1000, (batch,))), _classify
    return build


def _segmentation(name: str) -> Callable[[], Built]:
    def build() -> Built:
        import torchvision

        model = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None, num_classes=21)
        return model, (torch.randn(8, 3, 256, 256), torch.randint(0, 21, (8, 256, 256))), _classify
    return build


def _language(config: str, model: str, seq: int = 512, **kwargs: Any) -> Callable[[], Built]:
    def build() -> Built:
        import transformers

        cfg = getattr(transformers, config)(**kwargs)
        ids = torch.randint(0, cfg.vocab_size, (8, seq))
        return (getattr(transformers, model)(cfg), (ids,),
                lambda m, b: m(input_ids=b[0], labels=b[0]).loss)
    return build


def _t5() -> Built:
    import transformers

    cfg = transformers.T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, decoder_start_token_id=0,
                                pad_token_id=0)
    batch = (torch.randint(0, cfg.vocab_size, (8, 512)), torch.randint(0, cfg.vocab_size, (8, 128)))
    return transformers.T5ForConditionalGeneration(cfg), batch, lambda m, b: m(input_ids=b[0], labels=b[1]).loss


def _whisper() -> Built:
    import transformers

    cfg = transformers.WhisperConfig(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                                     decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536,
                                     decoder_start_token_id=50257, pad_token_id=50256)
    batch = (torch.randn(4, 80, 3000), torch.randint(0, 50000, (4, 64)))
    return (transformers.WhisperForConditionalGeneration(cfg), batch,
            lambda m, b: m(input_features=b[0], labels=b[1]).loss)


def _wav2vec2() -> Built:
    import transformers

    cfg = transformers.Wav2Vec2Config(hidden_size=384, num_hidden_layers=4, num_attention_heads=6,
                                      intermediate_size=1536)
    return (transformers.Wav2Vec2Model(cfg), (torch.randn(4, 32000),),
            lambda m, b: m(b[0]).last_hidden_state.pow(2).mean())


class _UNet(nn.Module):
    """A diffusion-style U-Net level: GroupNorm, SiLU, a strided convolution down, a transposed one up."""

    def __init__(self, width: int = 128) -> None:
        super().__init__()
        self.stem = nn.Conv2d(4, width, 3, padding=1)
        self.block = nn.Sequential(nn.GroupNorm(32, width), nn.SiLU(), nn.Conv2d(width, width, 3, padding=1))
        self.down = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.mid = nn.Sequential(nn.GroupNorm(32, 2 * width), nn.SiLU(), nn.Conv2d(2 * width, 2 * width, 3, padding=1))
        self.up = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.head = nn.Conv2d(2 * width, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.stem(x)
        skip = skip + self.block(skip)
        return self.head(torch.cat([self.up(self.mid(self.down(skip))), skip], 1))


def _unet() -> Built:
    return _UNet(), (torch.randn(16, 4, 64, 64), torch.randn(16, 4, 64, 64)), _regress


def _dcgan_generator() -> Built:
    layers: list[nn.Module] = [nn.ConvTranspose2d(100, 512, 4, 1, 0, bias=False)]
    for c_in, c_out in ((512, 256), (256, 128), (128, 64)):
        layers += [nn.BatchNorm2d(c_in), nn.ReLU(), nn.ConvTranspose2d(c_in, c_out, 4, 2, 1, bias=False)]
    layers += [nn.BatchNorm2d(64), nn.ReLU(), nn.ConvTranspose2d(64, 3, 4, 2, 1, bias=False), nn.Tanh()]
    return nn.Sequential(*layers), (torch.randn(128, 100, 1, 1), torch.randn(128, 3, 64, 64)), _regress


def _audio_conv1d() -> Built:
    model = nn.Sequential(nn.Conv1d(80, 256, 3, padding=1), nn.GELU(), nn.Conv1d(256, 256, 3, stride=2, padding=1),
                          nn.GELU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(256, 10))
    return model, (torch.randn(32, 80, 3000), torch.randint(0, 10, (32,))), _classify


def _video_conv3d() -> Built:
    model = nn.Sequential(nn.Conv3d(3, 32, 3, padding=1), nn.BatchNorm3d(32), nn.ReLU(),
                          nn.Conv3d(32, 64, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
                          nn.Linear(64, 10))
    return model, (torch.randn(8, 3, 16, 112, 112), torch.randint(0, 10, (8,))), _classify


class _LstmLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.rnn, self.head = nn.Embedding(10000, 512), nn.LSTM(512, 512, 2, batch_first=True), nn.Linear(512, 10000)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(ids))[0])


def _lstm() -> Built:
    ids = torch.randint(0, 10000, (32, 257))
    return _LstmLM(), (ids[:, :-1], ids[:, 1:]), lambda m, b: F.cross_entropy(m(b[0]).flatten(0, 1), b[1].flatten())


class _PackedTagger(nn.Module):
    """A tagger over sequences of different lengths: packed, so the LSTM skips the padding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(10000, 256), nn.Linear(1024, 32)
        self.rnn = nn.LSTM(256, 512, 2, batch_first=True, bidirectional=True)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(self.embed(ids), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = pad_packed_sequence(self.rnn(packed)[0], batch_first=True, total_length=ids.shape[1])
        return self.head(out)


def _packed_tagger() -> Built:
    lengths = torch.randint(32, 257, (32,), generator=torch.Generator().manual_seed(0))
    tags = torch.randint(0, 32, (32, 256))
    tags[torch.arange(256) >= lengths[:, None]] = -100  # no loss on the padding
    return (_PackedTagger(), (torch.randint(0, 10000, (32, 256)), lengths, tags),
            lambda m, b: F.cross_entropy(m(b[0], b[1]).flatten(0, 1), b[2].flatten(), ignore_index=-100))


class _Recommender(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(100000, 64, mode="sum")
        self.mlp = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.bag(ids)).squeeze(-1)


def _recommender() -> Built:
    return (_Recommender(), (torch.randint(0, 100000, (4096, 20)), torch.rand(4096)),
            lambda m, b: F.binary_cross_entropy_with_logits(m(b[0]), b[1]))


MODELS: dict[str, Callable[[], Built]] = {
    "resnet50": _vision("resnet50"),
    "resnext50_32x4d": _vision("resnext50_32x4d"),
    "wide_resnet50_2": _vision("wide_resnet50_2"),
    "regnet_y_800mf": _vision("regnet_y_800mf"),
    "regnet_x_1_6gf": _vision("regnet_x_1_6gf"),
    "efficientnet_b0": _vision("efficientnet_b0"),
    "efficientnet_v2_s": _vision("efficientnet_v2_s"),
    "mnasnet1_0": _vision("mnasnet1_0"),
    "convnext_tiny": _vision("convnext_tiny"),
    "densenet121": _vision("densenet121"),
    "googlenet": _vision("googlenet", aux_logits=False, init_weights=False),
    "inception_v3": _vision("inception_v3", side=299, aux_logits=False, init_weights=False),
    "alexnet": _vision("alexnet"),
    "vit_b_16": _vision("vit_b_16"),
    "swin_t": _vision("swin_t"),
    "swin_v2_t": _vision("swin_v2_t"),
    "fcn_resnet50": _segmentation("fcn_resnet50"),
    "deeplabv3_mobilenet_v3_large": _segmentation("deeplabv3_mobilenet_v3_large"),
    "unet_level": _unet,
    "dcgan_generator": _dcgan_generator,
    "conv1d_audio": _audio_conv1d,
    "conv3d_video": _video_conv3d,
    "lstm_lm": _lstm,
    "lstm_tagger_packed": _packed_tagger,
    "embedding_bag_recommender": _recommender,
    "distilbert": _language("DistilBertConfig", "DistilBertForMaskedLM"),
    "deberta_v2_small": _language("DebertaV2Config", "DebertaV2ForMaskedLM", hidden_size=512, num_hidden_layers=4,
                                  num_attention_heads=8, intermediate_size=2048),
    "opt_6l": _language("OPTConfig", "OPTForCausalLM", hidden_size=768, ffn_dim=3072, num_hidden_layers=6,
                        num_attention_heads=12),
    "gpt_neox_8l": _language("GPTNeoXConfig", "GPTNeoXForCausalLM", hidden_size=768, intermediate_size=3072,
                             num_hidden_layers=8, num_attention_heads=12, vocab_size=50432),
    "mistral_8l_gqa": _language("MistralConfig", "MistralForCausalLM", hidden_size=1024, intermediate_size=2816,
                                num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, vocab_size=32000),
    "gemma_6l_mqa": _language("GemmaConfig", "GemmaForCausalLM", hidden_size=1024, intermediate_size=4096,
                              num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=1, head_dim=128,
                              vocab_size=32000),
    "phi_8l": _language("PhiConfig", "PhiForCausalLM", hidden_size=1024, intermediate_size=4096, num_hidden_layers=8,
                        num_attention_heads=16, vocab_size=51200),
    "bart_4x4": _language("BartConfig", "BartForConditionalGeneration", d_model=512, encoder_layers=4,
                          decoder_layers=4, encoder_attention_heads=8, decoder_attention_heads=8,
                          encoder_ffn_dim=2048, decoder_ffn_dim=2048),
    "t5_6l": _t5,
    "whisper_4x4": _whisper,
    "wav2vec2_4l": _wav2vec2,
}


def gemm_cover(ops: list) -> float:
    """The largest ratio, over the convolution ops, of their implicit GEMMs' multiply-adds to the
    op's own (1.0 when there are none)."""
    worst = 1.0
    for op in ops:
        if op.cost.op_class == "conv" and op.cost.gemms and op.cost.flops > 0:
            covered = sum(2.0 * b * m * n * k for b, m, n, k in op.cost.gemms)
            worst = max(worst, covered / op.cost.flops)
    return worst


# A step counts as GPU-bound where its predicted host time is under this multiple of its device time.
HOST_MARGIN = 1.15
# The 35 architectures x 4 precisions, then five of them (those the first run missed most) timed again
# in a later session on another H200 machine, in 32-true, bf16-mixed and 16-mixed; then 20 of them on
# a third H200 machine in those three precisions, each step with the host probe timed beside it.
TIMINGS = [os.path.join(HERE, "data", name)
           for name in ("architectures_h200_2026-11-27.jsonl", "architectures_h200_2026-11-27_pm.jsonl",
                        "architectures_h200_2026-11-27_eve.jsonl")]


def _as_spec(name: str) -> tuple:
    """A model of ``MODELS`` in the (make_model, make_batch, loss) form ``profile_steps`` builds steps from."""
    model, batch, loss = MODELS[name]()
    return (lambda: model, lambda device, dtype: tuple(t.to(device) for t in batch), loss)


def _release(device: torch.device) -> None:
    """Free one model's step before the next is built (the largest take tens of GB)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _launch_us_as_micro(device: torch.device) -> float:
    """Microseconds per small op timed as ``data/micro.json``'s ``launch_us_per_small_op`` was (the
    reference host's 10.85 us): 1000 in-place adds between CUDA events, median of 5."""
    if device.type != "cuda":
        return 0.0
    small = torch.randn(16, device=device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(6):
        start.record()
        for _ in range(1000):
            small.add_(1.0)
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / 1000)
    return round(statistics.median(samples[1:]), 2)


def time_models(names: list[str], precisions: list[str], out: str, profiles: str | None = None) -> int:
    """Time every model's real step here, one precision at a time over all models (so that an
    interrupted run has each model's 32-true first), appending a JSON line each; then, with
    ``profiles``, profile one step of each in ``profile_steps.py``'s format (after all the timing:
    once the profiler has run, a process's launch-bound steps stay slower)."""
    from profile_steps import build_step, profile_step, time_step

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    failures = 0
    timed: dict[tuple[str, str], float] = {}
    launch_us = _launch_us_as_micro(device)
    for precision in precisions:
        for name in names:
            record: dict[str, Any] = {"model": name, "precision": precision, "device": gpu,
                                      "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
                                      "host_launch_us_as_micro": launch_us}
            try:
                step = build_step(_as_spec(name), precision, device)
                # This host's dispatch speed beside the step it times (hosts of one GPU kind differ)
                record["host_small_op_s"], record["host_autograd_op_s"] = host_op_seconds(device)
                record["host_cpu_small_op_s"], _ = host_op_seconds(torch.device("cpu"))
                record["step_s_median"] = timed[name, precision] = time_step(step, device)
            except Exception as exc:  # noqa: BLE001 - one model's failure (memory, say) must not end the run
                failures += 1
                record["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            with open(out, "a") as stream:
                stream.write(json.dumps(record) + "\n")
            print(f"timed {name} {precision}: "
                  f"{record.get('error') or format(1e3 * record['step_s_median'], '.2f') + ' ms'}", flush=True)
            _release(device)
    # The profiled records carry the step time of the first pass, which no profiler had slowed.
    for name, precision in timed if profiles else ():
        try:
            profiled = profile_step(build_step(_as_spec(name), precision, device), device)
        except Exception as exc:  # noqa: BLE001 - as above
            failures += 1
            print(f"profile of {name} {precision} failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        record = {"workload": name, "precision": precision, "device": gpu, "torch": torch.__version__,
                  "step_s_median": timed[name, precision], **profiled}
        with open(profiles, "a") as stream:
            stream.write(json.dumps(record) + "\n")
        print(f"profiled {name} {precision}: {record['profile_total_ms']:.1f} ms of device time", flush=True)
        _release(device)
    return 1 if failures else 0


def score(files: list[str], trace_on: str = "cpu") -> int:
    """Predict each recorded step for the GPU that timed it and print the errors. A step timed in
    several files counts once per file; speed-ups compare steps of the same file."""
    rows = [{**json.loads(line), "run": run} for run, path in enumerate(files) for line in open(path) if line.strip()]
    rows = [r for r in rows if "step_s_median" in r]
    where = "this CPU" if trace_on == "cpu" or not torch.cuda.is_available() else "this machine's GPU"
    print(f"architecture sweep scored {time.strftime('%Y-%m-%d')}, torch {torch.__version__}: "
          f"{len(rows)} timed steps from {', '.join(os.path.basename(f) for f in files)}, traced on {where}")
    print(f"{'model':30s} {'precision':11s} {'device':22s} {'measured':>9s} {'predicted':>9s} {'error':>7s}")
    predicted: dict[tuple[str, str, str, int], float] = {}
    measured: dict[tuple[str, str, str, int], float] = {}
    step_of: dict[tuple[str, str, str], Any] = {}
    probed: dict[tuple[str, str, str, int], float] = {}  # predicted with the host's recorded probe
    device_bound: dict[tuple[str, str, str, int], bool] = {}
    built: dict[str, Built] = {}
    for row in rows:
        name, precision, gpu = row["model"], row["precision"], row["device"]
        if (name, precision, gpu) not in step_of:  # a step timed in several files is predicted once
            if name not in built:
                built = {name: MODELS[name]()}  # one model at a time: some are large
            model, batch, loss = built[name]
            # The timed step set TF32 by its precision's name; the trace reads the flags from torch.
            torch.set_float32_matmul_precision("high" if precision == "32-tf32" else "highest")
            spec, coef = resolve_device(gpu)
            trace = trace_step(model, batch, loss, precision=precision, target_type="cuda", trace_on=trace_on)
            step_of[name, precision, gpu] = (trace, spec, coef, simulate(trace, spec, coef))
        trace, spec, coef, pred = step_of[name, precision, gpu]
        key = (name, precision, gpu, row["run"])
        device_bound[key] = pred.host_s < HOST_MARGIN * pred.device_s
        predicted[key], measured[key] = pred.step_s, row["step_s_median"]
        error = pred.step_s / row["step_s_median"] - 1
        line = (f"{name:30s} {precision:11s} {gpu[:22]:22s} {1e3 * row['step_s_median']:9.2f} "
                f"{1e3 * pred.step_s:9.2f} {100 * error:+6.1f}%")
        if "host_small_op_s" in row:
            # As the callback would predict it with this host's dispatch speed probed beside the step
            speed = host_speed(row["host_small_op_s"], coef)
            probed[key] = simulate(trace, spec, coef, {"host": speed}).step_s
            line += f"   host {speed:.2f}x: {1e3 * probed[key]:9.2f} {100 * (probed[key] / measured[key] - 1):+6.1f}%"
        print(line, flush=True)
    torch.set_float32_matmul_precision("highest")
    fell_back = [k for k, (trace, *_) in step_of.items()
                 if trace_on == "auto" and torch.cuda.is_available() and trace.trace_device == "cpu"]
    if fell_back:
        print(f"traced on the CPU proxy after the GPU's trace failed: {', '.join(' '.join(k[:2]) for k in fell_back)}")
    errors = [abs(predicted[k] / measured[k] - 1) for k in measured]
    if not errors:
        print("no timed steps")
        return 1
    print(f"\n{len(errors)} steps: MAPE {100 * statistics.mean(errors):.1f}%, median {100 * statistics.median(errors):.1f}%, "
          f"within 10%: {sum(e <= 0.10 for e in errors)}, within 25%: {sum(e <= 0.25 for e in errors)}, "
          f"worst {100 * max(errors):.1f}%")
    for precision in sorted({k[1] for k in measured}):
        share = [e for k, e in zip(measured, errors) if k[1] == precision]
        print(f"  {precision:11s} {len(share):3d} steps, MAPE {100 * statistics.mean(share):5.1f}%")
    for bound in (True, False):
        share = [e for k, e in zip(measured, errors) if device_bound[k] == bound]
        if share:
            print(f"  {'GPU-bound' if bound else 'host-bound':11s} {len(share):3d} steps, MAPE "
                  f"{100 * statistics.mean(share):5.1f}% (predicted host time {'under' if bound else 'at least'} "
                  f"{HOST_MARGIN}x the device time)")
    if probed:
        with_probe = [abs(probed[k] / measured[k] - 1) for k in probed]
        without = [abs(predicted[k] / measured[k] - 1) for k in probed]
        print(f"  the {len(probed)} steps recorded with a host probe: MAPE {100 * statistics.mean(without):.1f}% "
              f"(median {100 * statistics.median(without):.1f}%) with the reference host's costs, "
              f"{100 * statistics.mean(with_probe):.1f}% (median {100 * statistics.median(with_probe):.1f}%) "
              "with them scaled by the probe")
    ratios = []
    for key in measured:
        base = (key[0], "32-true", *key[2:])
        if key[1] != "32-true" and base in measured:
            true_ratio = measured[base] / measured[key]
            ratios.append(abs((predicted[base] / predicted[key]) / true_ratio - 1))
    if ratios:
        print(f"speed-up over 32-true within 10% of the measured one: {sum(r <= 0.10 for r in ratios)} of "
              f"{len(ratios)} (median error {100 * statistics.median(ratios):.1f}%)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--precisions", default="32-true,bf16-mixed")
    parser.add_argument("--time", metavar="OUT", help="time the real steps on this GPU, appending JSON lines to OUT")
    parser.add_argument("--profile", metavar="PROFILES", help="with --time: then profile one step of each, "
                        "appending to PROFILES (profile_steps.py's format)")
    parser.add_argument("--score", nargs="*", metavar="FILE", help="score recorded timings (default: the shipped ones)")
    parser.add_argument("--trace-on", default="cpu", choices=("cpu", "auto"),
                        help="with --score: trace on the CPU proxy, or as the callback does "
                             "(on this machine's GPU if it has one)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    if args.time:
        return time_models(names, args.precisions.split(","), args.time, args.profile)
    if args.score is not None:
        return score(args.score or TIMINGS, args.trace_on)
    print(f"architecture sweep, {time.strftime('%Y-%m-%d')}, torch {torch.__version__}: traced on this CPU, "
          f"predicted for h100-sxm")
    print(f"{'model':30s} {'precision':11s} {'step ms':>9s} {'bound':>6s} {'trace s':>8s} {'ops':>6s} "
          f"{'unknown':>8s} {'GEMM cover':>10s}")
    failures = 0
    for name in names:
        model, batch, loss = MODELS[name]()
        for precision in args.precisions.split(","):
            started = time.perf_counter()
            try:
                pred = ptp.predict_step(model, batch, loss, precision=precision, device="h100-sxm", trace_on="cpu")
            except Exception as exc:  # noqa: BLE001 - a sweep reports every failure and goes on
                failures += 1
                print(f"{name:30s} {precision:11s} FAILED: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            seconds = time.perf_counter() - started
            unknown = "yes" if any("no rule" in w for w in pred.warnings) else "-"
            print(f"{name:30s} {precision:11s} {1e3 * pred.step_s:9.1f} {pred.bound:>6s} {seconds:8.1f} "
                  f"{len(pred.ops):6d} {unknown:>8s} {gemm_cover(pred.ops):10.2f}", flush=True)
    print(f"{len(names)} models, {failures} failed traces")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
