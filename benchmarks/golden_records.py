"""Regenerate tests/golden/default_run_smoke/<CPU capability>.json: the default run's records with
budget smoke, as this machine's instruction set computes them.

The golden files pin what the default parameters produce (sequence bytes, job keys, metrics, every
fit and trial), so a refactor that changes any of it fails tests/pipelines/test_default_run_unchanged.
torch's CPU kernels differ by instruction set (AVX2, AVX512), and with them a few predictions, so
each instruction set has its own file. Regenerate them only for a deliberate change of results (on
a machine of each instruction set), and say why in the commit:

    .venv/bin/python benchmarks/golden_records.py          # this CPU's file
    .venv/bin/python benchmarks/golden_records.py PATH     # elsewhere
    .venv/bin/python benchmarks/golden_records.py --prune-others

``--prune-others`` (after this CPU's file is remade, where no machine of another instruction set
is at hand) removes from the other files, ``other_cpus/`` included, every record whose job key
this CPU's file no longer has: the jobs the change re-keyed. The test compares such jobs with the
AVX2 records within another CPU's tolerances until their own instruction set's file is remade.

Under ``ATEN_CPU_CAPABILITY=default`` (torch's scalar kernels, the test's stand-in for another
CPU) the records go to ``other_cpus/DEFAULT.json``, never beside the instruction sets' files: the
suite checks them against the cross-CPU tolerances. Remake it on the AVX2 machine with the AVX2
file after a deliberate change of results:

    ATEN_CPU_CAPABILITY=default .venv/bin/python benchmarks/golden_records.py

It runs in a throw-away copy of the project, in the test environment, on one CPU thread as the
test suite does (thread counts change float reductions, so they change NLL and ECE in the last
digits).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

PROJECT = Path(__file__).resolve().parents[1]
PIPELINES = ["build_sequences", "pretrain_historical", "adapt_final"]
RUNTIME = {"budget": "smoke", "mlflow": {"enabled": False}}


def golden_records(project: Path) -> dict:
    """Run the default parameters with budget smoke in ``project``; its sequences and records."""
    bootstrap_project(project)
    with KedroSession.create(project_path=project, env="test", runtime_params=RUNTIME) as session:
        session.run(pipeline_names=PIPELINES)
    records = {}
    for path in sorted((project / "data/07_model_output/results").glob("*.json")):
        record = json.loads(path.read_text())
        record.pop("wall_seconds")
        record.pop("format")  # the layout's version, not a result (the test checks it)
        records[record["job_key"]] = record
    sequences = {}
    for path in sorted((project / "data/03_primary/sequences").glob("*/manifest.json")):
        manifest = json.loads(path.read_text())
        sequences[manifest["key"]] = manifest["content_hash"]
    return {"sequences": sequences, "records": records}


def main(target: Path) -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        shutil.copytree(PROJECT / "conf", project / "conf", ignore=shutil.ignore_patterns("local"))
        (project / "conf" / "local").mkdir()
        shutil.copy(PROJECT / "pyproject.toml", project / "pyproject.toml")
        (project / "data").mkdir()
        (project / "logs").mkdir()  # conf/logging.yml writes logs/info.log
        (project / "src").mkdir()
        os.chdir(project)
        golden = golden_records(project)
    target.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    print(f"{len(golden['records'])} records written to {target}")


def prune_others(own: Path) -> None:
    """Drop from the other instruction sets' files the records whose keys ``own`` lacks."""
    keys = set(json.loads(own.read_text())["records"])
    for other in sorted(own.parent.glob("**/*.json")):
        if other == own:
            continue
        golden = json.loads(other.read_text())
        stale = sorted(set(golden["records"]) - keys)
        for key in stale:
            del golden["records"][key]
        other.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        print(f"{other.name}: {len(stale)} stale record(s) removed, {len(golden['records'])} kept")


if __name__ == "__main__":
    capability = torch.backends.cpu.get_cpu_capability()
    folder = PROJECT / "tests" / "golden" / "default_run_smoke"
    default = folder / ("other_cpus" if capability == "DEFAULT" else "") / f"{capability}.json"
    if sys.argv[1:] == ["--prune-others"]:
        prune_others(default)
    else:
        main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else default)
