"""How long a sweep's local workers take to be ready, spawned (Dask's default) against forked
from one server that imported the project (``sweep/cluster.py``'s ``forked_local_workers``;
docs/architecture.md, "Start-up"). Like with like in one run:

    .venv/bin/python benchmarks/worker_start.py [--workers 2]

Each side starts a local cluster of ``--workers`` processes as a sweep does, runs on every
worker what a task does before its pipeline runs (configure the project, find its pipelines),
then restarts the workers (as Dask replaces a lost one) and runs it again. Wall seconds to each
point, and the CPU seconds the whole machine spent on the side (run it on an idle machine). The
forked side goes first, from a cold start (a fork server runs once per process), so a warm file
cache favours the spawned side.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import psutil
from distributed import Client, LocalCluster

from seq2final.sweep.cluster import SweepSettings, forked_local_workers

PROJECT = Path(__file__).resolve().parents[1]


def _start_a_task() -> None:
    """What ``sweep/work.py``'s ``run_task`` does before the session runs its pipeline."""
    from kedro.framework.project import find_pipelines

    from seq2final.core.startup import bootstrap_once

    bootstrap_once(PROJECT)
    find_pipelines()


def _ready(client: Client, workers: int) -> None:
    client.gather([client.submit(_start_a_task, pure=False) for _ in range(workers)])


def _machine_cpu() -> float:
    times = psutil.cpu_times()
    return times.user + times.system


def measure(workers: int) -> tuple[float, float, float]:
    """Seconds until every worker has run a task, until it has again after a restart, and the
    machine's CPU seconds over both."""
    started, cpu = time.perf_counter(), _machine_cpu()
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=":0",
                     silence_logs=logging.ERROR) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        _ready(client, workers)
        first = time.perf_counter() - started
        client.restart()
        _ready(client, workers)
        return first, time.perf_counter() - started - first, _machine_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    workers = parser.parse_args().workers
    with forked_local_workers(None, SweepSettings()):
        forked = measure(workers)
    spawned = measure(workers)
    for name, (first, again, cpu) in (("spawned", spawned), ("forked", forked)):
        print(f"{name:8s} ready {first:6.1f} s   again after a restart {again:6.1f} s   "
              f"CPU {cpu:6.1f} s")  # fmt: skip
    print(f"{workers} workers forked: ready in {forked[0] / spawned[0]:.2f}x the spawned time, "
          f"{spawned[1] / forked[1]:.0f}x sooner after a restart, "
          f"{spawned[2] / forked[2]:.1f}x less CPU")  # fmt: skip


if __name__ == "__main__":
    main()
