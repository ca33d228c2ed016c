"""The real-data representation study of docs/representations.md: Feature Forgetting's and NED's
questions asked of one CIFAR-10 sequence of seven steps rotating 15° a step (env
``representation_study``).

    .venv/bin/python benchmarks/representation_study.py --seeds 1007      # one seed (~40 min)
    .venv/bin/python benchmarks/representation_study.py --summary-only    # the tables from records

Per seed, under NED's ``test_then_train`` protocol (the view 0-t: steps 0..t−1 as history, step t
as its final step, for t = 1..5):

1. ``ft``, ``ncm`` and ``proto_tune`` on every view, all continuing the same ERM state: NED's
   heads against fine-tuning, in accuracy and training FLOPs;
2. the ``sequential`` (SFT) and ``sft_gated`` chains' states;
3. the data-efficiency curves of every state (ERM, SFT, SFT-gated) and of a fresh model, each
   tested on the sequence's final step (``representations.test_on: sequence``), so that P_rep
   is followed over 1..5 steps of history on one step.

It then prints P_rep by history, the curves of the longest histories and the heads' table.
Every finished job's result record and every curve point (small JSON and CSV files, no model)
are kept under ``benchmarks/results/representation_study/`` as each run ends and copied back
before anything trains: a study resumed in a later session refits no curve point and no job it
has a record of, though it trains its historical states (models, not kept) again. The gated
chain's states' readable records (``state.json``: each step's fit, with the share of gated
units it closed) are kept beside them, never restored (a state is its model), so whether gates
closed can be read after the session.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import yaml

from seq2final.core.files import atomic_write, stored_files
from seq2final.data.spec import name_slug
from seq2final.representations.fit import SCRATCH
from seq2final.representations.tables import curve_table, p_rep_table

PROJECT = Path(__file__).resolve().parents[1]
KEPT = PROJECT / "benchmarks" / "results" / "representation_study"
ENV = "representation_study"
STORES = {  # kept kind → the project's folder and the files' suffix
    "results": (PROJECT / "data/07_model_output/results", ".json"),
    "curves": (PROJECT / "data/07_model_output/representation_curves", ".csv"),
}
STATES = PROJECT / "data/06_models/historical"  # one folder per state: state.pt, state.json
GATED = "sft_gated"
HEADS = ["ft", "ncm", "proto_tune"]
RUNS = [  # (pipelines, methods): the jobs of NED's heads, the chains' states, then the curves
    ("build_sequences,pretrain_historical,adapt_final", HEADS),
    ("pretrain_historical", ["sft", "sft_gated"]),
    ("representations", ["ft", "sft", "sft_gated"]),
]


def study_params() -> dict:
    """The env's parameters: the sequence, dataset, budget and architecture its records and
    points carry."""
    return yaml.safe_load((PROJECT / "conf" / ENV / "parameters.yml").read_text())


def _mine(path: Path, sequence: str) -> bool:
    """Whether a finished stored file belongs to the study's sequence."""
    if path.suffix == ".json":
        return json.loads(path.read_text()).get("sequence") == sequence
    column = pd.read_csv(path).get("sequence")
    return column is not None and bool((column == sequence).all())


def restore() -> int:
    """Copy the kept files the project's stores lack into them; how many."""
    count = 0
    for kind, (folder, suffix) in STORES.items():
        folder.mkdir(parents=True, exist_ok=True)
        for path in stored_files(KEPT / kind, suffix):
            if not (folder / path.name).exists():
                _copy(path, folder / path.name)
                count += 1
    return count


def keep(sequence: str) -> None:
    """Copy the study's records and curve points into :data:`KEPT`, each once (a finished job's
    record and a fitted point never change), and its gated states' records."""
    for kind, (folder, suffix) in STORES.items():
        (KEPT / kind).mkdir(parents=True, exist_ok=True)
        for path in stored_files(folder, suffix):
            if not (KEPT / kind / path.name).exists() and _mine(path, sequence):
                _copy(path, KEPT / kind / path.name)
    (KEPT / "states").mkdir(parents=True, exist_ok=True)
    slug = name_slug(sequence)
    for path in sorted(STATES.glob(f"{GATED}-*/state.json")):
        record = json.loads(path.read_text())
        target = KEPT / "states" / f"{path.parent.name}.json"
        if record["info"]["sequence_key"].startswith(f"{slug}-") and not target.exists():
            _copy(path, target)


def closed_gates() -> str:
    """The share of gated units each step of the gated chain closed, per seed, from the kept
    states' records (docs/representations.md: a closed gate protects its unit's features)."""
    rows = []
    for path in stored_files(KEPT / "states", ".json"):
        record = json.loads(path.read_text())
        for fit in record["fits"]:
            step = re.search(r"step(\d+)$", fit["stage"])
            if step and fit.get("closed_gates") is not None:
                rows.append({"seed": record["info"]["seed"], "step": int(step.group(1)),
                             "closed": fit["closed_gates"]})  # fmt: skip
    if not rows:
        return "No gated state's record kept yet."
    frame = pd.DataFrame(rows).drop_duplicates(["seed", "step"])
    table = frame.pivot_table(index="seed", columns="step", values="closed")
    table.columns = [f"step {c}" for c in table.columns]
    table.index = table.index.map(str)  # a label, not a number to format
    return (
        f"Share of gated units closed by each step of `{GATED}` (the selected fit), per seed.\n\n"
        + table.reset_index().to_markdown(index=False, floatfmt=".3f")
    )


def _copy(source: Path, target: Path) -> None:
    """Copy in one step: a process reading ``target`` meanwhile sees all of it or none."""
    atomic_write(target, lambda partial: shutil.copyfile(source, partial))


def kedro(pipelines: str, params: str) -> None:
    command = [str(Path(sys.executable).with_name("kedro")), "run", "--env", ENV,
               "--pipelines", pipelines, "--params", params]  # fmt: skip
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"}
    subprocess.run(command, cwd=PROJECT, env=env, check=True)


def run_seed(seed: int, sequence: str) -> None:
    """One seed's jobs, states and curves, its records kept as each run ends (or fails: what
    it finished is kept)."""
    for pipelines, methods in RUNS:
        try:
            kedro(pipelines, f"seed={seed},method=[{','.join(methods)}]")
        finally:
            keep(sequence)


def _mean_std(mean: float, std: float) -> str:
    return f"{mean:.3f}" if pd.isna(std) else f"{mean:.3f} ± {std:.3f}"


def summary(params: dict) -> str:
    """P_rep by history (and pooled minus sequential), the curves of the longest histories, and
    NED's heads against FT on every view, from the kept points and records of the env's
    sequence, dataset, budget and architecture."""
    frames = [pd.read_csv(p) for p in stored_files(KEPT / "curves", ".csv")]
    points = pd.concat(frames) if frames else pd.DataFrame()
    if not points.empty:
        points = points[(points["sequence"] == params["sequence"])
                        & (points["dataset"] == params["dataset"])
                        & (points["budget"] == params["budget"])
                        & (points["arch"] == params["arch"])]  # fmt: skip
    if points.empty:
        return "No curve points kept yet."
    points = points.assign(view=points["view"].astype(object).fillna(""))  # "": whole sequence
    p_rep = p_rep_table(points)
    histories = sorted(set(p_rep.loc[p_rep["history"] > 0, "history"]))
    lines = [f"Seeds {', '.join(map(str, sorted(set(points['seed']))))}; P_rep (mean over sizes "
             f"{' '.join(map(str, sorted(set(points['size']))))}), mean ± std over seeds.", "",
             "| state | kind | " + " | ".join(f"{h} steps" for h in histories) + " |",
             "|---|---|" + "---|" * len(histories)]  # fmt: skip
    for (state, kind), rows in p_rep.groupby(["state", "kind"]):
        cells = {r.history: _mean_std(r.p_rep, r.std) for r in rows.itertuples()}
        if state == SCRATCH:  # no history: its one P_rep beside every history
            cells = dict.fromkeys(histories, cells[0])
        lines.append(f"| {state} | {kind} | " + " | ".join(cells.get(h, "") for h in histories)
                     + " |")  # fmt: skip
    per_seed = points.groupby(["state", "history", "kind", "seed"], as_index=False)[
        "test_accuracy"
    ].mean()  # each seed's P_rep, for the per-seed difference
    wide = per_seed.pivot_table(index=["kind", "seed", "history"], columns="state",
                                values="test_accuracy")  # fmt: skip
    if {"erm", "sequential"} <= set(wide.columns):
        gap = (wide["erm"] - wide["sequential"]).rename("gap").reset_index()
        for kind, rows in gap.groupby("kind"):
            cells = [rows.loc[rows["history"] == h, "gap"] for h in histories]
            lines.append(f"| erm − sequential | {kind} | "
                         + " | ".join(_mean_std(c.mean(), c.std()) for c in cells) + " |")  # fmt: skip
    longest = points[points["history"] == points.groupby("state")["history"].transform("max")]
    table = curve_table(longest).pivot_table(index=["state", "history", "kind"], columns="size",
                                             values="test_accuracy").reset_index()  # fmt: skip
    table.columns.name = None
    lines += ["", "Curves of the longest histories (test accuracy on the final step by training "
              "images, mean over seeds).", "", table.to_markdown(index=False, floatfmt=".3f")]  # fmt: skip
    lines += ["", _heads(params["sequence"]), "", closed_gates()]
    return "\n".join(lines)


def _heads(sequence: str) -> str:
    """NED's heads against FT per view: test accuracy on the view's final step and training
    GFLOPs of the final-step fit, means over seeds."""
    rows = []
    for path in stored_files(KEPT / "results", ".json"):
        record = json.loads(path.read_text())
        if record["sequence"] == sequence and record["method"] in HEADS and record.get("view"):
            rows.append({"view": record["view"]["name"], "method": record["method"],
                         "seed": record["seed"], "test_accuracy": record["test_accuracy"],
                         "gflops": record["train_flops"] / 1e9})  # fmt: skip
    if not rows:
        return "No head jobs recorded yet."
    frame = pd.DataFrame(rows)
    table = frame.groupby(["view", "method"], as_index=False).agg(
        test_accuracy=("test_accuracy", "mean"), std=("test_accuracy", "std"),
        train_gflops=("gflops", "mean"), seeds=("seed", "nunique"),
    )  # fmt: skip
    return (
        "NED's heads against FT, per view (its final step's test accuracy; the final-step fit's "
        "training GFLOPs), means over seeds.\n\n" + table.to_markdown(index=False, floatfmt=".3f")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1007", help="comma list; the env's seed is 1007")
    parser.add_argument("--summary-only", action="store_true", help="train nothing")
    args = parser.parse_args()
    if not all(s.strip().isdigit() for s in args.seeds.split(",")):
        parser.error(f"--seeds {args.seeds}: valid: a comma list of whole numbers")
    seeds: Sequence[int] = [int(s) for s in args.seeds.split(",")]
    if not args.summary_only and not (PROJECT / "data/01_raw/cifar10.npz").exists():
        parser.error(
            "data/01_raw/cifar10.npz is missing; make it with: .venv/bin/python "
            "../shared/tools/cifar10_jpeg_to_npz.py data/01_raw/cifar10.npz"
        )
    params = study_params()
    sequence = params["sequence"]
    restored = restore()
    if restored:
        print(f"{restored} kept file(s) restored from {KEPT.relative_to(PROJECT)}")
    if not args.summary_only:
        for seed in seeds:
            run_seed(seed, sequence)
    keep(sequence)  # what the stores hold now, a gated chain trained by hand included
    print(summary(params))


if __name__ == "__main__":
    main()
