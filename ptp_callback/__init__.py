"""ptp_callback: precision-aware training-time prediction for PyTorch.

Trace one real training step of your model under its precision, predict its time on a named
GPU, and (with :class:`PrecisionTimeCallback`) show the whole fit's ETA from before step one.

>>> import torch, ptp_callback as ptp
>>> model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10))
>>> batch = (torch.randn(64, 512), torch.randint(0, 10, (64,)))
>>> step = lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1])
>>> pred = ptp.predict_step(model, batch, step, precision="bf16-mixed", device="h100-sxm")
>>> pred.step_s > 0
True
"""

from .clipping import ClippedGradients
from .devices import DeviceSpec, UnknownDeviceError, get_device, known_devices, register_device
from .manual_step import ManualOptimization
from .precision import PrecisionSpec
from .predict import StepPrediction
from .step import predict_step
from .tracer import Trace, TraceError, trace_step

__all__ = [
    "ClippedGradients",
    "DeviceSpec",
    "ManualOptimization",
    "PrecisionTimeCallback",
    "PrecisionSpec",
    "StepPrediction",
    "Trace",
    "TraceError",
    "UnknownDeviceError",
    "get_device",
    "known_devices",
    "predict_step",
    "register_device",
    "trace_step",
    "track",
]
__version__ = "0.1.0"


def __getattr__(name: str):  # noqa: ANN202 - lazy: the core must not import Lightning
    if name == "PrecisionTimeCallback":
        from .integrations.lightning import PrecisionTimeCallback

        return PrecisionTimeCallback
    if name == "track":
        from .loop import track

        return track
    raise AttributeError(f"module 'ptp_callback' has no attribute {name!r}")
