"""The real-data intensity study of docs/intensity.md: Control+Shift's questions asked of
families of CIFAR-10 sequences whose final step's shift grows.

    .venv/bin/python benchmarks/intensity_study.py                     # every arm (hours on a CPU)
    .venv/bin/python benchmarks/intensity_study.py --families rotation --archs convnet_1
    .venv/bin/python benchmarks/intensity_study.py --summary-only      # the tables from records

Each arm is one ``kedro sweep`` (env ``intensity_study``) of one family at one augmentation
setting over the architectures, with three jobs a member: ``erm+as_is`` (ERM on the source,
scored on the shifted final step without adapting: the robustness question), ``ft`` and
``baseline`` (what the source is worth to the scarce final step). The members of a family share
one history, so with ``pretrain_historical.shared_history`` (the env's) they share one source
model: each arm trains its ERM model once and scores it under every member's shift. The sweep measures every
member's shift and runs ``robustness`` on the family; this script then prints, per family,
architecture and augmentation, the unadapted model's clean accuracy, its robustness slopes on
the 1-NN distance and on the dial (95 % intervals, R²), and FT's gain over the baseline at the
smallest and largest intensity.

Every finished job's result record and every member's distances (small CSV and JSON files, no
model) are kept under ``benchmarks/results/intensity_study/`` after each arm and copied back
before anything trains, so the study resumes across sessions without retraining a job it has a
record of.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from seq2final.core.files import atomic_write
from seq2final.data.family import members as family_members
from seq2final.data.spec import name_slug

PROJECT = Path(__file__).resolve().parents[1]
KEPT = PROJECT / "benchmarks" / "results" / "intensity_study"
ENV = "intensity_study"
FAMILIES = {
    # name: (spec with @*, intensities) — the source is the same for every member
    "rotation": ("source2000:rotation@*/250", [0, 15, 30, 60, 90]),
    "corruption": ("source2000:corruption@*/250", [0, 2, 4, 8, 16]),
    "overlap": ("source2000:overlap@*/250", [0, 30, 60, 90, 135]),
    # twice the source images of the same support: Control+Shift's "more data" arm
    "overlap_2x": ("source4000:overlap@*/250", [0, 30, 60, 90, 135]),
    # the training support covers the shifted one: half the 2,000 historical images from the
    # source's cap, half from the final step's (``overlap@0`` keeps the cap where it turned to):
    # Control+Shift's "full support" arm, at the same number of training images as ``overlap``
    "overlap_full": ("source1000:overlap@*/1000:overlap@0/250", [0, 30, 60, 90, 135]),
}
AUGMENT = {"none": "study", "flip_crop": "study_aug"}  # augmentation → the arm's budget name
PAIRS = "erm:as_is,erm:ft,none:scratch"
STORES = {  # kept kind → the project's folder and the files' suffix
    "results": (PROJECT / "data/07_model_output/results", ".json"),
    "distances": (PROJECT / "data/04_feature/shift_distances", ".csv"),
}


def restore() -> int:
    """Copy the kept files the project's stores lack into them; how many."""
    count = 0
    for kind, (folder, suffix) in STORES.items():
        folder.mkdir(parents=True, exist_ok=True)
        for path in sorted((KEPT / kind).glob(f"*{suffix}")):
            if not (folder / path.name).exists():
                _copy(path, folder / path.name)
                count += 1
    return count


def keep(specs: Sequence[str]) -> None:
    """Copy the study's files into :data:`KEPT`: the result records of its members' jobs (a
    finished job's record never changes) and their distances (measured again when a frame
    lacked the history's row)."""
    slugs = {f"{name_slug(spec)}-" for spec in specs}
    for kind, (folder, suffix) in STORES.items():
        (KEPT / kind).mkdir(parents=True, exist_ok=True)
        for path in sorted(folder.glob(f"*{suffix}")):
            if not any(path.name.startswith(slug) for slug in slugs):
                continue
            target = KEPT / kind / path.name
            if not target.exists() or target.read_bytes() != path.read_bytes():
                _copy(path, target)  # distances measured again (the history's row) replace


def _copy(source: Path, target: Path) -> None:
    """Copy in one step: a process reading ``target`` meanwhile sees all of it or none."""
    atomic_write(target, lambda partial: shutil.copyfile(source, partial))


def members(family: str) -> list[str]:
    """The family's member specs, written as ``kedro sweep`` writes them."""
    return [member.sequence for member in family_members(*FAMILIES[family])]


def sweep(family: str, augment: str, archs: str, seeds: str, workers: int) -> None:
    """One arm: the family's members at one augmentation setting, over ``archs`` and ``seeds``
    (each seed its own draw of every member, its own source model)."""
    spec, intensities = FAMILIES[family]
    params = f"intensities={intensities},training.augment={augment},budget={AUGMENT[augment]}"
    command = [
        str(Path(sys.executable).with_name("kedro")), "sweep", "--env", ENV, "--sequences", spec,
        "--pairs", PAIRS, "--archs", archs, "--seeds", seeds, "--workers", str(workers),
        "--params", params,
    ]  # fmt: skip
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"}
    subprocess.run(command, cwd=PROJECT, env=env, check=True)


def robustness_read(family: str, augment: str) -> None:
    """The family's robustness pipeline on its records (no training): ``--summary-only``. An
    arm without a record is left out (the summary says it is not trained yet)."""
    spec, intensities = FAMILIES[family]
    params = f"sequence={spec},intensities={intensities},budget={AUGMENT[augment]}"
    command = [str(Path(sys.executable).with_name("kedro")), "run", "--env", ENV,
               "--pipelines", "robustness", "--params", params]  # fmt: skip
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"}
    done = subprocess.run(command, cwd=PROJECT, env=env, capture_output=True, text=True)
    if done.returncode and "no member of the family has results" not in done.stdout + done.stderr:
        raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)


def summary(families: Sequence[str], augments: Sequence[str]) -> str:
    """One row per family, architecture and augmentation, from the robustness tables."""
    from seq2final.reporting.tables import report_folder

    lines = [
        "| family | arch | augment | seeds | clean acc (erm+as_is) | slope on 1-NN ×1000 [95 %] | "
        "R² | slope per unit of dial [95 %] | R² | FT − baseline, least → most intense |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for family in families:
        spec, _ = FAMILIES[family]
        for augment in augments:
            budget = AUGMENT[augment]
            tables = PROJECT / "data/08_reporting/robustness_tables" / report_folder(spec, "npz")
            slopes_path, history_path = (
                tables / f"{budget}-{n}.csv" for n in ("slopes", "history")
            )
            if not slopes_path.exists():
                lines.append(f"| {family} | – | {augment} | – | not trained yet | | | | | |")
                continue
            slopes, history = pd.read_csv(slopes_path), pd.read_csv(history_path)
            for arch in sorted(set(slopes["arch"])):
                row = slopes[(slopes["method"] == "erm+as_is") & (slopes["arch"] == arch)]
                nn1, dial = (row[row["measure"] == m].iloc[0] for m in ("nn1", "intensity"))
                ft = history[(history["method"] == "ft") & (history["arch"] == arch)]
                ft = ft.sort_values("intensity")["gain"]
                lines.append(
                    f"| {family} | {arch} | {augment} | {int(nn1['seeds'])} | "
                    f"{nn1['clean_accuracy']:.3f} | "
                    f"{_line(nn1, 1000)} | {nn1['r2']:.2f} | {_line(dial, 1)} | {dial['r2']:.2f} | "
                    f"{ft.iloc[0]:+.3f} → {ft.iloc[-1]:+.3f} |"
                )
    return "\n".join(lines)


def per_seed(families: Sequence[str], augments: Sequence[str]) -> str:
    """Per family, architecture, augmentation and seed with every member trained: the
    unadapted model's clean accuracy, its drop at the most intense member, and its lines on the
    dial and on that seed's own 1-NN distances (the members' history → final rows), so a
    finding can be read seed by seed as well as on the seeds' mean."""
    from seq2final.reporting.robustness import fit_line, history_distances

    records = [json.loads(p.read_text()) for p in sorted((KEPT / "results").glob("*.json"))]
    lines = [
        "| family | arch | augment | seed | clean acc | drop at the most intense | "
        "slope per unit of dial [95 %] | slope on 1-NN ×1000 [95 %] |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for family in families:
        intensity_of = dict(zip(members(family), FAMILIES[family][1], strict=True))
        for augment in augments:
            cell = pd.DataFrame([r for r in records if r["sequence"] in intensity_of
                                 and r["budget"] == AUGMENT[augment]
                                 and r["method"] == "erm+as_is"])  # fmt: skip
            if cell.empty:
                continue
            for (arch, seed), runs in cell.groupby(["arch", "seed"]):
                if len(runs) < len(intensity_of):
                    continue  # not every member trained at this seed
                runs = runs.assign(intensity=runs["sequence"].map(intensity_of))
                runs = runs.sort_values("intensity")
                delta = runs["test_accuracy"] - runs["test_accuracy"].iloc[0]
                nn1 = [history_distances(_distances(k)).get("nn1") for k in runs["sequence_key"]]
                on_nn1 = (
                    _line(pd.Series(fit_line(nn1, delta)), 1000)
                    if None not in nn1 else "not measured"
                )  # fmt: skip
                lines.append(
                    f"| {family} | {arch} | {augment} | {seed} | "
                    f"{runs['test_accuracy'].iloc[0]:.3f} | {delta.iloc[-1]:+.3f} | "
                    f"{_line(pd.Series(fit_line(runs['intensity'], delta)), 1)} | {on_nn1} |"
                )
    return "\n".join(lines)


def _distances(key: str) -> pd.DataFrame | None:
    """A member's kept distances at one seed (its sequence key), if measured."""
    path = KEPT / "distances" / f"{key}.csv"
    return pd.read_csv(path) if path.exists() else None


def _line(row: pd.Series, scale: float) -> str:
    return f"{row['slope'] * scale:+.3g} [{row['low'] * scale:+.3g}, {row['high'] * scale:+.3g}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--archs", default="convnet_1,resnet_2")
    parser.add_argument("--augment", default=",".join(AUGMENT))
    parser.add_argument("--seeds", default="1007", help="comma list; the env's seed is 1007")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--summary-only", action="store_true", help="train nothing")
    args = parser.parse_args()
    families, augments = args.families.split(","), args.augment.split(",")
    for name, given, valid in (("families", families, FAMILIES), ("augment", augments, AUGMENT)):
        if unknown := sorted(set(given) - set(valid)):
            parser.error(f"--{name} {','.join(unknown)}: valid: {', '.join(valid)}")
    if not (PROJECT / "data/01_raw/cifar10.npz").exists():
        parser.error(
            "data/01_raw/cifar10.npz is missing; make it with: .venv/bin/python "
            "../shared/tools/cifar10_jpeg_to_npz.py data/01_raw/cifar10.npz"
        )
    restored = restore()
    if restored:
        print(f"{restored} kept file(s) restored from {KEPT.relative_to(PROJECT)}")
    specs = [m for family in families for m in members(family)]
    for family in families:
        for augment in augments:
            if not args.summary_only:
                sweep(family, augment, args.archs, args.seeds, args.workers)
                keep(specs)
            robustness_read(family, augment)
    keep(specs)
    print(summary(families, augments))
    print()
    print(per_seed(families, augments))


if __name__ == "__main__":
    main()
