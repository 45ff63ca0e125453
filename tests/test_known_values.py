"""Steps that read values of their batch trace on the CPU proxy: CTC losses, masks drawn on the host."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ptp_callback import TraceError, known_values, predict_step, trace_step

VOCAB, FRAMES, BATCH, LONGEST = 12, 50, 4, 9


class CTCModel(nn.Module):
    """Frames -> per-frame log-probabilities, trained with CTC the way transformers' CTC heads do."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(16, 32)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, frames: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if labels.max() >= VOCAB:  # a value the step reads
            raise ValueError("label out of range")
        log_probs = self.head(self.encoder(frames).relu()).log_softmax(-1).transpose(0, 1)
        valid = labels >= 0
        targets = labels.masked_select(valid)  # as many elements as valid labels
        input_lengths = torch.full((frames.shape[0],), frames.shape[1], dtype=torch.long)
        return F.ctc_loss(log_probs, targets, input_lengths, valid.sum(-1))


def ctc_batch() -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(1, VOCAB, (BATCH, LONGEST))
    labels[1, 5:] = -100  # padding
    return torch.randn(BATCH, FRAMES, 16), labels


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_ctc_loss_traces_with_its_trellis_sized_by_the_real_label_lengths(precision):
    frames, labels = ctc_batch()
    trace = trace_step(CTCModel(), (frames, labels), lambda m, b: m(*b), None, precision, target_type="cuda",
                       trace_on="cpu")
    ctc = [op for op in trace.ops if "ctc_loss" in op.name]
    assert [op.phase for op in ctc] == ["forward", "backward"]
    # forward: the loss per sequence and the trellis, batch x frames x (2 x longest target + 1)
    assert ctc[0].out_shapes == ((BATCH,), (BATCH, FRAMES, 2 * LONGEST + 1))
    assert ctc[1].out_shapes == ((FRAMES, BATCH, VOCAB),)
    selected = next(op for op in trace.ops if op.name == "aten.masked_select.default")
    assert selected.out_shapes == ((BATCH * LONGEST - 4,),)  # the valid labels, counted from the batch


def test_a_ctc_loss_given_its_lengths_as_python_lists_traces_like_one_given_tensors():
    frames, labels = ctc_batch()
    labels[1, 5:] = 1  # no padding: every target is LONGEST long

    def step(model: CTCModel, b: tuple[torch.Tensor, torch.Tensor], as_lists: bool) -> torch.Tensor:
        log_probs = model.head(model.encoder(b[0]).relu()).log_softmax(-1).transpose(0, 1)
        lengths = ([FRAMES] * BATCH, [LONGEST] * BATCH) if as_lists else (
            torch.full((BATCH,), FRAMES, dtype=torch.long), labels.new_full((BATCH,), LONGEST) + 0 * b[1][:, 0])
        return F.ctc_loss(log_probs, b[1], *lengths)

    traces = [trace_step(CTCModel(), (frames, labels), lambda m, b, lists=lists: step(m, b, lists), None, "32-true",
                         target_type="cuda", trace_on="cpu") for lists in (True, False)]
    ctc = [[op.out_shapes for op in trace.ops if "ctc_loss" in op.name] for trace in traces]
    assert ctc[0] == ctc[1] == [((BATCH,), (BATCH, FRAMES, 2 * LONGEST + 1)), ((FRAMES, BATCH, VOCAB),)]


def test_the_batch_itself_is_never_written():
    frames, labels = ctc_batch()
    before = labels.clone()

    def step(model: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        b[1].masked_fill_(b[1] < 0, 0)  # an in-place edit of the labels inside the step
        return model(b[0], b[1])

    trace_step(CTCModel(), (frames, labels), step, None, "32-true", target_type="cuda", trace_on="cpu")
    assert torch.equal(labels, before)


class HostMasked(nn.Module):
    """SpecAugment as wav2vec 2.0 does it: a time mask drawn with NumPy replaces frames."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.masked = nn.Parameter(torch.zeros(16))
        self.head = nn.Linear(16, 3)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        hidden = self.proj(frames)
        mask = torch.tensor(np.random.default_rng(0).random(hidden.shape[:2]) < 0.3)
        hidden[mask] = self.masked.to(hidden.dtype)
        return self.head(hidden).mean()


def test_a_mask_drawn_on_the_host_indexes_the_hidden_states_forward_and_backward():
    trace = trace_step(HostMasked(), (torch.randn(BATCH, FRAMES, 16),), lambda m, b: m(*b), None, "bf16-mixed",
                       target_type="cuda", trace_on="cpu")
    assert {op.phase for op in trace.ops if "index" in op.name} == {"forward", "backward"}


def test_integer_results_too_big_to_keep_are_never_computed_for_real(monkeypatch):
    monkeypatch.setattr(known_values, "VALUE_LIMIT", 100)
    seen = {}

    def step(model: nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        mask = b[1]
        small, pairs = mask.sum(-1), mask[:, None, :] & mask[:, :, None]  # 8 and 8 x 12 x 12 elements
        seen.update(small=small.constant is not None, pairs=pairs.constant is not None)
        return model(b[0]).float().mean() + pairs.sum() * 0

    batch = (torch.randn(8, 16), torch.ones(8, 12, dtype=torch.bool))
    trace_step(nn.Linear(16, 4), batch, step, None, "32-true", target_type="cuda", trace_on="cpu")
    assert seen == {"small": True, "pairs": False}


def test_a_transformers_ctc_model_with_layerdrop_and_spec_augment_traces():
    transformers = pytest.importorskip("transformers")
    config = transformers.Wav2Vec2Config(vocab_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=128, conv_dim=(32, 32), conv_stride=(5, 2),
                                         conv_kernel=(10, 3), num_conv_pos_embeddings=16, layerdrop=0.1,
                                         mask_time_prob=0.05)
    model = transformers.Wav2Vec2ForCTC(config)
    labels = torch.randint(1, 32, (2, 12))
    labels[0, 8:] = -100
    prediction = predict_step(model, {"input_values": torch.randn(2, 16000), "labels": labels},
                              lambda m, b: m(**b).loss, precision="bf16-mixed")
    assert prediction.step_s > 0 and not prediction.warnings


class LoopedExperts(nn.Module):
    """Top-2 of 4 experts run one after another on the tokens routed to each (transformers' eager
    experts): the sizes come from ``torch.where`` on the router's choice."""

    def __init__(self, experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(16, experts)
        self.experts = nn.ModuleList(nn.Linear(16, 16) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = self.router(x).softmax(-1).topk(2, dim=-1)
        mask = F.one_hot(chosen, len(self.experts)).permute(2, 1, 0)  # expert x slot x token
        out = torch.zeros_like(x)
        for e in (mask.sum(dim=(-1, -2)) > 0).nonzero():
            slot, token = torch.where(mask[e].squeeze(0))
            out.index_add_(0, token, self.experts[e](x[token]) * weights[token, slot, None])
        return out.sum()


def expert_gemms(model: nn.Module) -> list:
    """The forward GEMMs of the model's experts, traced for CUDA on 32 tokens."""
    trace = trace_step(model, (torch.randn(32, 16),), lambda m, b: m(*b), None, "bf16-mixed",
                       target_type="cuda", trace_on="cpu")
    return [op for op in trace.ops if op.phase == "forward" and op.cost.op_class == "gemm" and ".experts." in op.module]


def test_a_routers_choice_is_spread_evenly_so_a_loop_over_experts_traces_with_balanced_sizes():
    gemms = expert_gemms(LoopedExperts())
    # 32 tokens x 2 choices over 4 experts: each expert multiplies 16 tokens
    assert len(gemms) == 4 and {op.cost.gemm[1] for op in gemms} == {16}


def test_spread_indices_give_every_choice_the_same_share_and_each_row_distinct_picks():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        indices = torch.empty(10, 3, 2, dtype=torch.long).transpose(1, 2)  # topk along dim 1 of 6 choices
    known_values.spread_evenly(indices, 1, 6)
    picks = indices.constant.transpose(1, 2).reshape(-1, 3)
    assert all(len(set(row.tolist())) == 3 for row in picks)
    assert torch.bincount(picks.flatten(), minlength=6).tolist() == [10] * 6


class Top1Experts(nn.Module):
    """Switch-style top-1 routing: ``argmax`` picks one expert per token, looked up by a formatted
    name (``self.experts[f"expert_{idx}"]``), as transformers' Switch Transformers does."""

    def __init__(self, experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(16, experts)
        self.experts = nn.ModuleDict({f"expert_{e}": nn.Linear(16, 16) for e in range(experts)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = F.one_hot(self.router(x).argmax(dim=-1), len(self.experts)).T  # expert x token
        out = torch.zeros_like(x)
        for e in (mask.sum(dim=-1) > 0).nonzero():
            token = torch.where(mask[e[0]])[0]
            out.index_add_(0, token, self.experts[f"expert_{e[0]}"](x[token]))
        return out.sum()


def test_a_top1_routers_argmax_is_spread_evenly_and_a_formatted_expert_index_names_its_expert():
    gemms = expert_gemms(Top1Experts())
    # 32 tokens over 4 experts, one each: every expert multiplies 8 tokens
    assert len(gemms) == 4 and {op.cost.gemm[1] for op in gemms} == {8}
    assert {op.module.split(".experts.")[1].split(".")[0] for op in gemms} == {f"expert_{e}" for e in range(4)}


def test_one_pick_per_row_is_spread_over_the_choices_in_turn():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        indices = torch.empty(3, 4, dtype=torch.long)  # argmax over 5 choices, the dimension dropped
    known_values.spread_evenly(indices, None, 5)
    assert indices.constant.flatten().tolist() == [i % 5 for i in range(12)]


def test_a_transformers_switch_transformers_model_traces():
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "SwitchTransformersConfig"):
        pytest.skip("this transformers has no Switch Transformers")
    # its router converts itself to fp32 and picks experts with argmax in every forward
    config = transformers.SwitchTransformersConfig(vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                                   num_decoder_layers=2, num_heads=4, num_experts=4,
                                                   expert_capacity=64, num_sparse_encoder_layers=1,
                                                   num_sparse_decoder_layers=1, decoder_start_token_id=0)
    model = transformers.SwitchTransformersForConditionalGeneration(config)
    ids = torch.randint(0, 100, (2, 32))
    trace = trace_step(model, {"input_ids": ids, "labels": ids[:, :8]}, lambda m, b: m(**b).loss, None,
                       "bf16-mixed", target_type="cuda", trace_on="cpu")
    expert_gemms = [op for op in trace.ops if op.phase == "forward" and op.cost.op_class == "gemm"
                    and ".experts.expert_" in op.module]
    assert expert_gemms and not trace.unknown_ops


class Proposals(nn.Module):
    """A detector's training step in miniature: the batch's boxes are checked, proposals are kept
    by a threshold on their scores, and a sampler draws a fixed number of them at random."""

    def __init__(self) -> None:
        super().__init__()
        self.score = nn.Linear(16, 1)
        self.head = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        if (boxes[:, 2:] <= boxes[:, :2]).any():  # the batch's float boxes carry their values
            raise ValueError("degenerate box")
        keep = torch.where(self.score(x).squeeze(-1) > 0.0)[0]  # decided by the model's numbers
        sampled = keep[torch.randperm(keep.numel())[:8]]
        mask = torch.zeros(x.shape[0], dtype=torch.uint8)
        mask[sampled] = 1  # a random index never reads as values: this would index out of range
        size = (128, 160)[int(torch.empty(1).uniform_(0.0, 2.0).item())]  # a one-element draw: its median
        return self.head(x[keep]).sum() + mask.sum() * size


def test_sizes_the_models_numbers_decide_are_taken_at_their_largest_and_said_so():
    boxes = torch.tensor([[10.0, 20.0, 100.0, 120.0], [50.0, 60.0, 200.0, 220.0]])
    with pytest.warns(UserWarning, match=r"taken at their largest \(every element kept\): aten\.nonzero"):
        trace = trace_step(Proposals(), (torch.randn(32, 16), boxes), lambda m, b: m(*b), None, "bf16-mixed",
                           target_type="cuda", trace_on="cpu")
    head = [op for op in trace.ops
            if op.phase == "forward" and op.cost.op_class == "gemm" and op.module.endswith("head")]
    assert [op.cost.gemm[1] for op in head] == [32]  # every proposal kept
    assert "aten.nonzero.default" in trace.taken_largest and "taken at their largest" in trace.taken_largest_note


def test_a_random_index_into_a_valued_tensor_carries_no_values():
    with known_values.ValuedFakeTensorMode(allow_non_fake_inputs=True):
        ids = torch.tensor(list(range(100)))
        assert ids[torch.tensor([3, 4])].constant.tolist() == [3, 4]
        assert ids[torch.randperm(100)[:5]].constant is None  # was uninitialized memory read as values


def test_a_masked_select_by_a_valued_mask_is_sized_exactly_and_not_called_an_assumption():
    def step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch.masked_select(model(batch[0]), batch[1].unsqueeze(-1)).sum()

    mask = torch.tensor([True, False, True, False])
    trace = trace_step(nn.Linear(16, 16), (torch.randn(4, 16), mask), step, None, "32-true",
                       target_type="cuda", trace_on="cpu")
    selected = next(op for op in trace.ops if op.name == "aten.masked_select.default")
    assert selected.out_shapes == ((32,),)  # 2 rows x 16
    assert not trace.taken_largest and trace.taken_largest_note is None


class Queue(nn.Module):
    """A MoCo-style queue of keys and the integer pointer where the next keys go."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(16, 8)
        self.register_buffer("keys", torch.zeros(64, 8))
        self.register_buffer("pointer", torch.tensor([40]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.encoder(x)
        logits = q @ self.keys.clone().t()
        with torch.no_grad():
            at = int(self.pointer)  # as facebookresearch/moco reads it
            self.keys[at:at + len(x)] = q.detach()
            self.pointer[0] = (at + len(x)) % len(self.keys)
        return logits.logsumexp(-1).mean()


@pytest.mark.parametrize("target_type", ["cuda", "cpu"])
def test_an_integer_buffer_the_step_reads_keeps_its_value_and_the_model_its_own(target_type):
    model = Queue()
    trace = trace_step(model, (torch.randn(16, 16),), lambda m, b: m(*b), None, "32-true",
                       target_type=target_type, trace_on="cpu")
    # the pointer's value, 40, sizes the keys' slice the step writes to: 16 rows
    copy = next(op for op in trace.ops if op.name == "aten.copy_.default" and op.out_shapes == ((16, 8),))
    assert copy.phase == "forward"
    assert model.pointer.tolist() == [40] and not model.keys.any()  # the real buffers untouched


# SSD trains without NMS (hard negative mining sorts the losses instead)
@pytest.mark.parametrize("name, runs_nms", [("fasterrcnn_mobilenet_v3_large_320_fpn", True),
                                            ("ssdlite320_mobilenet_v3_large", False)])
def test_torchvision_detection_models_trace_with_nms_as_a_host_sync(name, runs_nms):
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=3)
    images = [torch.rand(3, 320, 320) for _ in range(2)]
    targets = [{"boxes": torch.tensor([[10.0, 20.0, 100.0, 120.0]]), "labels": torch.tensor([1])} for _ in range(2)]
    with pytest.warns(UserWarning, match="taken at their largest"):  # and no unknown op
        trace = trace_step(model, (images, targets), lambda m, b: sum(m(*b).values()), None, "bf16-mixed",
                           target_type="cuda", trace_on="cpu")
    assert not trace.unknown_ops
    names = [op.name for op in trace.ops]
    nms = [i for i, n in enumerate(names) if n == "torchvision.nms.default"]
    assert bool(nms) == runs_nms and all(names[i + 1] == "ptp.sync" for i in nms)


def _led(transformers):
    return transformers.LEDForConditionalGeneration(transformers.LEDConfig(
        vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, attention_window=[16],
        max_encoder_position_embeddings=256, max_decoder_position_embeddings=64))


def _longformer(transformers):
    return transformers.LongformerForMaskedLM(transformers.LongformerConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        attention_window=[16], max_position_embeddings=256))


def _jetmoe(transformers):
    return transformers.JetMoeForCausalLM(transformers.JetMoeConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_key_value_heads=2, kv_channels=16,
        intermediate_size=64, num_local_experts=4, num_experts_per_tok=2))


# LED and Longformer turn the attention mask into (1 - mask) * finfo.min or where(mask, 0, min),
# then read `(mask > 0).any().item()`; JetMoE scatters its routing into float zeros and reads the
# counts with `.tolist()`.
@pytest.mark.parametrize("make, seq2seq", [(_led, True), (_longformer, False), (_jetmoe, False)])
def test_float_values_computed_from_the_batch_or_filled_keep_them(make, seq2seq):
    transformers = pytest.importorskip("transformers")
    try:
        model = make(transformers)
    except AttributeError:
        pytest.skip("this transformers lacks the model")
    ids = torch.randint(3, 100, (2, 64))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids[:, :16] if seq2seq else ids}
    trace = trace_step(model, batch, lambda m, b: m(**b).loss, None, "bf16-mixed", target_type="cuda", trace_on="cpu")
    assert trace.ops and not trace.unknown_ops


def test_a_batch_index_out_of_range_fails_the_trace_as_it_fails_on_a_gpu():
    def step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        weights = torch.tensor([1.0, 2.0, 0.5])[batch[1]]  # per-class weights looked up by label
        return (F.cross_entropy(model(batch[0]), batch[1], reduction="none") * weights).mean()

    labels = torch.tensor([0, 1, 7, 2])  # 7 of 3 classes
    with pytest.raises(TraceError, match="out of range .* fails the same way on a GPU"):
        trace_step(nn.Linear(16, 3), (torch.randn(4, 16), labels), step, None, "32-true",
                   target_type="cuda", trace_on="cpu")


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


@pytest.mark.parametrize("overflowed", [
    lambda loss: torch.isnan(loss).any(), lambda loss: torch.isinf(loss), lambda loss: ~torch.isfinite(loss).all(),
    lambda loss: loss != loss,
    # an invariant checked of the model's numbers (DETR's matcher: its boxes' corners in order)
    lambda loss: not (loss.expand(2, 2)[:, 1:] >= loss.expand(2, 2)[:, :1]).all(),
])
def test_a_check_of_the_models_numbers_for_nan_or_infinity_reads_them_as_finite(overflowed):
    def step(model: nn.Module, batch: tuple) -> torch.Tensor:
        loss = F.cross_entropy(model(batch[0]), batch[1])
        if overflowed(loss):
            raise FloatingPointError("a step with a finite loss does not come here")
        return loss

    trace = trace_step(Linear(), (torch.randn(4, 8), torch.randint(0, 3, (4,))), step, None, "32-true")
    assert any(op.phase == "backward" for op in trace.ops)


@pytest.mark.parametrize("target_type", ["cuda", "cpu"])
def test_a_number_the_model_computed_reads_as_the_stand_in_and_waits_for_a_gpu(target_type):
    from ptp_callback.value_reads import STAND_IN

    read = []

    def step(model: nn.Module, batch: tuple) -> torch.Tensor:
        loss = F.cross_entropy(model(batch[0]), batch[1])
        read.append(loss.item())  # logged
        return loss

    batch = (torch.randn(4, 8), torch.randint(0, 3, (4,)))
    trace = trace_step(Linear(), batch, step, None, "32-true", target_type=target_type)
    assert read == [STAND_IN] and trace.numbers_read == 1
    syncs = [op for op in trace.ops if op.name == "ptp.sync"]
    assert len(syncs) == (1 if target_type == "cuda" else 0)  # a GPU's loss is copied to the host
    prediction = predict_step(Linear(), batch, step, precision="32-true", device="h100-sxm")
    assert any("reads values its model computed 1 time(s)" in note for note in prediction.notes)


class Gaussian(nn.Module):
    """A VAE's encoder: torch.distributions checks its arguments' constraints (validate_args)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu, log_var = self.layer(x).chunk(2, -1)
        return torch.distributions.Normal(mu, (0.5 * log_var).exp(), validate_args=True).rsample()


@pytest.mark.parametrize("target_type", ["cuda", "cpu"])
def test_a_distributions_check_of_its_arguments_passes_and_waits_for_a_gpu(target_type):
    trace = trace_step(Gaussian(), (torch.randn(4, 8),), lambda m, b: m(b[0]).square().mean(), None, "32-true",
                       target_type=target_type)
    checks = [i for i, op in enumerate(trace.ops) if op.name == "aten._is_all_true.default"]
    assert len(checks) == 2  # the mean's and the scale's constraints
    syncs = [i for i, op in enumerate(trace.ops) if op.name == "ptp.sync"]
    assert syncs == ([i + 2 for i in checks] if target_type == "cuda" else [])  # after each read of the answer
    assert trace.numbers_read == 0 and "aten._is_all_true.default" not in trace.unknown_ops


def test_a_comparison_of_one_number_the_model_computed_reads_it_as_the_stand_in():
    # transformers' Adafactor scales its step by max(eps, rms), a 0-d tensor of the parameter's values
    from transformers.optimization import Adafactor

    model = Linear()
    trace = trace_step(model, (torch.randn(4, 8), torch.randint(0, 3, (4,))),
                       lambda m, b: F.cross_entropy(m(b[0]), b[1]), Adafactor(model.parameters()), "32-true")
    assert trace.optimizer_name == "Adafactor" and any(op.phase == "optimizer" for op in trace.ops)

    def step(model: nn.Module, batch: tuple) -> torch.Tensor:
        loss = F.cross_entropy(model(batch[0]), batch[1])
        if loss > 1e4 or not loss >= 0.5:  # as 1.0 would answer: neither
            raise FloatingPointError("a step with a usual loss does not come here")
        return loss

    trace_step(Linear(), (torch.randn(4, 8), torch.randint(0, 3, (4,))), step, None, "32-true")


def test_reading_many_numbers_in_a_row_waits_for_the_gpu_once():
    def step(model: nn.Module, batch: tuple) -> torch.Tensor:
        out = model(batch[0])
        out.detach().tolist()  # 12 numbers, one copy from the GPU
        loss = F.cross_entropy(out, batch[1])
        loss.item()  # after more work queued: a second wait
        return loss

    trace = trace_step(Linear(), (torch.randn(4, 8), torch.randint(0, 3, (4,))), step, None, "32-true")
    assert trace.numbers_read == 13
    assert len([op for op in trace.ops if op.name == "ptp.sync"]) == 2


def test_an_integer_the_model_computed_still_stops_the_trace():
    def step(model: nn.Module, batch: tuple) -> torch.Tensor:
        out = model(batch[0])
        return out[: int((out > 0).sum())].sum()  # a size the model's values decide

    with pytest.raises(TraceError, match="reads an integer or a truth value its model.s numbers decide"):
        trace_step(Linear(), (torch.randn(4, 8),), step, None, "32-true")


@pytest.mark.parametrize("target_type", ["cuda", "cpu"])
def test_values_handed_to_numpy_read_as_stand_ins_and_the_batchs_as_themselves(target_type):
    from ptp_callback.value_reads import STAND_IN

    seen = {}

    def step(model: nn.Module, batch: tuple) -> torch.Tensor:
        out = model(batch[0])
        seen["probs"] = out.softmax(-1).detach().cpu().numpy()  # a metric in NumPy
        seen["labels"] = batch[1].cpu().numpy()
        return F.cross_entropy(out, batch[1])

    labels = torch.tensor([0, 2, 1, 1])
    trace = trace_step(Linear(), (torch.randn(4, 8), labels), step, None, "32-true", target_type=target_type)
    assert seen["probs"].shape == (4, 3) and (seen["probs"] == STAND_IN).all()
    assert seen["labels"].tolist() == labels.tolist()
    assert trace.numbers_read == 1
    assert len([op for op in trace.ops if op.name == "ptp.sync"]) == (1 if target_type == "cuda" else 0)
    assert torch.empty(2).numpy().shape == (2,)  # real tensors are untouched, during the trace and after


def test_a_write_without_values_into_a_filled_mask_takes_its_values_away():
    with known_values.ValuedFakeTensorMode(allow_non_fake_inputs=True):
        labels = torch.empty(100, dtype=torch.long)  # values the model decides: none
        picked = torch.where(labels >= 1)[0][:10] + labels[:10]  # indices without values
        mask = torch.zeros(100, dtype=torch.uint8)
        assert mask.constant is not None  # a fill keeps its values...
        mask[picked] = 1
        assert mask.constant is None  # ...until a write without values: no stale zeros
        assert torch.where(mask)[0].shape == (100,)  # taken at its largest, not empty


def test_a_samplers_random_permutations_pick_its_regions_as_in_training():
    # torchvision's BalancedPositiveNegativeSampler: 512 regions an image, a quarter positive, each
    # set drawn with randperm from the proposals. Its labels are the model's: every proposal is a
    # positive and a negative at once (taken at their largest), and the two random draws overlap.
    sampler_module = pytest.importorskip("torchvision.models.detection._utils")
    sampler = sampler_module.BalancedPositiveNegativeSampler(512, 0.25)
    model = nn.ModuleDict({"score": nn.Linear(16, 1), "head": nn.Linear(16, 32)})

    def step(model, batch):
        (x,) = batch
        labels = (model["score"](x).squeeze(1) > 0).long()
        positive, negative = sampler([labels])
        regions = torch.where(positive[0] | negative[0])[0]
        return model["head"](x[regions]).square().mean()

    with pytest.warns(UserWarning, match="taken at their largest"):
        trace = trace_step(model, (torch.randn(2000, 16),), step, None, "32-true", target_type="cuda", trace_on="cpu")
    (head,) = [op for op in trace.ops if op.phase == "forward" and op.module.endswith("head")]
    # 128 positives and 384 negatives of 2,000: about 25 picked twice
    assert 450 <= head.cost.gemm[1] <= 512
    draws = [op for op in trace.ops if op.name.startswith("aten.randperm")]
    assert len(draws) == 2
