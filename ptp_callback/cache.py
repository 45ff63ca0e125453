"""Where ptp_callback keeps what it measured or traced, so the next fit pays nothing for it.

``$PTP_CACHE_DIR`` if set, else ``~/.cache/ptp_callback``. Everything in it can be deleted at
any time: it is rebuilt on the next fit. Writing is best effort (a read-only home directory only
costs the next fit its probes again).
"""

from __future__ import annotations

import os


def cache_dir() -> str:
    """The cache directory (not created here)."""
    return os.environ.get("PTP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "ptp_callback")
