"""One Dask cluster for the sweep tests of a test process, started as on a real cluster."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from seq2final.sweep.services import free_port

BIN = Path(sys.executable).parent

BOOM_PLUGIN = """
from seq2final.methods import final_mode


@final_mode("explode", "always fails", continues_from=("nothing",), config_keys=())
def explode(ctx, config, state):
    raise RuntimeError("this final mode always fails")
"""


@pytest.fixture(scope="session")
def plugin_folder(tmp_path_factory) -> Path:
    """A folder holding ``boom_plugin``, a final mode that always fails, on the cluster's
    ``PYTHONPATH`` (a sweep names it in ``plugins``; this process never imports it)."""
    folder = tmp_path_factory.mktemp("plugins")
    (folder / "boom_plugin.py").write_text(BOOM_PLUGIN)
    return folder


@pytest.fixture(scope="session")
def dask_cluster(tmp_path_factory, plugin_folder):
    """A Dask scheduler and one worker, each a process of its own as on a real cluster, shared
    by the sweep tests of this test process: the worker imports the project once, and each
    sweep's tasks run in it one after another (a sweep waits for its own)."""
    port = free_port()
    scheduler = subprocess.Popen(
        [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
         "--dashboard-address", ":0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    path = os.pathsep.join(filter(None, [str(plugin_folder), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    worker = subprocess.Popen(
        [str(BIN / "dask"), "worker", f"tcp://127.0.0.1:{port}", "--nthreads", "1",
         "--nworkers", "1", "--dashboard-address", ":0",
         "--local-directory", str(tmp_path_factory.mktemp("dask-worker"))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    yield f"tcp://127.0.0.1:{port}"
    for process in (worker, scheduler):
        process.terminate()
        process.wait(timeout=30)
