"""Full grids stored for replay, and synchronous-halving policies judged on them on test
(docs/benchmarks.md, "Search"; seq2final.bench.replay says what is measured).

    .venv/bin/python benchmarks/search_replay.py collect dev       # train the development grids
    .venv/bin/python benchmarks/search_replay.py collect heldout   # ... the held-out ones
    .venv/bin/python benchmarks/search_replay.py collect noise     # dev again, other trial seeds
    .venv/bin/python benchmarks/search_replay.py choose            # every policy on dev
    .venv/bin/python benchmarks/search_replay.py evaluate FIRST ETA [GUARD]   # once, on held-out
    .venv/bin/python benchmarks/search_replay.py known FIRST ETA [GUARD]   # with keep_known, apart

A run trains the pipeline's own fits (historical and final, grids of 3, 8 and 24 points) under
``budget: replay_grid`` (the paper's grids, no pruner, at most ``MAX_EPOCHS``) in a throw-away
copy of the project, on one torch thread, and keeps each fit's curves and per-configuration test
accuracies in ``benchmarks/results/search_replay/<set>.json`` (a run at a time, so an interrupted
collection resumes with the next run). ``noise`` trains the dev runs with other trial seeds
(the same initial weights, other batch orders and dropout draws): the grid against itself.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from seq2final.bench.machine import cpu_kind
from seq2final.bench.replay import (
    GridFit,
    Policy,
    grid_fits,
    judge,
    known_orders,
    noise_floor,
    stored_grids,
    summarize,
)
from seq2final.core.files import atomic_write
from seq2final.runs.result_store import ResultStore
from seq2final.runs.state_store import HistoricalStore
from seq2final.training import tuner

PROJECT = Path(__file__).resolve().parents[1]
STORE = PROJECT / "benchmarks" / "results" / "search_replay"
MAX_EPOCHS = 30
# Every kind of tuned fit: step 0 and ERM's history (8 points), SFT's sequential steps (8),
# the baseline and FT (8), ST-1's side modules (24), the joint model's adjacency (3).
METHODS = ["baseline", "ft", "sft", "st_1", "jm"]


@dataclass(frozen=True)
class Run:
    sequence: str
    arch: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.sequence}/{self.arch}/{self.seed}"


DEV = [Run("source100:rotation60:corruption100:label_flip60", "convnet_1", s) for s in (1, 2, 3)]
HELD_OUT = [
    Run(sequence, arch, seed)
    for sequence, arch in [
        ("source100:corruption100:label_flip60:rotation60", "convnet_2"),
        ("source100:label_flip40:rotation90:corruption60", "resnet_1"),
    ]
    for seed in (1, 2, 3)
]
SETS = {"dev": DEV, "heldout": HELD_OUT, "noise": DEV}


def train(run: Run, salted: bool) -> list[GridFit]:
    """The run's grid fits, trained in a throw-away copy of the project."""
    params = {
        "sequence": run.sequence, "seed": run.seed, "arch": run.arch, "method": METHODS,
        "budget": "replay_grid", "budgets": {"replay_grid": {"sampler": "grid",
                                                             "max_epochs": MAX_EPOCHS}},
        "build_sequences": {"test_size": 350, "oracle_size": 120},
        "mlflow": {"enabled": False},
    }  # fmt: skip
    if salted:  # other trial seeds, everything else as it was
        seed_of = tuner.Tuner.trial_seed
        tuner.Tuner.trial_seed = lambda self, name, values: seed_of(self, f"{name}/noise", values)
    try:
        with tempfile.TemporaryDirectory() as folder:
            project = Path(folder)
            shutil.copytree(PROJECT / "conf", project / "conf",
                            ignore=shutil.ignore_patterns("local"))  # fmt: skip
            (project / "conf" / "local").mkdir()
            shutil.copy(PROJECT / "pyproject.toml", project / "pyproject.toml")
            for name in ("data", "logs", "src"):
                (project / name).mkdir()
            os.chdir(project)
            bootstrap_project(project)
            with KedroSession.create(project_path=project, runtime_params=params) as session:
                session.run(pipeline_names=["build_sequences", "pretrain_historical",
                                            "adapt_final"])  # fmt: skip
            results = ResultStore(project / "data/07_model_output/results",
                                  project / "data/06_models/final",
                                  project / "data/07_model_output/curves")  # fmt: skip
            states = HistoricalStore(project / "data/06_models/historical")
            fits = [fit for key in results for fit in grid_fits(run.name, key, results[key].fits)]
            fits += [fit for key in states
                     for fit in grid_fits(run.name, key, states.summary(key).fits)]  # fmt: skip
    finally:
        os.chdir(PROJECT)
        if salted:
            tuner.Tuner.trial_seed = seed_of
    return fits


def load(name: str) -> dict:
    path = STORE / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {"runs": {}}


def collect(name: str) -> None:
    stored = load(name)
    for run in SETS[name]:
        if run.name in stored["runs"]:
            continue
        fits = train(run, salted=name == "noise")
        stored["runs"][run.name] = [fit.to_json() for fit in fits]
        stored["cpu"], stored["max_epochs"] = cpu_kind(), MAX_EPOCHS
        STORE.mkdir(parents=True, exist_ok=True)
        text = json.dumps(stored, indent=1, sort_keys=True) + "\n"
        atomic_write(STORE / f"{name}.json", lambda partial, text=text: partial.write_text(text))
        print(f"{name}: {run.name}: {len(fits)} grid fits ({sum(f.size for f in fits)} trials)")


def fits_of(name: str) -> list[GridFit]:
    return stored_grids(STORE / f"{name}.json")[0]


def show(policy: Policy, fits: list[GridFit]) -> dict:
    known = known_orders(fits)
    judged = [judge(fit, policy, MAX_EPOCHS, known=known.get((fit.run, fit.owner, fit.stage)))
              for fit in fits]  # fmt: skip
    print(policy.name)
    rows = summarize(judged)
    for row in rows:
        print(f"  {row['grid']:>9}: {row['successes']}/{row['fits']} within 0.01 on test "
              f"(lower bound {row['lower_bound']:.3f}); spend median {row['spend_median']:.2f}, "
              f"p90 {row['spend_p90']:.2f}, pooled {row['spend_pooled']:.2f}")  # fmt: skip
    return rows[-1]


BOUND = 0.90
"""The choosing rule, fixed before the held-out set was judged: of the policies whose success
on the development fits has a lower bound of at least this, the one that spends least (pooled);
ties to the earlier policy of ``POLICIES``."""
POLICIES = [Policy(first, eta, guard) for first in (1, 2, 3, 5, 10) for eta in (2, 3, 4)
            for guard in (None, "lr")]  # fmt: skip


def choose() -> None:
    fits = fits_of("dev")
    overall = {policy: show(policy, fits) for policy in POLICIES}
    allowed = [policy for policy in POLICIES if overall[policy]["lower_bound"] >= BOUND]
    chosen = min(allowed, key=lambda policy: overall[policy]["spend_pooled"], default=None)
    print("chosen:", "none reaches the bound" if chosen is None else chosen.name)
    print("\n| policy | success on test | lower bound | spend median | p90 | pooled |")
    print("|---|---|---|---|---|---|")
    for policy, row in overall.items():
        print(
            f"| {policy.name} | {row['successes']}/{row['fits']} | {row['lower_bound']:.3f} | "
            f"{row['spend_median']:.2f} | {row['spend_p90']:.2f} | {row['spend_pooled']:.2f} |"
        )
    noise = {(f.run, f.owner, f.stage): f for f in fits_of("noise")}
    print("noise floor (the grid against itself, other trial seeds):", noise_floor(fits, noise))


def compare_known(policy: Policy) -> None:
    """``policy`` with and without the previous step's winner kept (``keep_known``), measured
    apart from the choice: on each set's fits that have a stored previous step, then on all."""
    for name in ("dev", "heldout"):
        fits = fits_of(name)
        known = known_orders(fits)
        chained = [fit for fit in fits if (fit.run, fit.owner, fit.stage) in known]
        for subset, label in ((chained, "fits with a previous step"), (fits, "all fits")):
            print(f"== {name}: {label} ({len(subset)})")
            for variant in (policy, replace(policy, known=True)):
                show(variant, subset)


if __name__ == "__main__":
    torch.set_num_threads(1)
    command, *rest = sys.argv[1:]
    if command == "collect":
        collect(rest[0])
    elif command == "choose":
        choose()
    else:
        first, eta, *guard = rest
        policy = Policy(int(first), int(eta), guard[0] if guard else None)
        if command == "known":
            compare_known(policy)
        else:
            show(policy, fits_of("heldout"))
