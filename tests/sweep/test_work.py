"""The training worker a sweep's Dask workers become: no pause at Dask's memory threshold, and a
lifetime that lets the running task finish."""

import time

import pytest
from distributed import Client, LocalCluster

from seq2final.sweep.work import TrainingWorker


def test_a_training_worker_past_its_memory_pause_threshold_still_runs_tasks():
    """Dask pauses a worker whose process passes 80 % of its memory limit, until Dask-held data
    is freed; a training task's memory is torch's, so a paused sweep worker would wait for good.
    Here a worker of a 200 MB limit shares this test process (far above it): without the
    plugin it pauses and runs nothing, with it the task runs."""
    with LocalCluster(n_workers=1, processes=False, memory_limit="200MB",
                      dashboard_address=":0") as cluster, Client(cluster) as client:  # fmt: skip
        client.wait_for_workers(1)
        _until(lambda: _statuses(client) == ["paused"])
        paused = client.submit(sum, [1, 2], pure=False)
        with pytest.raises(TimeoutError):
            paused.result(timeout=3)
        assert _statuses(client) == ["paused"]
        client.register_plugin(TrainingWorker(1))
        assert client.submit(sum, [1, 3], pure=False).result(timeout=10) == 4


def test_a_worker_at_its_lifetime_finishes_its_task_then_leaves():
    """At its lifetime a training worker pauses (nothing new is sent to it), finishes the task
    it runs, once, and leaves; a task submitted meanwhile waits for another worker."""
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(1)
        started = _STARTED
        started.clear()
        running = client.submit(_slow, 3.0, pure=False)  # runs past the lifetime
        _until(lambda: started)
        client.register_plugin(TrainingWorker(1, lifetime=0.5))
        _until(lambda: _statuses(client) == ["paused"])
        assert not running.done()
        waiting = client.submit(_slow, 0.0, pure=False)
        assert running.result(timeout=10) == 3.0 and len(started) == 1  # not cut, not re-run
        running.release()  # as the sweep's driver does with what it has settled
        _until(lambda: not _statuses(client))
        assert waiting.status == "pending"
        cluster.scale(2)  # a new worker (the spec still names the one that left) runs what waited
        assert waiting.result(timeout=30) == 0.0 and len(started) == 2


_STARTED: list[float] = []  # what _slow was started with, in this process's threaded workers


def _slow(seconds: float) -> float:
    _STARTED.append(seconds)
    time.sleep(seconds)
    return seconds


def _statuses(client: Client) -> list[str]:
    return [w["status"] for w in client.scheduler_info()["workers"].values()]


def _until(condition, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
