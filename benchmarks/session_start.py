"""What a Kedro session of this project costs before its first node and after its last, and
what the per-process measures save (docs/architecture.md, "Start-up"): the configuration read
through ``CachedConfigLoader`` against Kedro's ``OmegaConfigLoader`` (the same runtime parameters
each session, and new ones each session as a sweep's tasks have), a new MLflow database copied
against one made by MLflow's migrations (CPU seconds of this process), and the shutdown of a
process that imported the project with its heap frozen at exit against Python's own (seconds from
a child's last statement to its end, the best of ``--repeats`` children each). Like with like in
one run.

    .venv/bin/python benchmarks/session_start.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kedro.config import OmegaConfigLoader

from seq2final.config.loader import CachedConfigLoader
from seq2final.settings import CONFIG_LOADER_ARGS
from seq2final.tracking import mlflow_io

PROJECT = Path(__file__).resolve().parents[1]
KEYS = ("parameters", "catalog", "mlflow")


def read_configuration(
    loader_class: type[OmegaConfigLoader], conf: Path, runtime: dict[str, object]
) -> float:
    """CPU seconds to read the keys a session reads, with a new loader as each session makes."""
    started = time.process_time()
    loader = loader_class(str(conf), runtime_params=runtime, **CONFIG_LOADER_ARGS)
    loader.config_patterns.setdefault("mlflow", ["mlflow*", "mlflow*/**", "**/mlflow*"])
    for key in KEYS:
        loader[key]
    return time.process_time() - started


def new_database(folder: Path) -> float:
    started = time.process_time()
    mlflow_io.prepare_sqlite_store(folder / "mlflow.db")
    return time.process_time() - started


EXIT = """
import atexit, gc, sys, time
import seq2final.settings
if sys.argv[1] == "collecting":
    atexit.unregister(gc.freeze)
print(time.time(), flush=True)
"""


def shutdown(how: str) -> float:
    """Seconds a child that imported the project takes to end after its last statement."""
    child = subprocess.Popen(
        [sys.executable, "-c", EXIT, how], stdout=subprocess.PIPE, text=True, cwd=PROJECT
    )
    assert child.stdout is not None
    last = float(child.stdout.readline())
    child.wait()
    return time.time() - last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        confs = []
        for i in range(repeats + 1):  # a copy per session, as every test project and sweep has
            conf = root / f"project{i}" / "conf"
            shutil.copytree(PROJECT / "conf", conf, ignore=shutil.ignore_patterns("local"))
            (conf / "local").mkdir()
            confs.append(conf)
        rows = {}
        for new in (False, True):
            for loader_class in (OmegaConfigLoader, CachedConfigLoader):
                name = loader_class.__name__ + (", new --params" if new else "")
                times = [  # the first session is left out: imports, and the cache filled
                    read_configuration(loader_class, conf, {"seed": i if new else 0})
                    for i, conf in enumerate(confs)
                ]
                rows[name] = min(times[1:])
        databases = [new_database(root / f"project{i}") for i in range(repeats + 1)]
        rows["new MLflow database, migrated"] = databases[0]
        rows["new MLflow database, copied"] = min(databases[1:])
    for how in ("collecting", "frozen"):
        rows[f"shutdown, {how}"] = min(shutdown(how) for _ in range(repeats))
    for name, seconds in rows.items():
        print(f"{name:32s} {seconds:8.3f} s")
    for new in ("", ", new --params"):
        plain, cached = rows["OmegaConfigLoader" + new], rows["CachedConfigLoader" + new]
        print(f"configuration of a session{new}: {plain / cached:.0f}x less CPU with the cache")
    migrated, copied = rows["new MLflow database, migrated"], rows["new MLflow database, copied"]
    print(f"a new MLflow database: {migrated / copied:.0f}x less CPU copied")
    collecting, frozen = rows["shutdown, collecting"], rows["shutdown, frozen"]
    print(f"a process's shutdown: {collecting / frozen:.0f}x faster with its heap frozen")


if __name__ == "__main__":
    main()
