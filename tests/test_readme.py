"""The README and docs: their examples run or compile, their links resolve, their commands are CI's."""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = [README] + [os.path.join(ROOT, "docs", name)
                   for name in ("api.md", "cli.md", "accuracy.md", "cost-model.md", "run-forecast.md")]


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def python_blocks(path: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", read(path), flags=re.S)


def test_the_api_examples_run_as_written():
    from ptp_callback import devices

    blocks = python_blocks(os.path.join(ROOT, "docs", "api.md"))
    assert len(blocks) == 2
    namespace: dict = {}
    try:
        for block in blocks:
            exec(compile(block, "docs/api.md", "exec"), namespace)  # noqa: S102 - our own documentation
        assert namespace["pred"].step_s > 0
        assert devices.get_device("My GPU").key == "my-gpu"
    finally:
        if any(d.key == "my-gpu" for d in devices.known_devices()):
            devices.unregister_device("my-gpu")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_python_snippet_compiles(path):
    for block in python_blocks(path):
        compile(block, path, "exec")  # the quickstarts use your model and data; the examples/ run them


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_links_resolve_inside_the_repository(path):
    base = os.path.dirname(path)
    for target in re.findall(r"\]\(([^)#]+)\)", read(path)):
        assert not target.startswith(("/", "..")) or target.startswith("http"), target
        if target.startswith("http"):
            continue
        relative = os.path.relpath(os.path.normpath(os.path.join(base, target)), ROOT)
        assert os.path.exists(os.path.join(ROOT, relative)), target


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_docs_point_at_nothing_outside_the_repository(path):
    text = read(path)
    assert "../" not in text and "/work/" not in text and "shared/" not in text


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_no_figure_left_to_fill_in(path):
    text = read(path)
    for placeholder in ("TABLE\n", "Figures to come", "TODO", "TBD"):
        assert placeholder not in text, placeholder


def test_the_two_fresh_machine_commands_and_ci():
    text = read(README)
    first_screen = text.split("## Quickstart")[0]
    assert "pip install -e . && python examples/lightning_quickstart.py" in first_screen
    assert 'pip install -e ".[test]" && python -m pytest -q' in first_screen
    assert 'pip install -e ".[test]" && python -m pytest -q' in read(os.path.join(ROOT, ".ci", "run"))
    for example in re.findall(r"`(examples/\w+\.py)`", text):
        assert os.path.exists(os.path.join(ROOT, example)), example
    for heading in ("### Lightning", "### Accelerate", "### Plain PyTorch", "### Hugging Face", "### Command line"):
        assert heading in text
