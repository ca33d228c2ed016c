"""A 16-job sweep on 2 local workers against the same jobs run one after another, in one process.

    .venv/bin/python ../shared/tools/cifar10_jpeg_to_npz.py data/01_raw/cifar10.npz
    .venv/bin/python benchmarks/sweep_speed.py data/01_raw/cifar10.npz [SEQUENCE]

``SEQUENCE`` (default ``source1000:rotation600:rotation600``) sets the step sizes, and so how long
each job trains against the fixed costs of the command (start-up, cluster, MLflow server).

Both sides start from an empty project copy and do the same work: build the sequence, train the
historical states, run the 16 jobs (2 architectures × 8 methods, budget ``quick``) with MLflow
tracking on. The sequential side is what ``kedro run`` does, one Kedro session per job in one
process with 2 torch threads (no CLI start-up per job, which favours it); the sweep is the
``kedro sweep`` command as typed, start-up, cluster and MLflow server included, on 2 workers of
one torch thread each. Then the finished sweep is run again. Prints one ratio per line and writes
the figures, with the machine, to ``benchmarks/results/sweep_speed.json``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from seq2final.bench.machine import describe_machine

PROJECT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SEQUENCE = "source1000:rotation600:rotation600"
ARCHS = ("convnet_4", "resnet_4")
METHODS = ("baseline", "erm", "ft", "lp_ft", "sft", "ewc", "dro", "irm")
PARAMS = "build_sequences.test_size=500,build_sequences.oracle_size=400"

SEQUENTIAL = """
import sys, time, torch, mlflow
from pathlib import Path
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project
torch.set_num_threads(2)
project, data, sequence, archs, methods = sys.argv[1:6]
bootstrap_project(Path(project))
common = {"sequence": sequence, "dataset": "npz", "data_path": data, "budget": "quick",
          "build_sequences": {"test_size": 500, "oracle_size": 400}}
started = time.perf_counter()
with KedroSession.create(project_path=Path(project), runtime_params=common) as session:
    session.run(pipeline_names=["build_sequences"])
while mlflow.active_run():
    mlflow.end_run()
for arch in archs.split(","):
    for method in methods.split(","):
        params = {**common, "arch": arch, "method": method}
        with KedroSession.create(project_path=Path(project), runtime_params=params) as session:
            session.run(pipeline_names=["pretrain_historical", "adapt_final"])
        while mlflow.active_run():  # each kedro run in a process of its own ends its run
            mlflow.end_run()
print(f"SECONDS {time.perf_counter() - started:.1f}")
"""


def project_copy(target: Path) -> Path:
    shutil.copytree(PROJECT / "conf", target / "conf", ignore=shutil.ignore_patterns("local"))
    (target / "conf" / "local").mkdir()
    shutil.copy(PROJECT / "pyproject.toml", target / "pyproject.toml")
    for folder in ("data", "logs", "src"):
        (target / folder).mkdir()
    return target


def main(data: Path, sequence: str = SEQUENCE) -> None:
    data = data.resolve()
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"}
    with tempfile.TemporaryDirectory() as folder:
        one = project_copy(Path(folder) / "sequential")
        done = subprocess.run(
            [sys.executable, "-c", SEQUENTIAL, str(one), str(data), sequence, ",".join(ARCHS),
             ",".join(METHODS)],
            cwd=one, env=env, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode:
            raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
        sequential = float(re.search(r"SECONDS (\S+)", done.stdout).group(1))
        jobs = len(list((one / "data/07_model_output/results").glob("*.json")))

        many = project_copy(Path(folder) / "sweep")
        command = [
            str(BIN / "kedro"), "sweep", "--sequences", sequence, "--archs", ",".join(ARCHS),
            "--methods", ",".join(METHODS), "--budget", "quick", "--dataset", "npz",
            "--data-path", str(data), "--workers", "2", "--params", PARAMS,
        ]  # fmt: skip
        started = time.perf_counter()
        swept = subprocess.run(command, cwd=many, env=env, capture_output=True, text=True)
        sweep_seconds = time.perf_counter() - started
        if swept.returncode:
            raise SystemExit(swept.stdout[-3000:] + swept.stderr[-3000:])
        overhead = float(re.search(r"([\d.]+) s per job", swept.stdout).group(1))
        started = time.perf_counter()
        again = subprocess.run(command, cwd=many, env=env, capture_output=True, text=True)
        again_seconds = time.perf_counter() - started
        same = _same_results(one, many)
    figures = {
        "machine": describe_machine(torch.device("cpu")),
        "sequence": sequence,
        "jobs": jobs,
        "sequential_seconds": round(sequential, 1),
        "sweep_seconds": round(sweep_seconds, 1),
        "speedup_ratio": round(sequential / sweep_seconds, 3),
        "driver_overhead_seconds_per_job": overhead,
        "second_invocation_seconds": round(again_seconds, 1),
        "second_invocation_trained_nothing": "Nothing to train" in again.stdout,
        "agreement": same,
    }
    out = PROJECT / "benchmarks" / "results" / f"sweep_speed-{sequence.replace(':', '_')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps(figures["machine"]))
    print(f"jobs: {jobs}; sequential {sequential:.1f} s; sweep {sweep_seconds:.1f} s")
    print(
        f"sweep speed-up ratio (sequential 2 threads / sweep 2×1 thread): {figures['speedup_ratio']}"
    )
    print(f"driver overhead per job: {overhead:.3f} s")
    print(f"second invocation: {again_seconds:.1f} s, trained nothing: "
          f"{figures['second_invocation_trained_nothing']}")  # fmt: skip
    print(f"same job keys on both sides: {same['same_job_keys']}; same test accuracy: "
          f"{same['same_test_accuracy']} of {same['jobs']} jobs")  # fmt: skip


def _same_results(first: Path, second: Path) -> dict[str, object]:
    """Whether both sides ran the same jobs (keys), and how many gave the same test accuracy
    (the sides train with 2 and 1 torch threads, whose float sums differ in the last bits)."""

    def load(project: Path) -> dict[str, float]:
        folder = project / "data/07_model_output/results"
        return {
            p.stem: json.loads(p.read_text())["test_accuracy"]
            for p in sorted(folder.glob("*.json"))
        }

    one, two = load(first), load(second)
    return {
        "same_job_keys": set(one) == set(two),
        "same_test_accuracy": sum(one[k] == two.get(k) for k in one),
        "jobs": len(one),
    }


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main(Path(arguments[0]) if arguments else PROJECT / "data/01_raw/cifar10.npz", *arguments[1:2])
