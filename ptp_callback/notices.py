"""The warnings ptp_callback gives: a problem it met (the run goes on), and precision advice.

Filter them like any warning, e.g. ``warnings.filterwarnings("ignore", category=PrecisionAdvice)``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterator

__all__ = ["OnceWarnings", "PrecisionAdvice", "PrecisionHazard", "PtpWarning", "warn"]


class PtpWarning(UserWarning):
    """A problem inside ptp_callback; the training run goes on with measured timing."""


class PrecisionAdvice(PtpWarning):
    """Another precision is predicted to make this run faster."""


class PrecisionHazard(PtpWarning):
    """The run's settings cannot train in its precision (an optimizer ``eps`` that float16 rounds
    to 0); ptp_callback still times the run."""


_OURS = (os.path.dirname(os.path.abspath(__file__)),
         os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integrations"),
         # a warning from OnceWarnings.guard is given while contextlib leaves the guarded block
         os.path.abspath(contextlib.__file__))
# The engines that call the callbacks' hooks: a warning from a hook names the user's line that
# started the run (``trainer.fit(...)``), not the engine's line that called the hook.
_ENGINES = ("lightning", "pytorch_lightning", "transformers", "accelerate")


@functools.lru_cache(maxsize=1)
def _skipped_paths() -> tuple[str, ...]:
    engines = []
    for name in _ENGINES:
        try:
            spec = importlib.util.find_spec(name)  # finds the package without importing it
        except (ImportError, ValueError):
            spec = None
        engines.extend(os.path.abspath(path) + os.sep for path in (spec and spec.submodule_search_locations) or ())
    return _OURS + tuple(engines)


def warn(message: str, category: type[Warning] = PtpWarning) -> None:
    """One ``ptp: ...`` line, as a warning of ``category``, attributed to the user's code that
    called into ptp_callback or into the engine that runs its hooks (not to the line inside that
    noticed)."""
    skipped = _skipped_paths()
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(skipped):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"ptp: {message}", category, stacklevel=level)


class OnceWarnings:
    """Warnings given once per key: the hooks that meet a problem run thousands of times a fit.

    ``enabled=False`` (a process that is not the main one) keeps them all quiet.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.given: set[str] = set()

    def warn(self, key: str, message: str, category: type[Warning] = PtpWarning) -> None:
        if key not in self.given and self.enabled:
            self.given.add(key)
            warn(message, category)

    @contextlib.contextmanager
    def guard(self, what: str, then: str = "falling back to measured timing") -> Iterator[None]:
        """Any failure inside becomes one warning ("``what`` failed (...); ``then``"), never an error."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - inside a training run every failure becomes a warning
            self.warn(what, f"{what} failed ({type(exc).__name__}: {exc}); {then}")
