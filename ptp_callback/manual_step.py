"""Tracing a step that runs its own backward and optimizer steps (manual optimization).

A GAN's step, or a LightningModule with ``automatic_optimization = False``, calls ``backward``
and each optimizer's ``step()`` itself, as many times as it likes. To trace it, its optimizers are
given as :class:`ManualOptimization`; the step function then gets a third argument, a
:class:`ManualStep`, with the copies of those optimizers over the fake parameters and the
``backward`` to call. Each ``backward`` is recorded as backward work and each optimizer ``step()``
as optimizer work, exactly as the automatic step records them (with the GradScaler's unscale and
host sync in 16-bit mixed precision, and the optimizer's lazily created state made beforehand).

>>> import torch
>>> from ptp_callback.tracer import trace_step
>>> gen, disc = torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)
>>> model = torch.nn.ModuleDict({"gen": gen, "disc": disc})
>>> optimizers = ManualOptimization((torch.optim.Adam(gen.parameters()), torch.optim.SGD(disc.parameters())))
>>> def gan_step(model, batch, step):
...     opt_gen, opt_disc = step.optimizers
...     fake = model["gen"](batch)
...     step.backward(model["disc"](fake.detach()).mean())
...     opt_disc.step()
...     opt_disc.zero_grad()
...     step.backward(-model["disc"](fake).mean())
...     opt_gen.step()
...     opt_gen.zero_grad()
>>> trace = trace_step(model, torch.randn(4, 8), gan_step, optimizers, target_type="cpu")
>>> sorted({op.phase for op in trace.ops}), trace.optimizer_name
(['backward', 'forward', 'optimizer'], 'Adam+SGD')
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .clipping import ClippedGradients


@dataclass(frozen=True)
class ManualOptimization:
    """The optimizers of a step function that steps them itself (their classes and
    hyperparameters are copied onto the fake parameters, as for one optimizer)."""

    optimizers: tuple[torch.optim.Optimizer, ...]

    def __post_init__(self) -> None:
        # ManualOptimization(opt) for one optimizer, as ManualOptimization((opt,))
        if isinstance(self.optimizers, torch.optim.Optimizer):
            object.__setattr__(self, "optimizers", (self.optimizers,))
        else:
            object.__setattr__(self, "optimizers", tuple(self.optimizers))


class _Recorder(Protocol):
    def in_phase(self, phase: str) -> contextlib.AbstractContextManager[None]: ...
    def paused(self) -> contextlib.AbstractContextManager[None]: ...
    def pseudo(self, name: str, params: int = 0) -> None: ...


def run_backward(loss: torch.Tensor, gradient: Any = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs: Any = None) -> None:
    """``loss.backward(...)``, run by the autograd engine straight from here.

    ``Tensor.backward`` dispatches to the trace's torch function mode (``tracer._CudaKernels``:
    fused attention, cuDNN recurrent layers), which runs it with itself off the mode stack, and the
    engine runs the whole backward with the stack it was called with. A checkpointed block
    (``torch.utils.checkpoint``, Hugging Face's ``gradient_checkpointing``) runs its forward again
    in the backward: without the mode it took other kernels than the first time (CPU attention,
    not the fused kernel), and the checkpoint's check of the recomputed tensors failed the trace.
    """
    try:
        from torch.autograd import _make_grads
        from torch.autograd.graph import _engine_run_backward
    except ImportError:  # a PyTorch without them: a checkpointed block may not trace
        loss.backward(gradient, retain_graph, create_graph, inputs)
        return
    if inputs is not None:
        loss.backward(gradient, retain_graph, create_graph, inputs)
        return
    grads = _make_grads((loss,), (gradient,), is_grads_batched=False)
    _engine_run_backward((loss,), grads, create_graph if retain_graph is None else retain_graph, create_graph, (),
                         allow_unreachable=True, accumulate_grad=True)


def param_count(optimizer: torch.optim.Optimizer) -> int:
    return sum(len(g["params"]) for g in optimizer.param_groups)


class RecordedOptimizer:
    """An optimizer copy whose ``step()`` and ``zero_grad()`` are recorded as the optimizer's work;
    everything else (``param_groups``, ``state``...) is the copy's own."""

    def __init__(self, optimizer: torch.optim.Optimizer, recorder: _Recorder, scaler: Any,
                 clip: ClippedGradients | None = None, foreach: bool | None = None) -> None:
        self.optimizer = optimizer
        self._recorder = recorder
        self._scaler = scaler
        self._clip = clip
        self._foreach = foreach
        self._stepped = False

    def step(self, closure: Any = None) -> None:
        recorder, optimizer, scaler = self._recorder, self.optimizer, self._scaler
        if closure is not None:
            closure()  # a closure runs its own forward and backward first (LBFGS-style steps)
        with recorder.in_phase("optimizer"):
            if scaler is not None:
                scaler.unscale_(optimizer)
                recorder.pseudo("ptp.sync")  # GradScaler reads found_inf on the host
            if self._clip is not None:
                self._clip.apply(optimizer, self._foreach)  # on unscaled gradients, as the frameworks clip
            if not self._stepped:
                with recorder.paused():
                    optimizer.step()  # creates lazy optimizer state, as after warm-up
                self._stepped = True
            recorder.pseudo("ptp.optimizer_python", params=param_count(optimizer))
            optimizer.step()
            if scaler is not None:
                scaler.update()

    def zero_grad(self, set_to_none: bool = True) -> None:
        with self._recorder.in_phase("optimizer"):
            self._recorder.pseudo("ptp.zero_grad", params=param_count(self.optimizer))
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)


class ManualStep:
    """What a manual step function calls: ``backward(loss)`` and the recorded ``optimizers`` (in
    the order :class:`ManualOptimization` gave them)."""

    def __init__(self, recorder: _Recorder, optimizers: list[torch.optim.Optimizer], scaler: Any,
                 clip: ClippedGradients | None = None, foreach: bool | None = None) -> None:
        self._recorder = recorder
        self._scaler = scaler
        self.optimizers = [RecordedOptimizer(o, recorder, scaler, clip, foreach) for o in optimizers]

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        if self._scaler is not None:
            loss = self._scaler.scale(loss)  # the loss's last forward op, before the backward starts
        with self._recorder.in_phase("backward"):
            run_backward(loss, *args, **kwargs)
