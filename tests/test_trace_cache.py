"""Traces kept on disk: the same step is not traced twice, a different one always is."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ptp_callback.precision import PrecisionSpec
from ptp_callback.trace_cache import cached_trace_step, code_key, trace_key

SPEC = PrecisionSpec.from_setting("bf16-mixed")


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.1), nn.Linear(32, 4))


def batch(n: int = 8):
    return (torch.randn(n, 16), torch.randint(0, 4, (n,)))


def step(m, b):
    return F.cross_entropy(m(b[0]), b[1])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTP_CACHE_DIR", str(tmp_path))
    return tmp_path / "traces"


def key(m=None, b=None, fn=step, optimizer=None, spec=SPEC, **kw):
    return trace_key(m or model(), b or batch(), fn, optimizer, spec, target_type=kw.get("target", "cuda"),
                     train=kw.get("train", True))


def test_the_second_trace_of_the_same_step_comes_from_disk(cache):
    first, hit = cached_trace_step(model(), batch(), step, None, SPEC)
    assert not hit and len(os.listdir(cache)) == 1
    second, hit = cached_trace_step(model(), batch(), step, None, SPEC)
    assert hit
    assert [(o.name, o.in_shapes, o.cost) for o in second.ops] == [(o.name, o.in_shapes, o.cost) for o in first.ops]
    assert second.optimizer_state_bytes == first.optimizer_state_bytes > 0


def test_the_key_sees_everything_the_trace_depends_on():
    base = key()
    assert key() == base  # the weights' values do not matter, only shapes and dtypes
    other_dropout = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.3), nn.Linear(32, 4))
    frozen = model()
    frozen[0].weight.requires_grad_(False)
    different = [
        key(m=nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.1), nn.Linear(64, 4))),  # shapes
        key(m=other_dropout),  # a module's settings
        key(m=frozen),  # what trains
        key(b=batch(16)),  # the batch
        key(fn=lambda m, b: m(b[0]).sum()),  # the step's code
        key(optimizer=torch.optim.SGD(model().parameters(), lr=0.1)),  # the optimizer
        key(spec=PrecisionSpec.from_setting("16-mixed")),  # the precision
        key(target="cpu"),
        key(train=False),
    ]
    assert base not in different and len(set(different)) == len(different)


def test_tf32_flags_key_a_gpu_targets_trace_but_not_a_cpus():
    """A CPU runs fp32 as fp32 whatever torch's TF32 flags say: its trace, and so its key, is one."""
    tf32 = PrecisionSpec.from_setting("32-true", matmul_tf32=True, conv_tf32=True)
    ieee = PrecisionSpec.from_setting("32-true", matmul_tf32=False, conv_tf32=False)
    assert key(spec=tf32, target="cpu") == key(spec=ieee, target="cpu")
    assert key(spec=tf32, target="cuda") != key(spec=ieee, target="cuda")


def test_the_key_sees_a_modules_switches_such_as_gradient_checkpointing():
    # Hugging Face's gradient_checkpointing_enable() sets a flag and a checkpoint function on each
    # layer; neither shows in repr, and the layers then run their forward again in the backward.
    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=32, vocab_size=128))
    tokens = torch.randint(0, 128, (2, 32))
    keys = [trace_key(gpt, tokens, None, None, SPEC, target_type="cuda", train=True)]
    for kwargs in ({"use_reentrant": False}, {"use_reentrant": True}):
        gpt.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        keys.append(trace_key(gpt, tokens, None, None, SPEC, target_type="cuda", train=True))
    gpt.gradient_checkpointing_disable()
    # disabling it leaves the hook it put on the embeddings (their output requires grad)
    keys.append(trace_key(gpt, tokens, None, None, SPEC, target_type="cuda", train=True))
    assert len(set(keys)) == 4
    # The training flag is the trace's own to set: a model left in eval mode is the same step.
    gpt.eval()
    assert trace_key(gpt, tokens, None, None, SPEC, target_type="cuda", train=True) == keys[-1]


def noise(module, inputs, output):
    return output + torch.rand_like(output)


def test_the_key_sees_the_hooks_on_a_models_modules():
    # NEFTune (the HF Trainer's neftune_noise_alpha) adds noise to the embeddings' output by a hook
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    batch = torch.randn(4, 8)
    plain = trace_key(model, batch, None, None, SPEC, target_type="cuda", train=True)
    handle = model[0].register_forward_hook(noise)
    hooked = trace_key(model, batch, None, None, SPEC, target_type="cuda", train=True)
    handle.remove()
    assert hooked != plain and trace_key(model, batch, None, None, SPEC, target_type="cuda", train=True) == plain


def test_the_key_sees_the_shapes_inside_a_tokenizers_batch_and_whether_its_mask_pads():
    # BatchEncoding (what tokenizers and HF collators return) is a UserDict, one opaque leaf to
    # torch's pytree: its repr shows the first values and no shapes.
    pytest.importorskip("transformers")
    from transformers import BatchEncoding

    def encoded(length, pad=0):
        mask = torch.ones(4, length, dtype=torch.long)
        mask[0, length - pad:] = 0
        return BatchEncoding({"input_ids": torch.zeros(4, length, dtype=torch.long), "attention_mask": mask})

    lm = nn.Embedding(8, 4)
    keys = {trace_key(lm, b, lambda m, b: m(b["input_ids"]).sum(), None, SPEC, target_type="cuda", train=True)
            for b in (encoded(128), encoded(512), encoded(512, pad=3))}
    assert len(keys) == 3


def test_code_keys_are_stable_and_tell_functions_apart():
    assert code_key(step) == code_key(step)
    assert code_key(step) != code_key(lambda m, b: m(b[0]).sum())


def test_caching_can_be_switched_off(cache, monkeypatch):
    monkeypatch.setenv("PTP_TRACE_CACHE", "0")
    cached_trace_step(model(), batch(), step, None, SPEC)
    _, hit = cached_trace_step(model(), batch(), step, None, SPEC)
    assert not hit and not cache.exists()


def test_a_damaged_cache_file_is_traced_again(cache):
    cached_trace_step(model(), batch(), step, None, SPEC)
    (path,) = cache.iterdir()
    path.write_bytes(b"not a pickle")
    trace, hit = cached_trace_step(model(), batch(), step, None, SPEC)
    assert not hit and trace.ops


def test_another_version_of_this_package_does_not_reuse_the_trace(monkeypatch):
    # A trace holds each op's priced bytes and kernels: a trace stored by other code is stale.
    from ptp_callback import trace_cache

    base = key()
    monkeypatch.setattr(trace_cache, "_package_digest", lambda: "another release")
    assert key() != base
