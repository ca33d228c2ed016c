"""A running Dask cluster, started as on a real cluster, for the sweep that is given one."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from seq2final.sweep.services import free_port

BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def dask_cluster(tmp_path_factory):
    """A Dask scheduler and one worker, each a process of its own as on a real cluster, started
    before the sweep that uses it (``--scheduler``). One test uses it: each pytest-xdist worker
    that ran a test using it would start its own, at about 40 s of CPU for the pair's imports."""
    port = free_port()
    scheduler = subprocess.Popen(
        [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
         "--dashboard-address", ":0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    worker = subprocess.Popen(
        [str(BIN / "dask"), "worker", f"tcp://127.0.0.1:{port}", "--nthreads", "1",
         "--nworkers", "1", "--dashboard-address", ":0",
         "--local-directory", str(tmp_path_factory.mktemp("dask-worker"))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        yield f"tcp://127.0.0.1:{port}"
    finally:
        for process in (worker, scheduler):
            process.terminate()
        for process in (worker, scheduler):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture(scope="session")
def slurm():
    """A one-node SLURM (munge, slurmctld, slurmd) started for the session and stopped at the
    end by process id (``sweep/slurm.py``); skipped, with the reason, only on a machine where
    Debian's packages are not installed (.ci/run installs them) or the daemons cannot run as root."""
    from seq2final.sweep.slurm import PACKAGES, missing_programs, start_slurm

    missing = missing_programs()
    if missing:
        pytest.skip(
            f"SLURM is not installed here (no {', '.join(missing)}; apt-get install {PACKAGES})"
        )
    if os.geteuid() != 0:
        pytest.skip("a local SLURM's daemons run as root (SlurmUser=root); this user is not root")
    cluster = start_slurm()
    yield cluster
    cluster.stop()
