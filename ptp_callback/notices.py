"""The warnings ptp_callback gives: a problem it met (the run goes on), and precision advice.

Filter them like any warning, e.g. ``warnings.filterwarnings("ignore", category=PrecisionAdvice)``.
"""

from __future__ import annotations

import warnings

__all__ = ["PrecisionAdvice", "PtpWarning", "warn"]


class PtpWarning(UserWarning):
    """A problem inside ptp_callback; the training run goes on with measured timing."""


class PrecisionAdvice(PtpWarning):
    """Another precision is predicted to make this run faster."""


def warn(message: str, category: type[Warning] = PtpWarning, *, stacklevel: int = 3) -> None:
    """One ``ptp: ...`` line, as a warning of ``category``."""
    warnings.warn(f"ptp: {message}", category, stacklevel=stacklevel)
