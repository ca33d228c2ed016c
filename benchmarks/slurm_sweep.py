"""A sweep on a real one-node SLURM, with and without one of its worker jobs cancelled mid-task.

    .venv/bin/python benchmarks/slurm_sweep.py

Needs Debian's ``slurmctld slurmd slurm-client munge`` and root (``sweep/slurm.py`` starts the
daemons under a temporary folder and stops them at the end). Each side runs ``kedro sweep`` as
typed, in a fresh project copy whose ``slurm`` environment asks for 2 one-core jobs (walltime 10
minutes), on small digits data: 1 sequence (1,000 historical images, 300 final), 1 historical
state, 5 jobs (``convnet_1`` × baseline, ERM, FT, LP-FT, NCM; budget ``smoke`` with 2 trials of
up to 8 epochs), long enough for a replacement to join before the end. The second side cancels,
with ``scancel``, the job of a worker that has a training job's log open. Measured from the
driver's own lines, stamped as they arrive: the time to its first worker, the cancelled worker's
replacement (``scancel`` to the new job running in ``squeue``, and to the driver counting 2
workers again), and the wall time; ``squeue --states=all`` after each side. Writes
``benchmarks/results/slurm_sweep.json``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import sweep_speed  # its project copy (a module beside this script, in benchmarks/)
import torch

from seq2final.bench.machine import describe_machine
from seq2final.sweep.slurm import LocalSlurm, job_holding, start_slurm

PROJECT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PARAMS = (
    "build_sequences.test_size=200,build_sequences.oracle_size=120,"
    "budgets.smoke.trials=2,budgets.smoke.max_epochs=8"
)
SWEEP = ("sweep", "--env", "slurm", "--sequences", "source1000:rotation300", "--archs", "convnet_1",
         "--methods", "baseline,erm,ft,lp_ft,ncm", "--budget", "smoke", "--params", PARAMS)  # fmt: skip
COLUMNS = "%i %j %T %r %M"  # squeue's id, name, state, reason, time
SWEEP_YML = """cluster:
  type: slurm
  maximum_jobs: 2
  options: {{cores: 1, memory: 3GB, processes: 1, walltime: "00:10:00", log_directory: {logs}}}
"""


def project_copy(target: Path) -> Path:
    """``sweep_speed``'s empty project copy, with the ``slurm`` environment's sweep.yml."""
    copied = sweep_speed.project_copy(target)
    (copied / "conf" / "slurm").mkdir()
    (copied / "conf" / "slurm" / "sweep.yml").write_text(SWEEP_YML.format(logs=copied / "slurm"))
    return copied


def one_sweep(project: Path, slurm: LocalSlurm, cancel: bool) -> dict[str, object]:
    env = {**os.environ, **slurm.env, "KEDRO_DISABLE_TELEMETRY": "1"}
    earlier = {line.split()[0] for line in slurm.queue(COLUMNS)}  # the other side's jobs
    started = time.perf_counter()
    lines: list[tuple[float, str]] = []
    driver = subprocess.Popen([str(BIN / "kedro"), *SWEEP], cwd=project, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip

    def read() -> None:
        assert driver.stdout is not None
        for line in driver.stdout:
            lines.append((time.perf_counter() - started, line.rstrip()))

    reader = threading.Thread(target=read)
    reader.start()
    result: dict[str, object] = {}
    if cancel:
        cancelled = None
        while cancelled is None and driver.poll() is None:
            cancelled = job_holding(f"{project}/logs/sweep/*/job-*.log")
            time.sleep(0.1)
        before = {line.split()[0] for line in slurm.queue(COLUMNS)}
        subprocess.run(["scancel", cancelled], env=env, check=True)
        at = time.perf_counter() - started
        while True:
            new = [
                r for r in slurm.queue(COLUMNS) if r.split()[0] not in before and " RUNNING " in r
            ]
            if new or driver.poll() is not None:
                break
            time.sleep(0.1)
        running = time.perf_counter() - started
        result.update(cancelled_job=cancelled, cancelled_at_s=round(at, 1),
                      replacement_running_after_s=round(running - at, 1) if new else None)  # fmt: skip
    driver.wait()
    reader.join()
    wall = time.perf_counter() - started
    text = [line for _, line in lines]
    first = next((float(m[1]) for t in text if (m := re.search(r"joined (\d+\.\d) s", t))), None)
    finished = next((float(m[1]) for t in text if (m := re.search(r"finished in (\d+\.\d)", t))),
                    None)  # fmt: skip
    result.update(exit_code=driver.returncode, wall_s=round(wall, 1), sweep_s=finished,
                  first_worker_s=first,
                  squeue=[r for r in slurm.queue(COLUMNS) if r.split()[0] not in earlier])  # fmt: skip
    if cancel and result.get("cancelled_at_s") is not None:
        at = float(result["cancelled_at_s"])  # type: ignore[arg-type]
        back = [t for t, line in lines if t > at and " · 2 workers · " in line]
        result["driver_counts_2_workers_again_after_s"] = round(back[0] - at, 1) if back else None
    result["progress"] = [f"{t:6.1f} s  {line}" for t, line in lines if " workers · " in line]
    return result


def main() -> None:
    slurm = start_slurm()
    env = {**os.environ, **slurm.env, "KEDRO_DISABLE_TELEMETRY": "1"}
    version = subprocess.run(["sinfo", "-V"], env=env, capture_output=True, text=True).stdout
    try:
        with tempfile.TemporaryDirectory() as folder:
            runs = {
                name: one_sweep(
                    project_copy(Path(folder) / name), slurm, cancel=name == "cancelled"
                )
                for name in ("plain", "cancelled")
            }
    finally:
        slurm.stop()
    for name, run in runs.items():
        shown = {k: v for k, v in run.items() if k not in ("progress", "squeue")}
        print(name, json.dumps(shown))
        print("\n".join(f"  squeue: {line}" for line in run["squeue"]))  # type: ignore[union-attr]
    out = PROJECT / "benchmarks" / "results" / "slurm_sweep.json"
    machine = {**describe_machine(torch.device("cpu")), "slurm": version.strip()}
    out.write_text(json.dumps({"machine": machine, "runs": runs}, indent=1) + "\n")
    print(f"wrote {out.relative_to(PROJECT)}")


if __name__ == "__main__":
    main()
