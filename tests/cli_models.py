"""Model factories for tests/test_cli.py (``ptp predict cli_models:...``)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = 1000  # not a factory: `ptp predict cli_models:CLASSES` says so

def mlp(batch_size: int = 64):
    """A model, an example batch and the step that computes its loss."""
    model = nn.Sequential(nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, CLASSES))
    batch = (torch.randn(batch_size, 1024), torch.randint(0, CLASSES, (batch_size,)))
    return model, batch, lambda m, b: F.cross_entropy(m(b[0]), b[1])


def frozen():
    model = nn.Linear(8, 8)
    model.requires_grad_(False)
    return model, (torch.randn(4, 8),)


def no_batch():
    return nn.Linear(8, 8)


def broken():
    raise RuntimeError("this factory is broken")
