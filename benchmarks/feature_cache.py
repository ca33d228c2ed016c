"""The representation study's LP arm with the body's features cached and without: the same curve
points, timed like for like in one run (docs/representations.md, "Cached features").

    .venv/bin/python ../shared/tools/cifar10_jpeg_to_npz.py data/01_raw/cifar10.npz
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/feature_cache.py              # ~6 min
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/feature_cache.py --histories 1,2,3,4,5

The study's sequence (env ``representation_study``: seven CIFAR-10 steps of 1,000 images
rotating 15° a step, built as ``test_then_train`` builds it) and its curves' settings: LP of
``convnet_4`` at 50 to 800 final-step images, Feature Forgetting's schedule, at most 30 epochs,
the ``training`` block of ``conf/base``. Its states are ERM models of steps 0..h−1 (h =
``--histories``), each trained here by one fit (Adam 10⁻³, L2 10⁻⁴, at most 15 epochs, the
study budget's cap) rather than the study's tuned ones, so the benchmark needs no stored state;
the curve points, each fitted once with ``curve_point(..., cache_features=False)`` and once
with ``True`` one after the other, are those the study fits on such a state. Each pair must
agree (epochs, validation and test accuracy), or the run fails. The wall times, their ratio and
every point are written to ``benchmarks/results/feature_cache.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from seq2final.core.seeds import derived_seed
from seq2final.data.sampler import build_sequence
from seq2final.data.sequence import ShiftSequence
from seq2final.data.sources import load_source
from seq2final.data.spec import resolve_spec
from seq2final.models import build_model
from seq2final.protocols import sequence_options
from seq2final.representations.fit import curve_point, nested_order, subset
from seq2final.training import Engine, Task, TensorSplit
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import fit

PROJECT = Path(__file__).resolve().parents[1]
RESULT = PROJECT / "benchmarks" / "results" / "feature_cache.json"
STATE_EPOCHS = 15  # the study budget's max_epochs


def study_sequence(params: dict[str, Any]) -> ShiftSequence:
    """The study's sequence, built as its ``build_sequences`` run builds it."""
    spec = resolve_spec(
        params["sequence"], params["dataset"], str(PROJECT / params["data_path"]), params["seed"],
        params["build_sequences"]["test_size"], params["build_sequences"]["oracle_size"],
        **sequence_options(params["protocol"]),
    )  # fmt: skip
    return build_sequence(spec, load_source(spec.dataset, spec.data_path, PROJECT / "data/01_raw"))


def split(sequence: ShiftSequence, step: int, name: str) -> TensorSplit:
    return TensorSplit.from_arrays(*sequence.step(step).split(name))


def erm_state(sequence: ShiftSequence, history: int, engine: Engine, seed: int) -> torch.nn.Module:
    """An ERM model of steps 0..history−1, pooled, from one fit."""
    torch.manual_seed(derived_seed(seed, "feature_cache", history, "init"))
    model = build_model("convnet_4", len(sequence.class_names))
    steps = range(history)
    task = Task([TensorSplit.concat([split(sequence, t, "train") for t in steps])],
                TensorSplit.concat([split(sequence, t, "valid") for t in steps]))  # fmt: skip
    hp = HyperParameters({"lr": 1e-3, "weight_decay": 1e-4, "dropout": 0.0})
    fit(model, task, hp, engine, STATE_EPOCHS, derived_seed(seed, "feature_cache", history))
    return model


def timed_point(state: torch.nn.Module, splits: tuple, engine: Engine, seed: int,
                options: dict[str, Any], cache: bool) -> dict[str, Any]:  # fmt: skip
    started = time.perf_counter()
    point = curve_point(state, "lp", *splits, engine, options["max_epochs"], seed,
                        options.get("patience", 2), cache_features=cache)  # fmt: skip
    return {"seconds": time.perf_counter() - started, "epochs": point.epochs,
            "valid_accuracy": point.valid_accuracy, "test_accuracy": point.test_accuracy}  # fmt: skip


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", default="1,3,5", help="comma list of 1..5: ERM states")
    parser.add_argument("--sizes", default="50,100,200,400,800")
    args = parser.parse_args()
    if not (PROJECT / "data/01_raw/cifar10.npz").exists():
        parser.error("data/01_raw/cifar10.npz is missing; make it with the first command above")
    params = yaml.safe_load((PROJECT / "conf/representation_study/parameters.yml").read_text())
    base = yaml.safe_load((PROJECT / "conf/base/parameters.yml").read_text())
    engine = Engine(**{**base["training"], "device": "cpu"})
    options = params["representations"]
    seed = params["seed"]
    sequence = study_sequence(params)
    final = sequence.num_steps - 1
    train, valid, test = (split(sequence, final, n) for n in ("train", "valid", "test"))
    order = nested_order(train.y.numpy(), derived_seed(seed, "curves", ""))
    rows = []
    for history in [int(h) for h in args.histories.split(",")]:
        started = time.perf_counter()
        state = erm_state(sequence, history, engine, seed)
        print(f"ERM state of {history} step(s): {time.perf_counter() - started:.0f} s")
        for size in [int(s) for s in args.sizes.split(",")]:
            splits = (subset(train, order, size), valid, test)
            point_seed = derived_seed(seed, "feature_cache", history, size)
            off, on = (timed_point(state, splits, engine, point_seed, options, cache)
                       for cache in (False, True))  # fmt: skip
            same = {k: off[k] == on[k] for k in ("epochs", "valid_accuracy", "test_accuracy")}
            rows.append({"history": history, "size": size, "off": off, "on": on, "same": same})
            print(f"h={history} n={size}: {off['seconds']:.1f} s → {on['seconds']:.1f} s, "
                  f"{off['epochs']} epochs, test {off['test_accuracy']:.3f} / "
                  f"{on['test_accuracy']:.3f}")  # fmt: skip
    total_off = sum(r["off"]["seconds"] for r in rows)
    total_on = sum(r["on"]["seconds"] for r in rows)
    threads = os.environ.get("OMP_NUM_THREADS")
    result = {
        "command": (f"OMP_NUM_THREADS={threads} " if threads else "")
        + f".venv/bin/python benchmarks/feature_cache.py --histories {args.histories} "
        f"--sizes {args.sizes}",
        "machine": f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s)",
        "points": len(rows), "seconds_uncached": round(total_off, 1),
        "seconds_cached": round(total_on, 1), "speedup": round(total_off / total_on, 2),
        "all_same": all(all(r["same"].values()) for r in rows), "rows": rows,
    }  # fmt: skip
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(rows)} LP points: {total_off:.1f} s uncached, {total_on:.1f} s cached, "
          f"{result['speedup']}× faster; identical points: {result['all_same']}")  # fmt: skip
    if not result["all_same"]:
        raise SystemExit("cached and uncached points differ: see " + str(RESULT))


if __name__ == "__main__":
    main()
