"""The ptp command line end to end: tables parsed, JSON read, every bad input one line and exit 2."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch

from ptp_callback.cli import main
from ptp_callback.devices import known_devices
from ptp_callback.planning import ALL_PRECISIONS, PlanRequest, plan_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_predict_prints_one_row_per_precision_and_device(capsys):
    code, out, err = run(capsys, "predict", "cli_models:mlp", "--device", "h100", "a100-sxm-80gb", "t4",
                         "--precision", "all", "--steps", "1000", "--usd-per-gpu-hour", "2")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("h100 -> h100-sxm (NVIDIA H100 SXM5 80GB), the most common variant")
    assert lines[1].startswith("cli_models:mlp: 4.1M parameters, batch 64x1024, 64, 1000 steps, 1 GPU")
    assert lines[2].split() == ["precision", "device", "step", "run", "cost", "supported"]
    rows = [line.split(None, 5) for line in lines[3:-1]]
    assert len(rows) == len(ALL_PRECISIONS) * 3
    table = {(r[0], r[1]): r for r in rows}
    assert table[("bf16-mixed", "t4")][2:] == ["-", "-", "-", "no (no bf16 on t4)"]
    assert table[("32-true+tf32", "t4")][5] == "no (no tf32 on t4)"
    assert table[("16-mixed", "t4")][5] == "yes" and table[("bf16-mixed", "h100-sxm")][5] == "yes"
    assert all(r[4].startswith("$") for r in rows if r[5] == "yes")
    assert lines[-1].startswith("step: one optimizer step (AdamW)")
    code, out, _ = run(capsys, "predict", "cli_models:mlp", "--precision", "all", "64-true")
    assert code == 0 and len(out.splitlines()) - 4 == len(ALL_PRECISIONS) + 1  # all, and 64-true beside them


def test_predict_json_numbers_add_up(capsys):
    code, out, _ = run(capsys, "predict", "cli_models:mlp", "--device", "h100-sxm", "l4", "--precision",
                       "32-true", "bf16-mixed", "--steps", "5000", "--gpus", "4", "--usd-per-gpu-hour", "3.5",
                       "--json")
    assert code == 0
    data = json.loads(out)
    assert (data["steps"], data["gpus"], data["parameters"]) == (5000, 4, 1024 * 2048 + 2048 + 2048 * 1000 + 1000)
    assert len(data["rows"]) == 4
    for row in data["rows"]:
        assert row["supported"] and row["step_s"] > 0
        assert row["run_s"] == pytest.approx(5000 * row["step_s"])
        assert row["cost_usd"] == pytest.approx(row["run_s"] / 3600 * 4 * 3.5)  # 4 GPUs at $3.5 an hour


def test_prices_per_device(capsys):
    code, out, _ = run(capsys, "predict", "cli_models:mlp", "--device", "h100", "l4", "t4", "--steps", "1000",
                       "--precision", "16-mixed", "--usd-per-gpu-hour", "h100=3", "l4=0.8", "--json")
    rows = {row["device"]: row for row in json.loads(out)["rows"]}
    assert rows["h100-sxm"]["cost_usd"] == pytest.approx(rows["h100-sxm"]["run_s"] / 3600 * 3)
    assert rows["l4"]["cost_usd"] == pytest.approx(rows["l4"]["run_s"] / 3600 * 0.8)
    assert rows["t4"]["cost_usd"] is None  # no price given for it
    code, _, err = run(capsys, "predict", "cli_models:mlp", "--usd-per-gpu-hour", "h100=cheap")
    assert code == 2 and "--usd-per-gpu-hour h100=cheap: expected a price" in err


def test_plan_rows_counts_epochs_and_the_all_reduce_of_more_gpus():
    one = plan_rows(PlanRequest("cli_models:mlp", precisions=("bf16-mixed",), devices=("h100-sxm",),
                                epochs=2, samples=10_000))
    eight = plan_rows(PlanRequest("cli_models:mlp", precisions=("bf16-mixed",), devices=("h100-sxm",),
                                  epochs=2, samples=10_000, gpus=8))
    assert one.steps == 2 * math.ceil(10_000 / 64)  # 157 steps an epoch at 64 examples a step
    assert eight.steps == 2 * math.ceil(10_000 / (64 * 8))
    assert eight.rows[0].step_s > one.rows[0].step_s  # the gradient all-reduce across 8 GPUs
    assert one.notes == [] and one.rows[0].device == "h100-sxm"


def test_predict_from_a_hugging_face_config(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128)
    config.save_pretrained(tmp_path)
    code, out, err = run(capsys, "predict", str(tmp_path / "config.json"), "--batch-size", "4", "--seq-len", "64",
                         "--device", "l4", "--precision", "bf16-mixed", "16-mixed", "--steps", "100", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["batch"] == "batch input_ids 4x64, labels 4x64 (GPT2LMHeadModel)"
    assert data["parameters"] == sum(p.numel() for p in transformers.GPT2LMHeadModel(config).parameters())
    assert [r["precision"] for r in data["rows"]] == ["bf16-mixed", "16-mixed"]
    assert all(r["step_s"] > 0 for r in data["rows"])


def test_a_config_of_a_model_that_takes_no_token_ids_says_to_give_a_factory(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                                    architectures=["ViTForImageClassification"])
    config.save_pretrained(tmp_path)
    code, out, err = run(capsys, "predict", str(tmp_path / "config.json"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "ViTForImageClassification does not train on token ids and labels (its forward takes pixel_values" in err
    assert "give this model as a factory returning it and an example batch" in err


@pytest.mark.parametrize("argv, message", [
    (["predict", "cli_models:mlp", "--device", "h10"], "'h10' is not a known GPU; did you mean h100"),
    (["predict", "cli_models"], "'cli_models': expected module:factory"),
    (["predict", "no_such_module:make"], "cannot import no_such_module (ModuleNotFoundError"),
    (["predict", "cli_models:missing"], "cli_models has no function 'missing'"),
    (["predict", "cli_models:broken"], "the factory raised RuntimeError: this factory is broken"),
    (["predict", "missing/config.json"], "'missing/config.json': no such config file"),
    (["predict", "cli_models:frozen"], "the model has no trainable parameters"),
    (["predict", "cli_models:no_batch"], "returned a model without an example batch: return (model, batch)"),
    (["predict", "cli_models:mlp", "--seq-len", "128"], "--seq-len 128: cli_models:mlp returns its own batch"),
    (["predict", "cli_models:mlp", "--precision", "fp8"], "--precision fp8: expected 'all' or some of"),
    (["predict", "cli_models:mlp", "--epochs", "2"], "--epochs needs --samples"),
    (["predict", "cli_models:mlp", "--gpus", "0"], "--gpus 0: expected 1 or more"),
    (["probe", "--device", "h100"], "--device h100: ptp probe measures this machine: give cpu or cuda[:N], not a "
                                    "GPU name; to see h100-sxm's numbers run `ptp devices h100-sxm`"),
    (["predict", "cli_models:mlp", "--usd-per-gpu-hour", "a100=1.2"],
     "a100-sxm-80gb is not among the devices predicted (h100-sxm); add it to --device"),
    (["predict", "cli_models:mlp", "--usd-per-gpu-hour", "nan"], "--usd-per-gpu-hour nan: expected a price >= 0"),
    (["predict", "cli_models:CLASSES"], "'CLASSES' in cli_models is not a function (int)"),
], ids=["unknown-device", "no-colon", "no-module", "no-function", "factory-raises", "missing-config", "frozen",
        "no-batch", "seq-len", "precision", "epochs", "gpus", "probe-gpu-name", "price-of-another-device",
        "price-nan", "not-a-function"])
def test_bad_input_is_one_line_and_exit_status_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("ptp: error: ") and message in err


def test_probe_refuses_a_device_this_machine_lacks(capsys):
    missing = "cuda:99" if torch.cuda.is_available() else "cuda"
    code, _, err = run(capsys, "probe", "--device", missing)
    expected = "this machine has" if torch.cuda.is_available() else "this machine has no CUDA GPU"
    assert code == 2 and err.count("\n") == 1 and expected in err


def test_probe_replaces_the_cached_result_that_predictions_read(capsys, tmp_path, monkeypatch):
    from ptp_callback.probe import ProbeResult, _cache_path, probe_device

    monkeypatch.setenv("PTP_CACHE_DIR", str(tmp_path))
    path = _cache_path(torch.device("cpu"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Rates no machine beats, so the spot check keeps the cache.
    stale = ProbeResult("stale", torch.__version__, 1, {}, 1e6, 1.0, 1.0, 99.0)
    with open(path, "w") as f:
        json.dump(stale.__dict__, f)
    assert probe_device(torch.device("cpu")).device_name == "stale"  # predictions read the cache
    code, out, _ = run(capsys, "probe")
    assert code == 0 and "GEMM fp32" in out
    fresh = probe_device(torch.device("cpu"))
    assert fresh.device_name != "stale" and fresh.copy_gbps < 1e6 and fresh.gemm_tflops["fp32"]


def test_devices_prints_every_number_with_its_source(capsys):
    code, out, _ = run(capsys, "devices")
    assert code == 0
    table, sources = out.split("sources (", 1)
    for spec in known_devices():
        assert f"\n{spec.key} " in table and f"\n{spec.key}:\n" in sources
        assert all(source in sources for source in spec.sources)
    code, out, _ = run(capsys, "devices", "a100")
    assert out.startswith("a100 -> a100-sxm-80gb") and "a100-sxm-40gb " not in out.split("sources", 1)[0]


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == "ptp-callback 0.1.0"


def test_the_installed_command(tmp_path):
    # The script installed for the Python running the tests first: another interpreter's may be
    # earlier on the PATH (a GPU image's system Python, say) and lack torch.
    command = os.path.join(os.path.dirname(sys.executable), "ptp")
    if not os.path.exists(command):
        command = shutil.which("ptp") or command
    if not os.path.exists(command):
        pytest.skip("the ptp console script is not installed (pip install -e .)")
    models = os.path.join(ROOT, "tests", "cli_models.py")
    done = subprocess.run([command, "predict", f"{models}:mlp", "--device", "h100-sxm", "--steps", "10", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"][0]["device"] == "h100-sxm"
    bad = subprocess.run([command, "predict", "nope"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("ptp: error: 'nope'")


def test_python_dash_m_runs_the_command_line():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "ptp_callback", "devices", "h100"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "H100" in done.stdout
