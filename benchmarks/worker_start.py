"""How long a sweep's local workers take to be ready, spawned (Dask's default) against forked
from one server that imported the project (``sweep/cluster.py``'s ``forked_local_workers``;
docs/architecture.md, "Start-up"). Like with like in one run:

    .venv/bin/python benchmarks/worker_start.py [--workers 2]

Each side starts a local cluster of ``--workers`` processes as a sweep does, runs on every
worker a task that imports what a training task imports, then restarts the workers (as Dask
replaces a lost one) and runs the task again. Wall seconds to each point.
"""

from __future__ import annotations

import argparse
import logging
import time

from distributed import Client, LocalCluster

from seq2final.sweep.cluster import SweepSettings, forked_local_workers


def _import_what_a_task_imports() -> None:
    import seq2final.hooks  # noqa: F401
    import seq2final.pipeline_registry  # noqa: F401


def _ready(client: Client, workers: int) -> None:
    client.gather([client.submit(_import_what_a_task_imports, pure=False) for _ in range(workers)])


def measure(workers: int) -> tuple[float, float]:
    """Seconds until every worker has run a task, and until it has again after a restart."""
    started = time.perf_counter()
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=":0",
                     silence_logs=logging.ERROR) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        _ready(client, workers)
        first = time.perf_counter() - started
        client.restart()
        _ready(client, workers)
        return first, time.perf_counter() - started - first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    workers = parser.parse_args().workers
    spawned = measure(workers)
    with forked_local_workers(None, SweepSettings()):
        forked = measure(workers)
    for name, (first, again) in (("spawned", spawned), ("forked", forked)):
        print(f"{name:8s} ready {first:6.1f} s   again after a restart {again:6.1f} s")
    print(f"{workers} workers ready {spawned[0] / forked[0]:.1f}x sooner forked, "
          f"{spawned[1] / forked[1]:.0f}x sooner after a restart")  # fmt: skip


if __name__ == "__main__":
    main()
