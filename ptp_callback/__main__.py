"""``python -m ptp_callback ...``: the ``ptp`` command line (``ptp_callback.cli``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
