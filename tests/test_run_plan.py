"""The plan of a fit from its steps, its host and its loaders, with the arithmetic beside each number."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ptp_callback.host_costs import H100_HOST, HostCosts
from ptp_callback.run_plan import GPU_WARMUP_SANITY_S, GPU_WARMUP_TRAIN_S, LoaderFacts, StepCosts, plan_run

HOST = HostCosts(loop_s=0.004, val_loop_s=0.003, loader_start_s=0.5, input_bytes_per_s=5e9, copy_bytes_per_s=0.5e9,
                 write_bytes_per_s=2e9, save_fixed_s=0.05, remove_bytes_per_s=4e9, end_s=0.25)


def test_a_gpu_plan_adds_the_loop_the_input_copy_and_the_loaders():
    loader = LoaderFacts(num_workers=4, load_s=0.2, batch_bytes=100_000_000)
    plan = plan_run(StepCosts(0.100, optimizer_s=0.010), StepCosts(0.030), HOST, on_gpu=True, autocast=True,
                    train_loader=loader, val_loader=loader, sanity_batches=2, checkpoint_bytes=1e9,
                    saves_replace_previous=True, state_bytes_to_cpu_at_end=2e8)
    # batch: 0.090 compute + 0.004 loop + 100 MB / 5 GB/s = 0.020 copy; 4 workers hide 0.2 s / 4 < 0.09 s
    assert plan.train_batch_s == pytest.approx(0.090 + 0.004 + 0.020)
    assert plan.optimizer_step_s == pytest.approx(0.010)
    # a validation batch: 0.030 + 0.003 loop + 0.020 copy, and its 4 workers fall short: 0.2 / 4 - 0.030
    assert plan.val_batch_s == pytest.approx(0.030 + 0.003 + 0.020 + 0.020)
    # a loader's start: its workers (0.5 s), then one of them builds the first batch (0.2 s)
    assert plan.val_run_s == pytest.approx(0.7) and plan.epoch_s == pytest.approx(0.7)
    assert plan.first_epoch_s is None  # this loop starts its first epoch's loader like the others
    # a save: 0.05 + 1 GB / 0.5 GB/s copy + 1 GB / 2 GB/s write = 2.55 s; later ones delete 1 GB at 4 GB/s
    assert plan.first_save_s == pytest.approx(2.55) and plan.save_s == pytest.approx(2.80)
    assert plan.sanity_warmup_s == pytest.approx(GPU_WARMUP_SANITY_S[0] + GPU_WARMUP_SANITY_S[1])
    assert plan.sanity_s == pytest.approx(0.7 + 2 * 0.073 + plan.sanity_warmup_s)
    assert plan.warmup_s == pytest.approx(GPU_WARMUP_TRAIN_S[0] + GPU_WARMUP_TRAIN_S[1])
    assert plan.end_s == pytest.approx(0.25 + 2e8 / 0.5e9)  # Lightning moves the model back to the CPU
    assert plan.warmup_per_sanity_excess > 0 and not plan.sanity_calibrates


def test_a_loops_work_per_optimizer_step_is_paid_once_a_step_not_once_a_batch():
    host = replace(HOST, step_loop_s=0.002)  # the framework's optimizer hooks, zero_grad, scheduler
    plan = plan_run(StepCosts(0.100, optimizer_s=0.010), None, host, on_gpu=False, autocast=False)
    assert plan.train_batch_s == pytest.approx(0.090 + 0.004)
    assert plan.optimizer_step_s == pytest.approx(0.010 + 0.002)


def test_a_pinned_loaders_batches_copy_at_the_pinned_rate_and_a_pageable_ones_at_the_other():
    host = replace(HOST, pinned_input_bytes_per_s=25e9)
    pinned = LoaderFacts(num_workers=4, batch_bytes=100_000_000, pin_memory=True)
    pageable = replace(pinned, pin_memory=False)
    plan = plan_run(StepCosts(0.100), StepCosts(0.030), host, on_gpu=True, autocast=False,
                    train_loader=pinned, val_loader=pageable)
    assert plan.train_batch_s == pytest.approx(0.100 + 0.004 + 0.004)  # 100 MB at 25 GB/s
    assert plan.val_batch_s == pytest.approx(0.030 + 0.003 + 0.020)  # 100 MB at 5 GB/s
    # A host without a pinned rate of its own copies pinned batches at the pageable rate.
    assert plan_run(StepCosts(0.100), None, HOST, on_gpu=True, autocast=False,
                    train_loader=pinned).train_batch_s == pytest.approx(0.100 + 0.004 + 0.020)


def test_without_workers_the_loop_waits_for_every_batch():
    plan = plan_run(StepCosts(0.1), None, HOST, on_gpu=False, train_loader=LoaderFacts(num_workers=0, load_s=0.03),
                    sanity_calibrates=True)
    assert plan.train_batch_s == pytest.approx(0.1 + 0.004 + 0.03)
    assert plan.epoch_s == 0.0 and plan.val_run_s == 0.0  # no workers to start
    assert plan.sanity_calibrates and plan.warmup_s == 0.0 and plan.warmup_per_sanity_excess == 0.0


def test_workers_slower_than_the_step_make_it_wait():
    plan = plan_run(StepCosts(0.05), None, HOST, on_gpu=False, train_loader=LoaderFacts(num_workers=2, load_s=0.3))
    assert plan.train_batch_s == pytest.approx(0.05 + 0.004 + (0.3 / 2 - 0.05))


def test_on_a_cpu_workers_hide_only_what_the_cores_the_step_leaves_idle_can_hold():
    loader = LoaderFacts(num_workers=2, load_s=0.03)
    # Every core runs the step: the workers' 30 ms a batch take them from it, as loading in the loop would.
    busy = plan_run(StepCosts(0.1), None, HOST, on_gpu=False, train_loader=loader, spare_cores=0)
    assert busy.train_batch_s == pytest.approx(0.1 + 0.004 + 0.03)
    # One idle core holds 100 ms of their work a batch: nothing is left to wait for.
    spare = plan_run(StepCosts(0.1), None, HOST, on_gpu=False, train_loader=loader, spare_cores=1)
    assert spare.train_batch_s == pytest.approx(0.1 + 0.004)
    # Half of the work fits on the idle core beside a 15 ms step.
    short = plan_run(StepCosts(0.015), None, HOST, on_gpu=False, train_loader=loader, spare_cores=1)
    assert short.train_batch_s == pytest.approx(0.015 + 0.004 + 0.015)


def test_on_a_cpu_what_the_workers_batches_were_measured_to_cost_the_step_stands():
    # A 2-core VM: 0.6 ms to build a batch, 4 ms what 2 workers' batches cost the step.
    loader = LoaderFacts(num_workers=2, load_s=0.0006, worker_batch_s=0.004)
    plan = plan_run(StepCosts(0.013), None, HOST, on_gpu=False, train_loader=loader, spare_cores=0)
    assert plan.train_batch_s == pytest.approx(0.013 + 0.004 + 0.004)
    # Workers slower than the step still make it wait for them.
    slow = replace(loader, load_s=0.1)
    assert plan_run(StepCosts(0.013), None, HOST, on_gpu=False, train_loader=slow,
                    spare_cores=0).train_batch_s == pytest.approx(0.013 + 0.004 + (0.1 / 2 - 0.013))
    # A GPU step leaves the cores to the workers: nothing measured there applies.
    gpu = plan_run(StepCosts(0.013), None, HOST, on_gpu=True, train_loader=loader)
    assert gpu.train_batch_s == pytest.approx(0.013 + 0.004)


def test_persistent_workers_start_once_and_a_started_loader_costs_its_first_epoch_nothing():
    persistent = plan_run(StepCosts(0.1), None, HOST, on_gpu=True,
                          train_loader=LoaderFacts(num_workers=4, persistent_workers=True))
    assert persistent.epoch_s == 0.0 and persistent.first_epoch_s == pytest.approx(0.5)
    started = plan_run(StepCosts(0.1), None, HOST, on_gpu=True, train_loader=LoaderFacts(num_workers=4),
                       loader_started_before_first_epoch=True)
    assert started.first_epoch_s == 0.0 and started.epoch_s == pytest.approx(0.5)


def test_a_validation_loaders_persistent_workers_start_with_the_sanity_check_only():
    # seen on an H100 (2026-11-27): a GRU fit's 5-batch validation runs took 0.17 s, 0.14 s of it batches
    loader = LoaderFacts(num_workers=4, persistent_workers=True)
    plan = plan_run(StepCosts(0.1), StepCosts(0.03), HOST, on_gpu=True, train_loader=loader, val_loader=loader,
                    sanity_batches=2)
    assert plan.val_run_s == 0.0 and plan.val_workers_persist
    assert plan.sanity_s == pytest.approx(0.5 + 2 * plan.val_batch_s + plan.sanity_warmup_s)  # they start here
    fresh = plan_run(StepCosts(0.1), StepCosts(0.03), HOST, on_gpu=True, train_loader=loader,
                     val_loader=replace(loader, persistent_workers=False), sanity_batches=2)
    assert fresh.val_run_s == pytest.approx(0.5) and not fresh.val_workers_persist


def test_a_cpu_step_copies_its_memory_once_after_each_epochs_new_forked_workers():
    """A forked worker maps the training process's pages until it exits, so the first step of each
    epoch copies every page it writes: a 4-layer GPT-2 on a 2-thread Xeon VM took 1.1 s for the
    first batch of epochs 2 and 3 against 0.17 for the others, and none with persistent workers
    (but in the first epoch, whose workers those are)."""
    host = replace(HOST, fork_write_s_per_byte=2.5e-9)
    memory = 400e6
    plan = plan_run(StepCosts(0.15), None, host, on_gpu=False, train_loader=LoaderFacts(num_workers=2),
                    loader_started_before_first_epoch=True, step_memory_bytes=memory)
    assert plan.epoch_s == pytest.approx(0.5 + memory * 2.5e-9)
    # The first epoch's workers are already running: its copies are its first batches' warm-up.
    assert plan.first_epoch_s == 0.0 and plan.warmup_s == pytest.approx(memory * 2.5e-9)
    persistent = plan_run(StepCosts(0.15), None, host, on_gpu=False, step_memory_bytes=memory,
                          train_loader=LoaderFacts(num_workers=2, persistent_workers=True))
    assert persistent.epoch_s == 0.0 and persistent.warmup_s == pytest.approx(memory * 2.5e-9)  # forked once
    on_gpu = plan_run(StepCosts(0.15), None, host, on_gpu=True, train_loader=LoaderFacts(num_workers=2),
                      step_memory_bytes=memory)
    assert on_gpu.epoch_s == pytest.approx(0.5)  # a GPU step writes device memory


def test_a_cpu_step_copies_its_memory_again_after_each_validation_runs_new_forked_workers():
    """A validation loader without persistent workers forks new ones each run, and where the
    framework keeps them until the next run (Lightning) they live on through the training batches
    after it: the first of them copies the step's memory again."""
    host = replace(HOST, fork_write_s_per_byte=2.5e-9)
    memory = 400e6
    val = StepCosts(0.05)

    def plan(on_gpu: bool = False, live_on: bool = True, **loader: object):
        return plan_run(StepCosts(0.15), val, host, on_gpu=on_gpu, train_loader=LoaderFacts(num_workers=2),
                        val_loader=LoaderFacts(**loader), step_memory_bytes=memory, val_workers_live_on=live_on)

    assert plan(num_workers=2).val_fork_s == pytest.approx(memory * 2.5e-9)
    assert plan(num_workers=2, persistent_workers=True).val_fork_s == 0.0  # forked once, copied once
    assert plan(num_workers=0).val_fork_s == 0.0
    assert plan(on_gpu=True, num_workers=2).val_fork_s == 0.0  # a GPU step writes device memory
    assert plan(live_on=False, num_workers=2).val_fork_s == 0.0  # a loop that exhausts the loader stops them


def test_a_cpu_steps_memory_is_its_parameters_gradients_optimizer_state_and_activations():
    """Many activations, no optimizer state: what the step writes is its peak of new tensors."""
    import torch

    from ptp_callback.precision import PrecisionSpec
    from ptp_callback.run_prediction import step_memory_bytes
    from ptp_callback.tracer import trace_step

    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    batch = torch.randn(1024, 256)
    trace = trace_step(model, batch, lambda m, b: m(b).sum(), torch.optim.SGD(model.parameters(), lr=0.1),
                       PrecisionSpec.from_setting("32-true"), target_type="cpu")
    params = sum(p.numel() for p in model.parameters()) * 4
    forward = (1024 * 1024 * 2 + 1024 * 10 + 1) * 4  # the first layer's output, the ReLU's, the logits, the loss
    hidden = 1024 * 1024 * 4
    # At its peak the step holds the ReLU's output, its gradient and the gradient before the ReLU:
    # more than the forward's tensors (the first layer's output is freed once the ReLU has read it).
    assert trace.peak_new_bytes == pytest.approx(3 * hidden, rel=0.01)
    assert step_memory_bytes(trace) == pytest.approx(params + 3 * hidden, rel=0.01)
    assert step_memory_bytes(trace) > 2 * params + forward


def test_a_cpu_steps_memory_counts_the_gradients_and_the_updates_temporaries_where_they_are_more():
    """Few activations, much state: the step writes its gradients and the temporaries of Adam's
    per-parameter update (the square root and its division) over pages the last step used."""
    import torch

    from ptp_callback.precision import PrecisionSpec
    from ptp_callback.run_prediction import step_memory_bytes
    from ptp_callback.tracer import trace_step

    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    trace = trace_step(model, torch.randn(8, 256), lambda m, b: m(b).sum(), torch.optim.Adam(model.parameters()),
                       PrecisionSpec.from_setting("32-true"), target_type="cpu")
    params = sum(p.numel() for p in model.parameters()) * 4
    largest = 1024 * 256 * 4
    assert trace.optimizer_state_bytes == pytest.approx(2 * params, rel=0.001)  # and the step counts
    assert trace.peak_new_bytes == pytest.approx(params + 2 * largest, rel=0.01)
    assert step_memory_bytes(trace) == pytest.approx(params + 2 * params + params + 2 * largest, rel=0.01)


@pytest.mark.parametrize("hidden, seq", [(256, 64), (128, 40)])
def test_a_cpu_lstms_step_memory_counts_the_workspace_onednn_keeps_for_its_backward(hidden, seq):
    """oneDNN's LSTM layer returns a workspace of its gates and states for the backward, which the
    fake op leaves empty: for this 2-layer LSTM the largest memory its step writes."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from ptp_callback.precision import PrecisionSpec
    from ptp_callback.run_prediction import _in_place, step_memory_bytes
    from ptp_callback.tracer import trace_step

    class Workspaces(TorchDispatchMode):
        bytes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.mkldnn_rnn_layer.default:
                self.bytes += out[3].numel() * out[3].element_size()
            return out

    model = torch.nn.LSTM(64, hidden, num_layers=2)
    batch = torch.randn(seq, 16, 64)
    real = Workspaces()
    with real:
        model(batch)[0].sum().backward()
    if not real.bytes:
        pytest.skip("this CPU runs LSTMs step by step, without oneDNN's layer")
    trace = trace_step(model, batch, lambda m, b: m(b)[0].sum(), torch.optim.SGD(model.parameters()),
                       PrecisionSpec.from_setting("32-true"), target_type="cpu")
    without = sum(op.out_bytes for op in trace.ops if op.phase == "forward" and not _in_place(op.name)) + \
        2 * trace.param_bytes + trace.optimizer_state_bytes
    assert step_memory_bytes(trace) - without == pytest.approx(real.bytes, rel=0.1)


def test_gradient_communication_is_paid_once_per_optimizer_step():
    plan = plan_run(StepCosts(0.1, optimizer_s=0.01), None, H100_HOST, on_gpu=True, comm_s=0.02)
    assert plan.optimizer_step_s == pytest.approx(0.03)


def test_step_costs_come_from_a_step_prediction():
    import torch

    from ptp_callback import predict_step

    pred = predict_step(torch.nn.Linear(64, 64), (torch.randn(8, 64),), lambda m, b: m(*b).sum(),
                        precision="32-true", device="h100-sxm")
    costs = StepCosts.of(pred)
    assert costs.step_s == pred.step_s and costs.optimizer_s == pred.breakdown["phase"]["optimizer"] > 0


def test_a_fit_without_loader_workers_skips_stopping_them_at_the_end():
    host = HostCosts(**{**HOST.__dict__, "end_s": 0.05, "end_workers_s": 0.048})
    without = plan_run(StepCosts(0.1), StepCosts(0.05), host, on_gpu=False, train_loader=LoaderFacts(num_workers=0))
    assert without.end_s == pytest.approx(0.002)
    # Workers in either loader: they are stopped at the end.
    with_val_workers = plan_run(StepCosts(0.1), StepCosts(0.05), host, on_gpu=False,
                                train_loader=LoaderFacts(num_workers=0), val_loader=LoaderFacts(num_workers=2))
    assert with_val_workers.end_s == pytest.approx(0.05)


def test_a_measured_worker_stop_is_counted_once_per_loader_with_workers_at_the_end():
    """Where the probe timed a loader's workers stopping, the end is the fixed part plus one stop
    for each loader whose workers the teardown stops; the share the estimate held for them goes."""
    host = HostCosts(**{**HOST.__dict__, "end_s": 0.05, "end_workers_s": 0.048, "loader_stop_s": 0.06})

    def end(train_workers: int, val_workers: int | None) -> float:
        val = StepCosts(0.05) if val_workers is not None else None
        return plan_run(StepCosts(0.1), val, host, on_gpu=False, train_loader=LoaderFacts(num_workers=train_workers),
                        val_loader=LoaderFacts(num_workers=val_workers or 0)).end_s

    assert end(2, 2) == pytest.approx(0.002 + 2 * 0.06)
    assert end(2, 0) == pytest.approx(0.002 + 0.06) == end(0, 2)
    assert end(2, None) == pytest.approx(0.002 + 0.06)  # no validation: no validation loader to stop
    assert end(0, 0) == pytest.approx(0.002)
