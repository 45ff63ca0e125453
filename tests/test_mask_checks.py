"""A decoder's attention mask is traced as the real batch makes it: transformers skips the mask
(SDPA runs causal) when no token is padded and no sequences are packed, which it cannot see on
fake tensors."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, LlamaConfig,  # noqa: E402
                          LlamaForCausalLM)
import transformers.masking_utils as masking  # noqa: E402

from ptp_callback.precision import PrecisionSpec  # noqa: E402
from ptp_callback.tracer import trace_step  # noqa: E402

SPEC = PrecisionSpec.from_setting("bf16-mixed")


def gpt2():
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=64, n_head=2, n_positions=32, vocab_size=128))


def llama():
    return LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=128, vocab_size=128))


def padded(ids):
    mask = torch.ones_like(ids)
    mask[0, -5:] = 0
    return mask


def packed(ids):
    return torch.arange(ids.shape[1]).remainder(8).expand_as(ids)  # two sequences of 8 in each row


# name, the batch from the token ids, whether a GPU runs the attention causal without a mask
CASES = [
    ("no mask", lambda ids: {"input_ids": ids, "labels": ids}, True),
    ("no cache", lambda ids: {"input_ids": ids, "labels": ids, "use_cache": False}, True),
    ("mask of ones", lambda ids: {"input_ids": ids, "labels": ids, "attention_mask": torch.ones_like(ids)}, True),
    ("mask of ones, no cache", lambda ids: {"input_ids": ids, "labels": ids, "use_cache": False,
                                            "attention_mask": torch.ones_like(ids)}, True),
    ("a tuple with a mask of ones", lambda ids: (ids, torch.ones_like(ids)), True),
    ("padded", lambda ids: {"input_ids": ids, "labels": ids, "attention_mask": padded(ids)}, False),
    ("a tuple, padded", lambda ids: (ids, padded(ids)), False),
    ("packed", lambda ids: {"input_ids": ids, "labels": ids, "use_cache": False, "position_ids": packed(ids)}, False),
]


def step(model, batch):
    if isinstance(batch, tuple):
        return model(input_ids=batch[0], attention_mask=batch[1], labels=batch[0]).loss
    return model(**batch).loss


@pytest.mark.parametrize("build", [gpt2, llama], ids=["gpt2", "llama-gqa"])
@pytest.mark.parametrize("name,make_batch,causal", CASES, ids=[c[0] for c in CASES])
def test_attention_is_traced_causal_exactly_when_the_real_batch_needs_no_mask(build, name, make_batch, causal):
    torch.manual_seed(0)
    ids = torch.randint(1, 128, (2, 16))
    trace = trace_step(build(), make_batch(ids), step, None, SPEC, target_type="cuda")
    attention = [op.cost for op in trace.ops if op.cost.op_class == "attention"]
    assert len(attention) == 2  # forward and backward
    assert all(cost.causal is causal for cost in attention)
    # causal: the flash kernel; with a boolean mask: the memory-efficient one (flash takes no mask)
    assert {cost.kernel for cost in attention} == ({"flash"} if causal else {"efficient"})


@pytest.mark.parametrize("pad", [False, True], ids=["mask of ones", "padded"])
def test_an_encoders_attention_runs_without_a_mask_exactly_when_no_token_is_padded(pad):
    bert = BertForMaskedLM(BertConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=2,
                                      intermediate_size=128, vocab_size=128))
    ids = torch.randint(1, 128, (2, 16))
    batch = {"input_ids": ids, "labels": ids, "attention_mask": padded(ids) if pad else torch.ones_like(ids)}
    trace = trace_step(bert, batch, step, None, SPEC, target_type="cuda")
    attention = [op.cost for op in trace.ops if op.cost.op_class == "attention"]
    assert len(attention) == 2 and not any(cost.causal for cost in attention)
    assert {cost.kernel for cost in attention} == ({"efficient"} if pad else {"flash"})


def test_a_decoders_own_mask_of_ones_beside_a_padded_encoder_input_leaves_its_attention_causal():
    from transformers import BartConfig, BartForConditionalGeneration

    bart = BartForConditionalGeneration(BartConfig(
        vocab_size=128, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32))
    ids = torch.randint(3, 128, (2, 16))
    # the encoder's input pads; the decoder's self-attention mask is the all-ones one BART fills itself
    batch = {"input_ids": ids, "attention_mask": padded(ids), "labels": torch.randint(3, 128, (2, 8))}
    # the CPU proxy keeps the fill's values (a trace on a local GPU keeps none: the batch's answer)
    trace = trace_step(bart, batch, step, None, SPEC, target_type="cuda", trace_on="cpu")
    forward = [op.cost for op in trace.ops if op.cost.op_class == "attention" and op.phase == "forward"]
    # encoder self-attention and cross-attention take the padding mask; the decoder's runs causal
    assert [(cost.causal, cost.kernel) for cost in forward] == [(False, "efficient"), (True, "flash"),
                                                                 (False, "efficient")]


def test_transformers_own_checks_are_back_after_the_trace():
    before = (masking._ignore_causal_mask_sdpa, masking._ignore_bidirectional_mask_sdpa,
              masking.find_packed_sequence_indices)
    ids = torch.randint(1, 128, (2, 16))
    trace_step(gpt2(), {"input_ids": ids, "labels": ids, "use_cache": False}, step, None, SPEC, target_type="cuda")
    assert (masking._ignore_causal_mask_sdpa, masking._ignore_bidirectional_mask_sdpa,
            masking.find_packed_sequence_indices) == before
