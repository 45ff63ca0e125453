"""The C allocator's state a CPU fit runs in, settled before the fit as CPU predictions assume it.

glibc's ``malloc`` serves a request above its *mmap threshold* (128 KiB when a process starts)
with pages fresh from the operating system, and unmaps them when the block is freed. Freeing such
a block of up to 32 MiB raises the threshold to that block's size; importing torch frees blocks of
1-2 MiB only. Until a process has freed a larger one, each tensor a CPU training step allocates
above the threshold and below 32 MiB is mapped, zeroed and unmapped again, every step.

On a 2-thread Xeon (2026-11-27, ``benchmarks/allocator_state.py``) the demo's MLP step took 4,650
page faults and 17.8 ms in a plain loop, none and 11.9 ms once a block had been freed; its whole
fit 14.4 s against 10.7 s. A fit usually leaves that state by chance: at its first checkpoint
save, or when its data is loaded through temporary buffers. So its speed changed in the middle
of the fit, and the ETA had to catch up.

:func:`settle_cpu_allocator` frees one such block before a CPU fit starts. The whole fit then
runs as it would after that first save, and as predicted. The cost model prices tensors below
32 MiB as memory the step reuses (``costs.LARGE_ALLOCATION_BYTES``). A threshold the user set
(``MALLOC_MMAP_THRESHOLD_`` or ``mallopt``) is left alone: glibc then keeps it fixed. Other C
libraries (macOS, musl) are not touched.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["settle_cpu_allocator"]

# glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: a freed mapped block larger than this raises
# nothing. The block is two pages under it, so its chunk (the request plus a header, rounded up
# to whole pages) stays within it.
_MAX_DYNAMIC_THRESHOLD = 32 * 2**20
_BLOCK_BYTES = _MAX_DYNAMIC_THRESHOLD - 2 * 4096


def _glibc() -> ctypes.CDLL | None:
    """The process's C library if it is glibc (``None`` elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        version = libc.gnu_get_libc_version  # glibc only
    except (OSError, AttributeError):
        return None
    version.restype = ctypes.c_char_p
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.restype = None
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def settle_cpu_allocator() -> bool:
    """Raise glibc's mmap threshold to 32 MiB as freeing a checkpoint-sized block does (see the
    module doc); ``True`` if this process uses glibc and the block was freed."""
    libc = _glibc()
    if libc is None:
        return False
    block = libc.malloc(_BLOCK_BYTES)
    if not block:
        return False
    libc.free(block)
    return True
