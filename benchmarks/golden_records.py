"""Regenerate tests/golden/every_method_smoke/<CPU capability>.json: the records of every method on
the tiny sequence of that folder's ``run.json`` (budget smoke), as this machine's instruction set
computes them.

The golden files pin what that run produces (sequence bytes, job keys, metrics, every fit and
trial), so a refactor that changes any of it fails tests/pipelines/test_golden_records.py, whose
session fixture (``every_method_run``, tests/conftest.py) runs the same ``run.json``.
torch's CPU kernels differ by instruction set (AVX2, AVX512), and with them a few predictions, so
each instruction set has its own file, which names the CPU it was made on (``cpu``: vendor,
family, model, stepping, instruction set); the test compares exactly only on a CPU of that kind.
Regenerate them only for a deliberate change of results (on a machine of each instruction set,
or with torch's kernels pinned to AVX2 for the reference file where no AVX2 machine is at hand:
``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_CBWR=AVX2``), and say why in the commit:

    .venv/bin/python benchmarks/golden_records.py          # this CPU's file
    .venv/bin/python benchmarks/golden_records.py PATH     # elsewhere
    .venv/bin/python benchmarks/golden_records.py --prune-others
    .venv/bin/python benchmarks/golden_records.py --compare OTHER.json [AVX2.json]

``--prune-others`` (after this CPU's file is remade, where no machine of another instruction set
is at hand) removes from the other files, ``other_cpus/`` included, every record whose job key
this CPU's file no longer has: the jobs the change re-keyed. The test compares such jobs with the
AVX2 records within another CPU's tolerances until their own instruction set's file is remade.

``--compare`` prints what moved between two files of one run, field by field: in how many jobs,
by how much at most (test accuracy in test images), and so whether any key, draw, epoch count or
trial state moved; without a second file it compares with the AVX2 file of the first one's run.
docs/architecture.md ("Reproducibility") quotes it.

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

from seq2final.bench.machine import cpu_kind

PROJECT = Path(__file__).resolve().parents[1]
GOLDEN = PROJECT / "tests" / "golden" / "every_method_smoke"
RUN = json.loads((GOLDEN / "run.json").read_text())
# The pipelines that write the records: evaluate and visualize, which the test's run adds, read
# them and change none.
TRAINING = ["build_sequences", "pretrain_historical", "adapt_final"]


def golden_records(project: Path) -> dict:
    """Run ``run.json``'s training pipelines in ``project``; its sequences and records."""
    bootstrap_project(project)
    pipelines = [name for name in RUN["pipelines"] if name in TRAINING]
    with KedroSession.create(
        project_path=project, env="test", runtime_params=RUN["params"]
    ) as session:
        session.run(pipeline_names=pipelines)
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
    golden["cpu"] = cpu_kind()  # only a CPU of this kind compares with these bits exactly
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    print(f"{len(golden['records'])} records written to {target}")


def prune_others(own: Path) -> None:
    """Drop from the other instruction sets' files the records whose keys ``own`` lacks."""
    keys = set(json.loads(own.read_text())["records"])
    for other in sorted(own.parent.glob("**/*.json")):
        if other == own or other.name == "run.json":  # the run's parameters, not records
            continue
        golden = json.loads(other.read_text())
        stale = sorted(set(golden["records"]) - keys)
        for key in stale:
            del golden["records"][key]
        other.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        print(f"{other.name}: {len(stale)} stale record(s) removed, {len(golden['records'])} kept")


def _leaves(value: object, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    """Every scalar of a record by its path (lists by index)."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _leaves(item, (*path, key)).items()}
    if isinstance(value, list):
        return {
            k: v for i, item in enumerate(value) for k, v in _leaves(item, (*path, str(i))).items()
        }
    return {path: value}


def compare(other: Path, reference: Path) -> None:
    """Print, per field name, how many jobs of ``other`` differ from ``reference`` and the
    largest difference (test accuracy in test images, NLL relative, the rest absolute)."""
    ours, theirs = (json.loads(p.read_text())["records"] for p in (reference, other))
    missing = sorted(set(theirs) - set(ours))
    if missing:
        print(f"{len(missing)} job(s) not in {reference.name}: {', '.join(missing)}")
        theirs = {key: record for key, record in theirs.items() if key in ours}
    moved: dict[str, set[str]] = {}
    largest: dict[str, float] = {}
    for key, record in theirs.items():
        mine = _leaves(ours[key])
        for path, value in _leaves(record).items():
            field = next((p for p in reversed(path) if not p.isdigit()), path[-1])
            if mine.get(path) == value:
                continue
            moved.setdefault(field, set()).add(key)
            if isinstance(value, float) and isinstance(mine.get(path), float):
                gap = abs(value - mine[path])
                if field == "test_accuracy":
                    gap *= ours[key]["test_size"]  # in test images
                elif field == "test_nll":
                    gap /= abs(mine[path])  # relative
                largest[field] = max(largest.get(field, 0.0), gap)
    differ = sum(ours[key] != record for key, record in theirs.items())
    print(f"{differ} of {len(theirs)} jobs differ from {reference.name}")
    for field in sorted(moved):
        extra = f", largest {largest[field]:.4g}" if field in largest else ""
        unit = {"test_accuracy": " test images", "test_nll": " relative"}.get(field, "")
        print(f"  {field}: {len(moved[field])} job(s){extra}{unit if extra else ''}")


if __name__ == "__main__":
    capability = torch.backends.cpu.get_cpu_capability()
    default = GOLDEN / ("other_cpus" if capability == "DEFAULT" else "") / f"{capability}.json"
    if sys.argv[1:] == ["--prune-others"]:
        prune_others(default)
    elif sys.argv[1:2] == ["--compare"]:
        other = Path(sys.argv[2]).resolve()
        run = other.parents[1] if other.parent.name == "other_cpus" else other.parent
        compare(other, Path(sys.argv[3]) if len(sys.argv) > 3 else run / "AVX2.json")
    else:
        main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else default)
