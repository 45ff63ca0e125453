"""The README's Python examples run as written."""

from __future__ import annotations

import os
import re

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def python_blocks() -> list[str]:
    with open(README) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_predict_step_and_register_device_examples_run():
    from ptp_callback import devices

    blocks = [b for b in python_blocks() if "trainer.fit(model, train_loader" not in b]  # needs user data
    assert len(blocks) >= 2
    namespace: dict = {}
    try:
        for block in blocks:
            exec(compile(block, README, "exec"), namespace)  # noqa: S102 - our own documentation
        assert namespace["pred"].step_s > 0
        assert devices.get_device("My GPU").key == "my-gpu"
    finally:
        if any(d.key == "my-gpu" for d in devices.known_devices()):
            devices.unregister_device("my-gpu")
