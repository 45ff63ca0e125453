"""ptp.track in plain PyTorch loops: events on virtual time, real loops, the bar, errors."""

from __future__ import annotations

import io
import os
import re
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

import ptp_callback as ptp
from ptp_callback.devices import UnknownDeviceError
from ptp_callback.notices import PtpWarning
from ptp_callback.tracker import LoopShape, RunTracker

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

CLOCK = re.compile(r"eta=\d{2}:\d{2}")


class Clock:
    """Virtual seconds: the test moves time, the tracker reads it."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def virtual_tracker(clock: Clock, **shape: object) -> RunTracker:
    settings = dict(batches_per_epoch=10, epochs=2, eval_every="epoch", eval_batches=4, save_every="epoch")
    settings.update(shape)
    loop = LoopShape(**settings)
    schedule, saves = loop.schedule()
    tracker = RunTracker(schedule, saves=saves, shape=loop, bar=False, verbose=False, clock=clock)
    tracker.start()
    return tracker


def test_iterate_and_phases_become_forecaster_events_on_virtual_time():
    clock = Clock()
    tracker = virtual_tracker(clock)
    remaining_after_first_epoch = None
    for epoch in range(2):
        for _ in tracker.iterate(range(10)):
            clock.t += 1.0  # each batch: 1 s
        with tracker.phase("eval"):
            clock.t += 3.0
        with tracker.phase("save"):
            clock.t += 2.0
        if epoch == 0:
            remaining_after_first_epoch = tracker.remaining_s()
    # measured: 10 batches x 1 s + one evaluation (3 s) + one save (2 s) are left; epoch starts took 0 s
    assert remaining_after_first_epoch == pytest.approx(10 * 1.0 + 3.0 + 2.0)
    tracker.close()
    parts = tracker.forecaster.parts(clock.t)
    assert (parts["train"].count, parts["val"].count, parts["save"].count, parts["epoch"].count) == (20, 2, 2, 2)
    assert parts["train"].spent_s + parts["warmup"].spent_s == pytest.approx(20.0)
    assert (parts["val"].spent_s, parts["save"].spent_s) == (pytest.approx(6.0), pytest.approx(4.0))
    assert tracker.remaining_s() == 0.0


def test_an_evaluation_inside_the_loop_body_follows_its_batch():
    clock = Clock()
    tracker = virtual_tracker(clock, epochs=1, eval_every=5, save_every=None)
    assert tracker.forecaster.schedule.val_after_batches == (5, 10)
    for i, _ in enumerate(tracker.iterate(range(10))):
        clock.t += 1.0
        if i in (4, 9):  # after the 5th and the 10th optimizer step
            with tracker.phase("eval"):
                clock.t += 2.0
    tracker.close()
    parts = tracker.forecaster.parts(clock.t)
    assert (parts["train"].count, parts["val"].count) == (10, 2)
    assert parts["val"].spent_s == pytest.approx(4.0)


def test_leaving_the_loop_early_ends_the_epoch_there():
    clock = Clock()
    tracker = virtual_tracker(clock, epochs=1, eval_every=None, save_every=None)
    for i, _ in enumerate(tracker.iterate(range(10))):
        clock.t += 1.0
        if i == 4:
            break
    assert tracker.forecaster.position == 5 and tracker._in_epoch is None
    assert tracker.forecaster._last == "epoch_end"


def test_a_loop_longer_than_it_said_gets_one_warning():
    clock = Clock()
    tracker = virtual_tracker(clock, epochs=1, eval_every=None, save_every=None)
    with pytest.warns(PtpWarning, match=r"the loop goes on past the 10 batches the tracker was told of"):
        for _ in range(2):
            for _ in tracker.iterate(range(10)):
                clock.t += 1.0
    assert tracker.forecaster.position == 20 and tracker.active


def test_a_loader_without_length_gets_the_whole_run_laid_out_when_its_first_epoch_ends():
    def run(batches_per_epoch: int | None) -> tuple[RunTracker, list[float | None]]:
        clock = Clock()
        tracker = virtual_tracker(clock, batches_per_epoch=batches_per_epoch, epochs=3, eval_batches=2)
        left = []
        for _ in range(3):
            for _ in tracker.iterate(iter(range(10))):
                clock.t += 1.0
                left.append(tracker.remaining_s())
            with tracker.phase("eval"):
                clock.t += 3.0
            with tracker.phase("save"):
                clock.t += 2.0
        tracker.close()
        return tracker, left

    with warnings.catch_warnings():
        warnings.simplefilter("error", PtpWarning)  # evaluations and saves were announced: no warning
        unsized, left = run(None)
    _, told = run(10)
    schedule = unsized.forecaster.schedule
    assert (schedule.total_batches, schedule.val_after_batches, unsized.forecaster.saves) == (30, (10, 20, 30),
                                                                                            (10, 20, 30))
    assert unsized.shape.batches_per_epoch == 10
    assert all(x is None for x in left[:10])  # the first epoch's length is unknown until it ends
    assert left[10:] == told[10:]  # then the ETA is the one of a loop that said its length
    assert left[10] == pytest.approx(told[10]) and told[10] > 19 + 2 * 3.0 + 2 * 2.0  # 19 batches, 2 evals, 2 saves


def test_a_plain_loop_over_an_iterable_dataset_gets_an_eta_from_its_second_epoch_on():
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            generator = torch.Generator().manual_seed(0)
            for _ in range(48):
                yield torch.randn(16, generator=generator), torch.randint(0, 4, (), generator=generator)

    model, _ = model_and_loader()
    loader = DataLoader(Stream(), batch_size=8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    tracker = ptp.track(model, optimizer, loader, step, epochs=3, advise=False, bar=False, verbose=False)
    assert tracker.prediction is not None and tracker.forecaster.schedule.total_batches is None
    shown = train_and_read_the_eta(tracker, model, optimizer, loader, epochs=3)
    assert re.match(r"predicted run of unknown length at 32-true on .*: train [\d.]+[mu]s a batch", tracker.plan_text)
    tracker.close()
    assert tracker.forecaster.schedule.total_batches == 18 and tracker.forecaster.position == 18
    # From the second epoch on there is an ETA. (Its size is a few ms of sub-millisecond batches: on
    # a loaded machine the first one can come out below the last, so no order is asserted.)
    assert shown[5] is None and all(x is not None and x >= 0.0 for x in shown[6:])


def test_a_one_shot_iterator_is_never_read_for_the_prediction():
    model, loader = model_and_loader()
    batches = (b for b in loader)
    with pytest.warns(PtpWarning, match=r"could not build an example batch \(ValueError: the loader is a one-shot "
                                        r"iterator \(generator\)"):
        tracker = ptp.track(model, None, batches, step, epochs=1, bar=False, verbose=False)
    assert len(list(tracker.iterate(batches))) == len(loader)  # not one batch missing
    tracker.close()
    assert tracker.forecaster.schedule.total_batches == len(loader)


def test_a_loop_that_pulls_its_own_batches_from_a_loader_without_length_is_told_to_give_max_steps():
    clock = Clock()
    tracker = virtual_tracker(clock, batches_per_epoch=None, epochs=2, eval_every=None, save_every=None)
    with pytest.warns(PtpWarning, match=r"the run's length is unknown .* pass max_steps="):
        for _ in range(3):
            clock.t += 1.0
            tracker.step()
    assert tracker.remaining_s() is None and tracker.active


def test_step_counts_optimizer_steps_when_the_loop_pulls_its_own_batches():
    clock = Clock()
    tracker = virtual_tracker(clock, batches_per_epoch=12, accumulate=3, epochs=2, eval_every=None, save_every=None)
    for _ in range(8):  # 12 / 3 = 4 steps an epoch
        clock.t += 3.0
        tracker.step()
    tracker.close()
    schedule = tracker.forecaster.schedule
    assert tracker.unit == "step" and (schedule.total_batches, schedule.accumulate) == (8, 1)
    assert tracker.forecaster.position == 8
    assert tracker.forecaster.parts(clock.t)["train"].count == 8


def test_a_loop_that_reports_steps_is_reported_in_steps():
    clock = Clock()
    tracker = virtual_tracker(clock, batches_per_epoch=12, accumulate=3, epochs=2, eval_every=None, save_every=None)
    for _ in range(5):
        clock.t += 3.0
        tracker.step()
    tracker.close()  # 5 of its 8 steps
    assert tracker.summary.startswith("run stopped early after 5 of 8 training steps")


def test_a_plain_loop_shows_the_eta_and_reports_its_parts(tmp_path, capfd):
    import plain_loop

    tracker = plain_loop.main(epochs=2, device="h100-sxm", advise=False, checkpoint_dir=str(tmp_path), samples=1024)
    err = capfd.readouterr().err
    schedule = tracker.forecaster.schedule
    assert (schedule.total_batches, schedule.val_after_batches, tracker.forecaster.saves) == (32, (16, 32), (16, 32))
    assert "ptp: h100 -> h100-sxm" not in err  # an exact key: no note
    assert "ptp: predicted run " in err and "at 32-true on NVIDIA H100 SXM5 80GB" in err and "(32 batches)" in err
    assert CLOCK.search(err) and "32-true]" in err  # the bar: [elapsed, eta=MM:SS 32-true]
    summary = next(line for line in err.splitlines() if "ptp: run took" in line)
    assert "validation" in summary and "checkpoints" in summary
    # The H100's prediction is stated, not set against this CPU's time as an error.
    assert "here; predicted before step one for NVIDIA H100 SXM5 80GB:" in summary
    assert "%)" not in summary.split(":")[2]
    assert tracker.forecaster.position == 32 and tracker.closed
    # what a report reads off the tracker, as off the Lightning callback
    assert tracker.predicted_fit_s == tracker.forecaster.before_step_one_s > 0
    assert tracker.fit_prediction is tracker.forecaster.initial_parts and tracker.plan is tracker.prediction.plan
    assert tracker.calibrated_total_s > 0 and tracker.step_prediction.step_s > 0


def test_a_plain_loop_predicted_for_this_cpu(tmp_path):
    import plain_loop

    tracker = plain_loop.main(epochs=1, advise=False, bar=False, checkpoint_dir=str(tmp_path), samples=512)
    assert tracker.prediction is not None and tracker.prediction.device.arch == "cpu"
    assert tracker.forecaster.before_step_one_s > 0 and tracker.summary.startswith("run took")


def test_the_postfix_helper_puts_the_eta_in_your_own_bar():
    clock = Clock()
    tracker = virtual_tracker(clock, eval_every=None, save_every=None)
    tracker.precision_label = "bf16-mixed"
    stream = io.StringIO()
    bar = tqdm(total=20, file=stream, mininterval=0)
    shown = []
    for _ in range(2):
        for _ in tracker.iterate(range(10)):
            clock.t += 0.5
            bar.set_postfix(loss=1.25, **tracker.postfix())
            bar.update(1)
            shown.append(str(bar))
    bar.close()
    tracker.close()
    # in batch 11 (10 measured at 0.5 s; this one 0.5 s in): 9.5 batches' worth left -> 00:05 after rounding
    assert "eta=00:05 bf16-mixed" in shown[10] and "loss=1.25" in shown[10]
    assert "eta=00:05 bf16-mixed" in stream.getvalue()


def model_and_loader():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,))), batch_size=8)
    return model, loader


def step(model, batch):
    return F.cross_entropy(model(batch[0]), batch[1])


def test_a_model_with_bf16_weights_and_no_precision_given_trains_at_bf16_true():
    model, loader = model_and_loader()
    tracker = ptp.track(model.to(torch.bfloat16), None, loader, step, epochs=1, bar=False, verbose=False,
                        advise=False)
    assert tracker.precision_label == "bf16-true"
    tracker.close()


def train_and_read_the_eta(tracker, model, optimizer, loader, epochs):
    """A plain loop through ``tracker.iterate``; the tracker's remaining seconds in every batch."""
    remaining = []
    for _ in range(epochs):
        for batch in tracker.iterate(loader):
            step(model, batch).backward()
            optimizer.step()
            optimizer.zero_grad()
            remaining.append(tracker.remaining_s())
    return remaining


@pytest.mark.parametrize("call, message", [
    (lambda m, o, d: ptp.track(m, "adamw", d, step, epochs=1),
     "ptp.track(optimizer='adamw'): pass the optimizer object"),
    (lambda m, o, d: ptp.track(m.requires_grad_(False), o, d, step, epochs=1),
     "ptp.track(model=...): the model has no trainable parameters"),
    (lambda m, o, d: ptp.track(m, o, d, step), "pass epochs=... or max_steps=..."),
    (lambda m, o, d: ptp.track(m, o, d, step, epochs=1, eval_every=0), "eval_every=0: expected a number of"),
    (lambda m, o, d: ptp.track(m, o, d, step, epochs=1, advise="yes"), "ptp.track(advise='yes'): expected True, False"),
    (lambda m, o, d: ptp.track(m, o, d, step, epochs=1, refresh_s=-1.0),
     "ptp.track(refresh_s=-1.0): expected a number of seconds >= 0"),
    (lambda m, o, d: ptp.track(m, o, d, step, epochs=1, accumulate=0), "accumulate=0: expected an integer"),
    (lambda m, o, d: ptp.track(m, o, d, step, epochs=1, precision="fp8"), "ptp.track(precision='fp8'): expected one"),
    (lambda m, o, d: ptp.track(m, o, d, step, epochs=1, warmup_batches=1.5),
     "ptp.track(warmup_batches=1.5): expected an integer >= 0"),
    (lambda m, o, d: ptp.track(m, o, d, step, epochs=1, clock=5), "ptp.track(clock=5): expected a function"),
    (lambda m, o, d: ptp.track(m, o, d, "loss", epochs=1), "ptp.track(step_fn='loss'): expected a function"),
    (lambda m, o, d: ptp.track(m, o, d, step, epochs=1, accelerator="yes"),
     "accelerator='yes': expected an accelerate.Accelerator"),
    (lambda m, o, d: ptp.track(m, o, d, step, epochs=1, bar="no"), "ptp.track(bar='no'): expected True or False"),
], ids=["optimizer-string", "frozen", "no-length", "eval-every", "advise", "refresh", "accumulate",
        "precision", "warmup", "clock", "step-fn", "accelerator", "flag"])
def test_bad_arguments_fail_at_once_in_one_line(call, message):
    model, loader = model_and_loader()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError) as info:
        call(model, optimizer, loader)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_an_unknown_device_gets_a_did_you_mean():
    model, loader = model_and_loader()
    with pytest.raises(UnknownDeviceError, match=r"'h10' is not a known GPU; did you mean h100"):
        ptp.track(model, None, loader, step, epochs=1, device="h10")


def test_phase_names_are_checked():
    tracker = virtual_tracker(Clock())
    with pytest.raises(ValueError, match=r"tracker.phase\('evaluate'\): expected 'eval' or 'save'"):
        with tracker.phase("evaluate"):
            pass


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(16, 4)

    def forward(self, x):
        h = self.net(x)
        return h + h.new_zeros(int((h > 0).sum())).sum()  # a size its values decide: cannot run on fake tensors


def test_an_untraceable_model_trains_on_with_one_warning_and_a_measured_eta(capfd):
    model = DataDependent()
    _, loader = model_and_loader()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracker = ptp.track(model, optimizer, loader, step, epochs=3, device="h100-sxm", bar=False)
        remaining = train_and_read_the_eta(tracker, model, optimizer, loader, epochs=3)
        tracker.close()
    ours = [w for w in caught if issubclass(w.category, PtpWarning)]
    assert len(ours) == 1 and "could not predict the run (TraceError" in str(ours[0].message)
    assert ours[0].filename == __file__  # attributed to the caller's line
    assert remaining[0] is None and remaining[-2] is not None  # measured once batches were timed
    err = capfd.readouterr().err
    assert "Traceback" not in err and "fake" not in err.lower()
    assert tracker.summary.startswith("run took") and "predicted before step one" not in tracker.summary


def test_only_the_local_main_process_predicts_shows_and_prints(monkeypatch, capfd):
    monkeypatch.setenv("LOCAL_RANK", "1")
    model, loader = model_and_loader()
    tracker = ptp.track(model, None, loader, step, epochs=1, device="h100-sxm")
    for batch in tracker.iterate(loader):
        step(model, batch).backward()
    tracker.close()
    assert tracker.prediction is None and tracker._bar is None
    assert capfd.readouterr().err == ""
    assert tracker.forecaster.position == len(loader)


def test_state_dict_resumes_position_and_calibration():
    clock = Clock()
    first = virtual_tracker(clock, eval_every=None, save_every=None)
    for i, _ in enumerate(first.iterate(range(10))):
        clock.t += 1.0
    for i, _ in enumerate(first.iterate(range(10))):
        clock.t += 1.0
        if i == 3:
            state = first.state_dict()
            break
    assert (state["position"], state["epochs_done"], state["batch_in_epoch"]) == (14, 1, 4)
    second = virtual_tracker(clock, eval_every=None, save_every=None)
    second.load_state_dict(state)
    schedule = second.forecaster.schedule
    assert (schedule.start_batch, schedule.start_epoch, schedule.start_batch_in_epoch) == (14, 1, 4)
    assert schedule.epoch_starts == (14,)
    # 6 batches left at the measured 1 s, nothing measured in this run yet
    assert second.remaining_s() == pytest.approx(6.0)
    assert second.forecaster.elapsed_before_s == pytest.approx(14.0)


def test_a_loop_that_reports_steps_resumes_where_its_steps_lead():
    clock = Clock()
    # 10 micro-batches an epoch, a step every 2: 5 steps an epoch, 10 in all, an evaluation every 4
    first = virtual_tracker(clock, accumulate=2, eval_every=4, save_every=None)
    for _ in range(8):
        clock.t += 1.0
        first.step()
    state = first.state_dict()
    second = virtual_tracker(clock, accumulate=2, eval_every=4, save_every=None)
    second.load_state_dict(state)
    schedule = second.forecaster.schedule
    # step 8 is the third step of the second epoch: 2 steps left, no evaluation among them
    assert (schedule.start_batch, schedule.start_epoch, schedule.start_batch_in_epoch) == (8, 1, 3)
    assert (schedule.total_batches, schedule.val_after_batches) == (10, ())


def test_a_state_saved_after_leaving_an_epoch_early_resumes_inside_it():
    clock = Clock()
    first = virtual_tracker(clock, eval_every=None, save_every=None)
    for i, _ in enumerate(first.iterate(range(10))):
        clock.t += 1.0
        if i == 3:
            break  # a time budget ran out: the loop leaves, then the checkpoint is written
    state = first.state_dict()
    assert (state["position"], state["epochs_done"], state["batch_in_epoch"]) == (4, 0, 4)
    second = virtual_tracker(clock, eval_every=None, save_every=None)
    second.load_state_dict(state)
    schedule = second.forecaster.schedule
    assert (schedule.start_batch, schedule.start_epoch, schedule.start_batch_in_epoch) == (4, 0, 4)
    # Another epoch after the early exit counts the one left as done.
    for _ in first.iterate(range(10)):
        clock.t += 1.0
    assert (first.state_dict()["epochs_done"], first.state_dict()["batch_in_epoch"]) == (2, 0)


def test_an_exception_that_leaves_the_run_is_named_in_its_report_and_raised_unchanged():
    clock = Clock()
    error = RuntimeError("out of memory")
    with pytest.raises(RuntimeError) as raised:
        with virtual_tracker(clock, eval_every=None, save_every=None) as tracker:
            for i, _ in enumerate(tracker.iterate(range(10))):
                clock.t += 1.0
                if i == 6:
                    raise error
    assert raised.value is error and raised.value.__context__ is None
    assert tracker.summary.startswith("run stopped by RuntimeError after 7 of 20 training batches")


def test_advice_as_a_warning():
    from ptp_callback.notices import PrecisionAdvice
    from ptp_callback.precision import PrecisionSpec
    from ptp_callback.tracker import TraceInputs

    with torch.device("meta"):  # a compute-bound step on an H100 (nothing is allocated)
        model = nn.Sequential(nn.Linear(8192, 8192), nn.GELU(), nn.Linear(8192, 8192))
    batch = (torch.empty(8192, 8192, device="meta"),)
    clock = Clock()
    tracker = virtual_tracker(clock, batches_per_epoch=100_000, epochs=1, eval_every=None, save_every=None)
    tracker.advise, tracker.advice_as_warning, tracker.precision_label = "auto", True, "32-true"
    with pytest.warns(PrecisionAdvice, match=r"ptp: 32-true -> (bf16|16)-mixed would cut this fit from "):
        tracker.predict(TraceInputs(model, batch, lambda m, b: m(*b).float().pow(2).mean(), None,
                                    PrecisionSpec.from_setting("32-true", matmul_tf32=False), "h100-sxm",
                                    torch.device("cpu")))
    assert tracker.advice_text and tracker.advise is False  # given at the start: cheap beside a long run


@pytest.mark.parametrize("device", ["cpu", "h100-sxm"])
def test_a_plan_of_several_processes_on_a_cpu_says_their_communication_is_not_in_it(device):
    from ptp_callback.precision import PrecisionSpec
    from ptp_callback.tracker import TraceInputs

    model = nn.Linear(16, 4)
    tracker = virtual_tracker(Clock(), batches_per_epoch=10, epochs=1, eval_every=None, save_every=None)
    tracker.advise = False
    tracker.predict(TraceInputs(model, (torch.randn(8, 16),), lambda m, b: m(*b).sum(), None,
                                PrecisionSpec.from_setting("32-true"), device, torch.device("cpu")), world_size=2)
    tracker.begin_training()
    # gloo between a CPU's processes is not predicted; a GPU's all-reduce is (and the plan says nothing)
    assert ("the 2 processes' communication on a CPU is not in it" in tracker.plan_text) == (device == "cpu")


def test_a_loop_that_unfreezes_its_backbone_gets_the_batches_priced_again_from_that_epoch():
    backbone = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
    model = nn.Sequential(backbone, nn.Linear(256, 4))
    backbone.requires_grad_(False)
    loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,))), batch_size=8)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    tracker = ptp.track(model, optimizer, loader, step, epochs=3, advise=False, bar=False, verbose=False)
    factors = []
    for epoch in range(3):
        if epoch == 1:  # the backbone joins the training, as fine-tuning recipes do
            backbone.requires_grad_(True)
            optimizer.add_param_group({"params": list(backbone.parameters()), "lr": 1e-4})
        for batch in tracker.iterate(loader):
            step(model, batch).backward()
            optimizer.step()
            optimizer.zero_grad()
        factors.append(tracker._watch.factor)
    tracker.close()
    # the step traced again at the epoch it changed in, not before, and once
    assert factors[0] == 1.0 and factors[1] > 1.2 and factors[2] == factors[1]
    assert tracker.forecaster.batches.changed_at is not None


def test_a_backbone_unfrozen_inside_an_epoch_is_found_when_the_eta_is_next_recomputed():
    clock = Clock()
    backbone = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
    model = nn.Sequential(backbone, nn.Linear(256, 4))
    backbone.requires_grad_(False)
    loader = DataLoader(TensorDataset(torch.randn(80, 16), torch.randint(0, 4, (80,))), batch_size=8)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    tracker = ptp.track(model, optimizer, loader, step, epochs=3, advise=False, bar=False, verbose=False, clock=clock)
    factors = []
    for epoch in range(3):
        for i, batch in enumerate(tracker.iterate(loader)):
            if epoch == 1 and i == 5:  # a step-based schedule: the backbone joins mid-epoch
                backbone.requires_grad_(True)
                optimizer.add_param_group({"params": list(backbone.parameters()), "lr": 1e-4})
            clock.t += 1.0  # (virtual seconds: the ETA is recomputed after each batch)
            factors.append(tracker._watch.factor)  # as the end of the batch before left it
    tracker.close()
    # found at that batch's end, not at the next epoch's start, where it would count the batches
    # measured at the new cost as measured at the old one
    assert set(factors[:16]) == {1.0} and factors[16] > 1.2 and set(factors[16:]) == {factors[16]}
