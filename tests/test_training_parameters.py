"""Which parameters train, read through what a trace takes for an optimizer."""

from __future__ import annotations

import torch

from ptp_callback.clipping import ClippedGradients
from ptp_callback.manual_step import ManualOptimization
from ptp_callback.training_parameters import training_parameters


def test_the_parameters_optimizers_hold_are_read_through_their_wrappers():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    model[0].requires_grad_(False)
    head = torch.optim.AdamW(model[1].parameters())
    body = torch.optim.SGD(model[0].parameters(), lr=0.1)
    plain = training_parameters(model, [head])
    assert (plain.trainable, plain.trainable_elements, plain.optimized) == (2, 18, 2)
    assert training_parameters(model, [ClippedGradients(head, 1.0)]) == plain
    assert training_parameters(model, [ManualOptimization((head, body))]).optimized == 4
    assert training_parameters(model, [None]).optimized == 0  # AdamW defaults: nothing built yet
    head.add_param_group({"params": list(model[0].parameters())})
    assert training_parameters(model, [ClippedGradients(head, 1.0)]).optimized == 4
