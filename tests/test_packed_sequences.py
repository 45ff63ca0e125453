"""Recurrent models over packed sequences trace for a GPU, with the copies ATen launches to pack and unpack."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.profiler import ProfilerActivity, profile

from ptp_callback import TraceError, predict_step, trace_step

BATCH, STEPS = 8, 12
LENGTHS = torch.tensor([12, 3, 7, 12, 5, 7, 1, 9])  # 6 distinct lengths, 56 rows in all


class Classifier(nn.Module):
    """Embeds padded token ids, runs an LSTM over the packed sequences, classifies the last state."""

    def __init__(self, cell: type[nn.Module] = nn.LSTM, unpack: bool = False) -> None:
        super().__init__()
        self.unpack = unpack
        self.emb = nn.Embedding(50, 16)
        self.rnn = cell(16, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(self.emb(ids), lengths, batch_first=True, enforce_sorted=False)
        out, state = self.rnn(packed)
        if self.unpack:  # a tagger: one output per token, padding and all
            padded, _ = pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
            return self.head(padded).mean(1)
        hidden = state[0] if isinstance(state, tuple) else state
        return self.head(hidden[-1])


def step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    ids, lengths, labels = batch
    return F.cross_entropy(model(ids, lengths), labels)


def batch() -> tuple[torch.Tensor, ...]:
    return torch.randint(0, 50, (BATCH, STEPS)), LENGTHS.clone(), torch.randint(0, 4, (BATCH,))


def aten_copies() -> dict[str, collections.Counter]:
    """What ATen launched inside each packing op of one real step on this CPU (its profile)."""
    model = Classifier(unpack=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(model, batch()).backward()
    inside: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def count(name: str, event) -> None:
        for child in event.cpu_children:
            inside[name][child.name] += 1
            count(name, child)

    for event in prof.events():
        if event.name in ("aten::_pack_padded_sequence", "aten::_pad_packed_sequence",
                          "aten::_pack_padded_sequence_backward"):
            count(event.name, event)
    return inside


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_packed_recurrent_model_traces_for_a_gpu_with_one_cudnn_call_over_the_packed_rows(cell, precision):
    trace = trace_step(Classifier(cell), batch(), step, None, precision)
    rnn = [op for op in trace.ops if op.cost.op_class == "recurrent"]
    assert [op.name for op in rnn] == ["aten._cudnn_rnn.default", "aten._cudnn_rnn_backward.default"]
    _gates, layers, _dirs, rows_per_step, seq, _in, hidden, _proj = rnn[0].cost.dims
    assert (layers, seq, hidden) == (2, 12, 32)  # as many time steps as the longest sequence
    assert seq * (rows_per_step - 1) < int(LENGTHS.sum()) <= seq * rows_per_step  # the packed rows, not 8 x 12
    assert not trace.unknown_ops


def test_packing_and_unpacking_launch_the_copies_aten_launches_forward_and_backward():
    real = aten_copies()
    trace = trace_step(Classifier(unpack=True), batch(), step, None, "32-true")
    forward = collections.Counter(op.name for op in trace.ops if op.phase == "forward")
    # Packing: one copy per distinct length (each slice of the time-major input made contiguous),
    # then one concatenation; unpacking: one fill, one copy per run of steps with the same batch.
    assert forward["aten.clone.default"] == real["aten::_pack_padded_sequence"]["aten::clone"] == 6
    assert forward["aten.cat.default"] == real["aten::_pack_padded_sequence"]["aten::cat"] == 1
    assert forward["aten.copy_.default"] == real["aten::_pad_packed_sequence"]["aten::copy_"] == 6
    assert forward["aten.full.default"] == real["aten::_pad_packed_sequence"]["aten::full"] == 1
    # The packing's backward copies each time step's rows back: 12 copies into one zero fill.
    assert real["aten::_pack_padded_sequence_backward"]["aten::copy_"] == STEPS
    packed_only = trace_step(Classifier(), batch(), step, None, "32-true")
    backward = collections.Counter(op.name for op in packed_only.ops if op.phase == "backward")
    assert backward["aten.copy_.default"] == STEPS


def test_a_small_packed_step_costs_more_than_its_padded_twin_for_the_copies_it_launches():
    packed = predict_step(Classifier(), batch(), step, precision="32-true", device="h100-sxm")

    class Padded(Classifier):
        def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            return self.head(self.rnn(self.emb(ids))[1][0][-1])

    padded = predict_step(Padded(), batch(), step, precision="32-true", device="h100-sxm")
    assert packed.step_s > padded.step_s  # a small packed step pays its pieces' launches


def test_unsorted_lengths_fail_the_trace_as_they_fail_a_real_step():
    class Sorted(Classifier):
        def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            out, (h, _c) = self.rnn(pack_padded_sequence(self.emb(ids), lengths, batch_first=True))
            return self.head(h[-1])

    with pytest.raises(RuntimeError, match="must be sorted in decreasing order"):
        step(Sorted(), batch())  # the real step
    with pytest.raises(TraceError, match="must be sorted in decreasing order"):
        trace_step(Sorted(), batch(), step, None, "32-true")


def test_for_a_cpu_target_a_packed_model_stops_the_trace_saying_why():
    with pytest.raises(TraceError, match="packed sequences .* are traced for a GPU target only"):
        trace_step(Classifier(), batch(), step, None, "32-true", target_type="cpu")
