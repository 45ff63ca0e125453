"""The warnings ptp_callback gives: a problem it met (the run goes on), and precision advice.

Filter them like any warning, e.g. ``warnings.filterwarnings("ignore", category=PrecisionAdvice)``.
"""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["PrecisionAdvice", "PtpWarning", "warn"]


class PtpWarning(UserWarning):
    """A problem inside ptp_callback; the training run goes on with measured timing."""


class PrecisionAdvice(PtpWarning):
    """Another precision is predicted to make this run faster."""


_OURS = (os.path.dirname(os.path.abspath(__file__)),
         os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integrations"))


def warn(message: str, category: type[Warning] = PtpWarning) -> None:
    """One ``ptp: ...`` line, as a warning of ``category``, attributed to the user's code that
    called into ptp_callback (not to the line inside it that noticed)."""
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_OURS):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"ptp: {message}", category, stacklevel=level)
