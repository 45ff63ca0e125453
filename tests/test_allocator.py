"""The C allocator settled before a CPU fit: glibc's mmap threshold raised as a checkpoint save raises it."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _has_mallinfo2() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return hasattr(ctypes.CDLL(None), "mallinfo2")
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _has_mallinfo2(), reason="needs glibc 2.33+ (mallinfo2)")

# Whether a 16 MiB block is mapped from the operating system (mallinfo2's count of mapped blocks
# goes up) or served from the heap. The block is never freed: freeing it would raise the threshold.
PROBE = textwrap.dedent("""
    import ctypes
    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    def mapped_16mib():
        before = libc.mallinfo2().hblks
        libc.malloc(16 * 2**20)
        return libc.mallinfo2().hblks > before
""")
# The module alone, without the package (which imports torch): a fresh interpreter that has freed
# no large block yet.
LOAD_ALONE = textwrap.dedent("""
    import importlib.util
    spec = importlib.util.spec_from_file_location("allocator", "ptp_callback/allocator.py")
    allocator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(allocator)
""")


def _run(code: str, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_settling_serves_blocks_of_mib_from_the_heap_instead_of_fresh_mappings() -> None:
    before, settled, after = _run(LOAD_ALONE + "print(mapped_16mib(), allocator.settle_cpu_allocator(), mapped_16mib())")
    assert (before, settled, after) == ("True", "True", "False")


def test_a_threshold_the_user_set_is_left_alone() -> None:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    settled, after = _run(LOAD_ALONE + "print(allocator.settle_cpu_allocator(), mapped_16mib())", env)
    assert (settled, after) == ("True", "True")


FIT = """
    import sys
    import lightning as L, torch
    from torch.utils.data import DataLoader, TensorDataset
    from ptp_callback import PrecisionTimeCallback

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(16, 2)
        def on_train_batch_start(self, batch, batch_idx):
            if batch_idx == 0:
                print(mapped_16mib())
        def training_step(self, batch, batch_idx):
            return torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.randn(64, 16), torch.randint(0, 2, (64,)))
    callbacks = [PrecisionTimeCallback(advise=False)] if sys.argv[-1] == "ptp" else []
    trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks)
    trainer.fit(Net(), DataLoader(data, batch_size=16))
"""


def test_a_cpu_lightning_fit_with_the_callback_runs_settled() -> None:
    # A real fit: without the callback its first batch runs unsettled (importing torch freed blocks
    # of 1-2 MiB, no larger one); with it, the callback settled the allocator at fit start.
    assert _run(FIT.replace("sys.argv[-1]", '"none"')) == ["True"]
    assert _run(FIT.replace("sys.argv[-1]", '"ptp"')) == ["False"]
