"""Host probes on this machine: a real DataLoader's workers, a real torch.save, cached on disk."""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import replace

import pytest
import torch

from ptp_callback import host_costs
from ptp_callback.host_costs import (CPU_HOST, H100_HOST, LIGHTNING_LOOP, LoopWork, cpu_host, probe_host,
                                     spare_cpu_cores)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_probes_measure_this_machine_and_keep_the_rest(tmp_path, cache):
    costs = probe_host(CPU_HOST, checkpoint_dir=str(tmp_path), num_workers=2)
    assert 0.0 < costs.loader_start_s < 30.0  # two worker processes started and delivered a batch
    assert 0.0 < costs.loader_stop_s < 30.0  # and stopped: a CPU fit's teardown stops each loader's
    assert 1e6 < costs.write_bytes_per_s < 1e12  # 64 MB written through torch.save
    assert costs.remove_bytes_per_s > 0 and costs.save_fixed_s >= 0
    assert costs.loop_s == CPU_HOST.loop_s and costs.end_s == CPU_HOST.end_s  # not probed: kept
    if multiprocessing.get_start_method() == "fork":
        # A forked worker maps this process's pages: rewriting them copies each (2.5 ns a byte on a
        # 2-thread Xeon VM against 0.017 for the write alone).
        assert costs.fork_write_s_per_byte > 1e-11
    assert "probed on" in costs.source
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".ptp-probe")]  # the probe cleaned up


def test_probes_leave_the_users_generators_as_they_were(tmp_path, cache):
    # An iterator with worker processes draws their base seed from torch's generator: a probe that
    # moved it gave a seeded fit with loader workers another data order from its second epoch on.
    torch.manual_seed(0)
    before = torch.get_rng_state()
    probe_host(CPU_HOST, checkpoint_dir=str(tmp_path), num_workers=2)
    assert torch.equal(torch.get_rng_state(), before)


def test_a_second_probe_reads_the_cache(tmp_path, cache):
    first = probe_host(CPU_HOST, checkpoint_dir=str(tmp_path), num_workers=1)
    files = sorted(os.listdir(cache))
    assert len(files) == 3  # one per probe: the loader's start, a forked worker's pages, the write rate
    second = probe_host(CPU_HOST, checkpoint_dir=str(tmp_path), num_workers=1)
    # (the loader's start is set to this process's fork time, timed at each probe)
    assert replace(second, loader_start_s=0.0) == replace(first, loader_start_s=0.0)
    assert sorted(os.listdir(cache)) == files


@pytest.mark.skipif(not hasattr(os, "fork") or host_costs._start_method() != "fork",
                    reason="loader workers are not forked here")
def test_a_loaders_start_is_set_to_the_process_it_starts_from(cache):
    # Each worker's fork copies the training process's page tables: a larger process starts them later.
    probed = {"s": 0.2, "stop_s": 0.01, "fork_s": 0.005}
    assert host_costs.loader_start_here(probed, 4, fork_now=0.030) == pytest.approx(0.2 + 4 * 0.025)
    assert host_costs.loader_start_here(probed, 4, fork_now=0.001) == pytest.approx(0.2 - 4 * 0.004)
    assert host_costs.loader_start_here(probed, 4, fork_now=0.0) == pytest.approx(0.2 - 4 * 0.005)
    assert host_costs.loader_start_here({**probed, "fork_s": 1.0}, 4, fork_now=0.0) == pytest.approx(0.05)
    assert host_costs.loader_start_here({"s": 0.2, "stop_s": 0.01}, 4, fork_now=0.5) == 0.2  # an older probe
    # probe_host reads the cached start and times this process's fork now
    key = f"loader-start-stop-2-{host_costs._start_method()}"
    host_costs._cached(key, lambda: {"s": 0.2, "stop_s": 0.01, "fork_s": 10.0}, True)
    assert probe_host(CPU_HOST, num_workers=2).loader_start_s == pytest.approx(0.05)
    host_costs._cached(f"loader-start-stop-3-{host_costs._start_method()}", lambda: {"s": 0.2, "stop_s": 0.01,
                                                                                      "fork_s": 0.0}, True)
    assert probe_host(CPU_HOST, num_workers=3).loader_start_s > 0.2


@pytest.mark.skipif(not hasattr(os, "fork") or host_costs._start_method() != "fork",
                    reason="loader workers are not forked here")
def test_timing_a_fork_leaves_the_processs_signals_and_warnings_as_they_were():
    import signal
    import warnings

    # A process that ignores SIGCHLD has its children reaped for it: nothing to wait for.
    before = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        assert host_costs.fork_s() > 0.0
    finally:
        signal.signal(signal.SIGCHLD, before)

    def warn() -> None:
        warnings.warn("shown once per place", UserWarning)

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")  # once per place: the registry of shown warnings decides
        warn()
        host_costs.fork_s()
        warn()
    assert len(shown) == 1


@pytest.mark.skipif(not hasattr(os, "fork") or host_costs._start_method() != "fork",
                    reason="loader workers are not forked here")
def test_a_fork_the_system_refuses_leaves_the_probed_start(cache, monkeypatch):
    def refused():
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(os, "fork", refused)
    assert host_costs.fork_s() is None
    assert host_costs.loader_start_here({"s": 0.2, "stop_s": 0.01, "fork_s": 0.005}, 4, host_costs.fork_s()) == 0.2


def test_the_probes_cache_key_is_the_same_before_and_after_a_loaders_workers_fix_the_start_method():
    """In a fresh process no start method is set until a loader's first workers set the default:
    a key read from the setting alone changed then, and the second fit in a process probed again."""
    import subprocess
    import sys

    code = ("import torch.utils.data as d, multiprocessing as mp\n"
            "from ptp_callback.host_costs import _start_method\n"
            "before, unset = _start_method(), mp.get_start_method(allow_none=True) is None\n"
            "list(d.DataLoader(list(range(4)), num_workers=1))\n"
            "print(unset, before == _start_method())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True"]


def test_saves_through_memory_are_probed_and_cached_apart_from_direct_ones(tmp_path, cache):
    direct = probe_host(CPU_HOST, checkpoint_dir=str(tmp_path))
    buffered = probe_host(CPU_HOST, checkpoint_dir=str(tmp_path), buffered_saves=True)
    assert len(os.listdir(cache)) == 2  # two probes, not one read back for the other
    assert 1e6 < buffered.write_bytes_per_s < 1e12 and 1e6 < direct.write_bytes_per_s < 1e12
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".ptp-probe")]


def test_the_write_rate_is_the_median_of_repeated_saves(tmp_path, monkeypatch):
    # One slow and one fast 64 MB save around a typical one: the rate is the typical one's.
    seconds = iter([0.0, 0.03, 0.15, 0.06])

    def timed_save(state, path, buffered):
        time.sleep(next(seconds))

    monkeypatch.setattr(host_costs, "_save", timed_save)
    rate = host_costs._write_rate(str(tmp_path), buffered=True)
    assert rate["bytes_per_s"] == pytest.approx(64 * 2**20 / 0.06, rel=0.25)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".ptp-probe")]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the input copy probe times transfers to a GPU")
def test_a_gpu_host_probes_its_input_copies_from_pageable_and_pinned_memory(cache):
    costs = probe_host(H100_HOST, device=torch.device("cuda"))
    assert 1e8 < costs.input_bytes_per_s < 1e12 and 1e8 < costs.pinned_input_bytes_per_s < 1e12
    assert costs.input_rate(True) == costs.pinned_input_bytes_per_s
    assert costs.input_rate(False) == costs.input_bytes_per_s


def test_what_worker_batches_cost_a_cpu_step_is_measured_with_real_workers_and_cached(cache):
    state = torch.random.get_rng_state()
    cost = host_costs.worker_batch_seconds(2, 400_000, 0.0006, batches=10)
    assert 0.0 <= cost < 1.0
    assert torch.equal(torch.random.get_rng_state(), state)  # the loader's seed draw and the operands restored
    files = os.listdir(cache)
    assert len(files) == 1
    # Batches of about the same size and build time share the measurement: a build time timed once
    # at fit start moves from fit to fit by more than the probe can tell apart.
    assert host_costs.worker_batch_seconds(2, 420_000, 0.0009, batches=10) == cost
    assert os.listdir(cache) == files


def test_a_gpu_hosts_end_keeps_its_fitted_worker_stops(cache):
    """A GPU host's end was fitted on fits whose teardown stopped their workers: not counted twice."""
    costs = probe_host(H100_HOST, num_workers=2, device=torch.device("cuda"))
    assert costs.loader_start_s != H100_HOST.loader_start_s and costs.loader_stop_s == 0.0


def test_without_workers_or_checkpoints_nothing_is_probed(cache):
    assert probe_host(H100_HOST).loader_start_s == H100_HOST.loader_start_s
    assert not cache.exists()


def test_a_cpu_hosts_loop_work_scales_with_its_time_per_op():
    # a host twice as slow per op spends twice the loop work per batch and per optimizer step
    slow, fast = cpu_host(2 * 2.1e-6), cpu_host(2.1e-6)
    assert (slow.loop_s, slow.step_loop_s, slow.val_loop_s) == pytest.approx(
        (2 * fast.loop_s, 2 * fast.step_loop_s, 2 * fast.val_loop_s))
    assert min(slow.loop_s, slow.step_loop_s, slow.val_loop_s) > 0
    assert (slow.loader_start_s, slow.end_s, slow.input_bytes_per_s) == (
        CPU_HOST.loader_start_s, CPU_HOST.end_s, CPU_HOST.input_bytes_per_s)


def test_spare_cores_are_those_the_intra_op_threads_leave_idle():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert spare_cpu_cores() == cores - 1
        torch.set_num_threads(cores + 2)  # more threads than cores: none spare, never negative
        assert spare_cpu_cores() == 0
    finally:
        torch.set_num_threads(threads)


def test_workers_that_cannot_start_leave_the_plan_its_estimate_from_the_build_time(cache, monkeypatch):
    from ptp_callback.run_plan import LoaderFacts
    from ptp_callback.run_prediction import _with_worker_costs

    def cannot_start(*args, **kwargs):
        raise RuntimeError("DataLoader worker (pid 1) exited unexpectedly")

    monkeypatch.setattr(host_costs, "_worker_batch_s", cannot_start)
    loader = LoaderFacts(num_workers=2, load_s=0.001, batch_bytes=1000)
    assert _with_worker_costs(loader) == loader


def test_a_probe_that_would_take_seconds_of_building_batches_is_shortened_or_left_to_the_plan(cache, monkeypatch):
    from ptp_callback.run_plan import LoaderFacts
    from ptp_callback.run_prediction import _with_worker_costs

    probed = []

    def probe(num_workers, batch_bytes, load_s, batches):
        probed.append(batches)
        return 0.01

    monkeypatch.setattr(host_costs, "_worker_batch_s", probe)
    # 2 workers building each batch in 0.1 s: 15 timed batches after the 4 first (2 s of building)
    assert host_costs.worker_batch_seconds(2, 400_000, 0.1) == 0.01
    assert probed == [int(host_costs._PROBE_BUDGET_S * 2 / host_costs._load_bucket_s(0.1)) - 4]
    assert probed[0] >= host_costs._FEWEST_BATCHES
    # 0.5 s a batch: even the fewest batches would take seconds; the plan keeps the build time.
    slow = LoaderFacts(num_workers=2, load_s=0.5, batch_bytes=400_000)
    assert _with_worker_costs(slow) == slow
    assert len(probed) == 1 and len(os.listdir(cache)) == 1  # the first one's measurement only


def test_each_framework_loop_is_priced_per_batch_per_step_and_per_validation_batch():
    # 1 us a small op: the loop's work in microseconds is its count of small ops
    loop = LoopWork(batch_ops=45, step_ops=235, val_batch_ops=63)
    host = cpu_host(1e-6, loop)
    assert (host.loop_s, host.step_loop_s, host.val_loop_s) == pytest.approx((45e-6, 235e-6, 63e-6))
    assert cpu_host(1e-6).loop_s == pytest.approx(LIGHTNING_LOOP.batch_ops * 1e-6)  # Lightning's by default
