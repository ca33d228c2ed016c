"""``kedro bench``: run the chosen sections, print each ratio on its own line, write the page.

Figures are kept per section in ``benchmarks/results/bench.json``, each with the machine it was
measured on and the command that measured it; ``docs/benchmarks.md`` is rendered from all of them,
so a run of one section updates its part of the page and leaves the others' figures as they were
measured.

``--quick`` is the first look on a fresh clone: the fit and fused sections only (they train on
random images, so no data set is needed), shortened, on two architectures, in about a minute on
two cores. Its figures are not comparable with the committed page's, so it writes its own JSON and
page under ``data/08_reporting/bench/`` (or ``--output``) and never ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kedro.framework.session import KedroSession

from seq2final.bench.fit_speed import measure_fit_speed
from seq2final.bench.fused_speed import measure_fused_speed
from seq2final.bench.machine import describe_machine
from seq2final.bench.projection import (
    PAPER_SEQUENCES,
    count_fits,
    device_hours,
    measure_rates,
    stack_sizes,
)
from seq2final.bench.replay import (
    FROZEN_POLICY,
    MARGIN,
    Policy,
    judge,
    known_orders,
    noise_floor,
    parse_policy,
    stored_grids,
    summarize,
)
from seq2final.bench.search import measure_search
from seq2final.config.checks import CheckedRun, validate_parameters
from seq2final.core.errors import Seq2FinalError
from seq2final.core.startup import bootstrap_once
from seq2final.data.sampler import build_sequence
from seq2final.data.sequence import ShiftSequence
from seq2final.data.sources import load_source
from seq2final.methods.blocks import space_of
from seq2final.models import ARCHITECTURES
from seq2final.training.engine import Engine
from seq2final.training.search import get_budget

SECTIONS = ("fit", "fused", "search", "projection", "replay")
QUICK_SECTIONS = ("fit", "fused")  # random images: no data set needed
ARCHS = ("convnet_4", "densenet_1", "resnet_4")  # of fit and fused: one of each family
# On two idle cores the quick fit and fused sections took 53 s for densenet_1 and 29 s for the
# other two together (imports and Kedro's start-up on top): --quick leaves densenet_1 out unless
# --archs names it, to stay near a minute.
QUICK_ARCHS = ("convnet_4", "resnet_4")
RESULTS = Path("benchmarks/results/bench.json")
SEARCH_STORE = Path("benchmarks/results/search")  # resumes an interrupted search
REPLAY_STORE = Path("benchmarks/results/search_replay")  # benchmarks/search_replay.py's grids
PAGE = Path("docs/benchmarks.md")
NOTES = Path("benchmarks/notes")
"""A section's notes (``<section>.md``): how its figures were chosen and what they say, written
by hand (each number in them beside the command that printed it) and rendered after the
section's figures, so that re-measuring a section keeps them; a notes file of no section (a
script's measurement, ``own_data.md``) is rendered at the end of the page."""
QUICK_OUTPUT = Path("data/08_reporting/bench")  # beside the other reports, ignored by git


@dataclass(frozen=True)
class BenchOptions:
    """The command line's options."""

    sections: str | None  # None: every section, or QUICK_SECTIONS with ``quick``
    quick: bool
    archs: str | None  # None: ARCHS, or QUICK_ARCHS with ``quick``
    data_path: str
    budgets: str
    seeds: int
    device: str
    env: str | None = None
    output: str | None = None  # folder for bench.json and benchmarks.md
    policy: str | None = None  # the replay section's FIRST,ETA[,GUARD][,known]; None: FROZEN


def destinations(options: BenchOptions) -> tuple[Path, Path]:
    """Where the figures' JSON and the page go (relative to the project).

    A full run keeps the committed page, ``docs/benchmarks.md``, and its JSON; a quick run's
    shortened figures would replace the measured ones there, so it goes to ``QUICK_OUTPUT``
    and is refused the committed page even when ``--output`` names its folder.
    """
    if options.output is not None:
        folder = Path(options.output)
        results, page = folder / "bench.json", folder / "benchmarks.md"
    elif options.quick:
        results, page = QUICK_OUTPUT / "bench.json", QUICK_OUTPUT / "benchmarks.md"
    else:
        results, page = RESULTS, PAGE
    if options.quick and (
        page.resolve() == PAGE.resolve() or results.resolve() == RESULTS.resolve()
    ):
        raise Seq2FinalError(
            f"--output {options.output}: a quick run never writes {PAGE} or {RESULTS} (the "
            "measured page and its figures); name another folder"
        )
    return results, page


def bench(options: BenchOptions, say: Callable[[str], None]) -> None:
    """Check the options, run each section, merge its figures into the JSON, render the page."""
    sections = _listed(
        "sections",
        options.sections or ",".join(QUICK_SECTIONS if options.quick else SECTIONS),
        SECTIONS,
    )
    if options.quick and set(sections) - set(QUICK_SECTIONS):
        raise Seq2FinalError(
            f"--quick --sections {','.join(sections)}: --quick shortens only "
            f"{' and '.join(QUICK_SECTIONS)}; run search and projection without --quick"
        )
    archs = _listed(
        "archs", options.archs or ",".join(QUICK_ARCHS if options.quick else ARCHS),
        list(ARCHITECTURES),
    )  # fmt: skip
    if options.seeds < 1:
        raise Seq2FinalError(f"--seeds {options.seeds}: needs at least 1 seed")
    results_path, page = destinations(options)
    project = Path.cwd()
    bootstrap_once(project)
    with KedroSession.create(project_path=project, env=options.env) as session:
        context = session.load_context()  # type: ignore[attr-defined]  # Kedro types create() as returning its AbstractSession
        params = context.config_loader["parameters"]  # raw, as the hooks read them
    engine = Engine.model_validate({**params["training"], "device": options.device})
    device = engine.torch_device()
    budgets = {}
    if {"search", "projection"} & set(sections) and not Path(options.data_path).is_file():
        raise Seq2FinalError(
            f"--data-path {options.data_path}: no such file; the search and projection sections "
            "need the CIFAR-10 npz (make it with the README's CIFAR-10 command)"
        )
    policy = parse_policy(options.policy or FROZEN_POLICY)
    if "search" in sections:
        names = [b.strip() for b in options.budgets.split(",") if b.strip()]
        budgets = {name: get_budget(params["budgets"], name) for name in names}
    command = "kedro bench " + shlex.join(sys.argv[2:]) if len(sys.argv) > 2 else "kedro bench"
    results: dict[str, Any] = {}
    for section in sections:
        started = time.perf_counter()
        if section == "fit":
            figures: Any = measure_fit_speed(
                archs, engine, images=1000 if options.quick else 2000,
                epochs=1 if options.quick else 2, rounds=2 if options.quick else 3, say=say,
                compiled=not options.quick,  # compiling takes a minute per architecture
            )  # fmt: skip
        elif section == "fused":
            widths = [1, 8] if options.quick else [1, 4, 8, 16]
            if device.type == "cuda" and not options.quick:
                widths.append(32)
            figures = measure_fused_speed(
                archs, engine, widths, images=100 if options.quick else 500, epochs=1,
                rounds=1 if options.quick else 2, say=say,
            )  # fmt: skip
        elif section == "search":
            figures = _search(params, options, engine, budgets, say)
        elif section == "replay":
            figures = _replay(policy, say)
        else:
            figures = _projection(params, options, engine, say)
        # Read again: another section's run may have written in the meantime (hours apart).
        results = json.loads(results_path.read_text()) if results_path.exists() else {}
        results[section] = {
            "machine": describe_machine(device),
            "command": command,
            "measured": time.strftime("%Y-%m-%d"),
            "seconds": round(time.perf_counter() - started, 1),
            "figures": figures,
        }
        results_path.parent.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(results, indent=1) + "\n")
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(results, quick=options.quick))
    say(f"Figures: {results_path}; page: {page}")


def _listed(option: str, text: str, valid: Sequence[str]) -> list[str]:
    """The names of a comma list option, each one of ``valid``; otherwise one line."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in valid]
    if unknown or not names:
        raise Seq2FinalError(
            f"--{option} {text!r}: unknown {', '.join(unknown) or 'empty'}; "
            f"valid: {', '.join(valid)}"
        )
    return names


def _rcl(
    params: dict[str, Any], options: BenchOptions, engine: Engine
) -> tuple[CheckedRun, ShiftSequence]:
    """The paper's protocol on the real CIFAR-10 ``rcl`` sequence, checked as a run checks it
    (its ``paper`` budget, the ``final`` protocol, the preset's own sizes), and the sequence."""
    sizes = {**params["build_sequences"], "test_size": None, "oracle_size": None}
    run = validate_parameters({
        **params, "sequence": "rcl", "dataset": "npz", "data_path": options.data_path,
        "seed": None, "build_sequences": sizes, "budget": "paper", "protocol": "final",
        "protocol_view": None, "method": None, "historical": None, "final": None,
        "training": engine.model_dump(),
    })  # fmt: skip
    source = load_source("npz", options.data_path, run.parameters.build_sequences.raw_dir)
    return run, build_sequence(run.spec, source)


def _projection(
    params: dict[str, Any], options: BenchOptions, engine: Engine, say: Callable[[str], None]
) -> dict[str, Any]:
    run, sequence = _rcl(params, options, engine)
    on_gpu = engine.torch_device().type == "cuda"
    width, images = (16, 1000) if on_gpu else (8, 200)  # the CPU: minutes, not hours
    rows: list[dict[str, Any]] = []
    for arch in ARCHITECTURES:
        fits = count_fits(run, sequence, arch)
        sizes = {width} | {size for f in fits for size in stack_sizes(f.trials, width)}
        rates = measure_rates(arch, engine, sizes, images)
        hours = {k: v * len(PAPER_SEQUENCES) for k, v in device_hours(fits, rates, width).items()}
        rows.append({
            "arch": arch, "fits": len(fits), "trials": sum(f.trials for f in fits),
            "train_images_per_s": round(rates.train, 1),
            "fused_model_images_per_s": round(rates.stack(width), 1),
            "stack_images_per_s": {size: round(rate, 1) for size, rate in rates.fused_train.items()},
            "eval_images_per_s": round(rates.evaluate, 1),
            "sequential_hours": round(hours["sequential"], 1),
            "fused_hours": round(hours["fused"], 1),
        })  # fmt: skip
        say(f"projection {arch}: {rows[-1]['sequential_hours']:.1f} device-hours one trial at "
            f"a time, {rows[-1]['fused_hours']:.1f} fused (K={width})")  # fmt: skip
    total = {k: sum(r[k] for r in rows) for k in ("sequential_hours", "fused_hours")}
    say(
        f"projection fused vs sequential ratio: {total['sequential_hours'] / total['fused_hours']:.3f} "
        f"({total['sequential_hours']:.0f} vs {total['fused_hours']:.0f} device-hours)"
    )
    return {"width": width, "sequences": list(PAPER_SEQUENCES), "rows": rows, **total}


def _search(
    params: dict[str, Any],
    options: BenchOptions,
    engine: Engine,
    budgets: dict[str, Any],
    say: Callable[[str], None],
) -> dict[str, Any]:
    _, sequence = _rcl(params, options, engine)
    spaces = {
        fit: space_of(params["final_modes"][mode], "space", "final_modes")
        for fit, mode in (("baseline", "scratch"), ("ft", "ft"))
    }
    figures = measure_search(
        sequence, "convnet_4", budgets, spaces, list(range(options.seeds)), engine,
        store=SEARCH_STORE,
    )  # fmt: skip
    for row in figures["summary"]:
        if row["budget"] != "paper grid":
            say(f"search {row['budget']} {row['fit']}: epochs to within {figures['margin']} of "
                f"the grid's best, ratio to the grid's epochs {row['fraction_of_grid']:.3f} "
                f"({row['reached']}/{row['seeds']} seeds reached it; all it spent, ratio to the "
                f"grid's epochs {row['spent_of_grid']:.3f})")  # fmt: skip
    return figures


def _replay(policy: Policy, say: Callable[[str], None]) -> dict[str, Any]:
    """``policy`` replayed on the stored grids: the development set's, the held-out set's and
    the grid against itself (``noise``: the development runs with other trial seeds)."""
    figures: dict[str, Any] = {"policy": policy.name, "margin": MARGIN}
    for name in ("dev", "heldout"):
        fits, about = stored_grids(REPLAY_STORE / f"{name}.json")
        if not fits:
            raise Seq2FinalError(f"{REPLAY_STORE / name}.json: no stored grids; collect them "
                                 f"with benchmarks/search_replay.py collect {name}")  # fmt: skip
        known = known_orders(fits)
        judged = [judge(fit, policy, about["max_epochs"],
                        known=known.get((fit.run, fit.owner, fit.stage))) for fit in fits]  # fmt: skip
        figures[name] = {"runs": len({fit.run for fit in fits}), "cpu": about["cpu"],
                         "max_epochs": about["max_epochs"], "rows": summarize(judged)}  # fmt: skip
        overall = figures[name]["rows"][-1]
        say(f"replay {name}: {overall['successes']}/{overall['fits']} within {MARGIN} on test, "
            f"pooled spend {overall['spend_pooled']:.2f}")  # fmt: skip
    dev, _ = stored_grids(REPLAY_STORE / "dev.json")
    noise, _ = stored_grids(REPLAY_STORE / "noise.json")
    figures["noise"] = noise_floor(dev, {(f.run, f.owner, f.stage): f for f in noise})
    return figures


def _replay_table(figures: dict[str, Any]) -> list[str]:
    lines = [f"Policy: {figures['policy']}.", ""]
    for name, title in (("dev", "Development set (the policy was chosen on it)"),
                        ("heldout", "Held-out set (evaluated once, the policy frozen)")):  # fmt: skip
        part = figures[name]
        lines += [
            f"{title}: {part['runs']} runs, grids of at most {part['max_epochs']} epochs, "
            f"trained on {part['cpu']}.", "",
            *_markdown_table(
                ["grid", "fits", f"selection within {figures['margin']} of the grid's on test",
                 "rate", "95 % lower bound", "spend median", "spend p90", "spend pooled"],
                [[r["grid"], str(r["fits"]), str(r["successes"]), f"{r['rate']:.3f}",
                  f"{r['lower_bound']:.3f}", f"{r['spend_median']:.2f}",
                  f"{r['spend_p90']:.2f}", f"{r['spend_pooled']:.2f}"] for r in part["rows"]],
            ), "",
        ]  # fmt: skip
    noise = figures["noise"]
    if noise["fits"]:
        lines.append(
            f"Noise floor: the grid retrained with other trial seeds selected within "
            f"{figures['margin']} of its first selection's test accuracy on {noise['successes']} "
            f"of {noise['fits']} development fits (rate {noise['rate']:.3f}, 95 % lower bound "
            f"{noise['lower_bound']:.3f}): no policy can be asked to agree with the grid more "
            "often than the grid agrees with itself."
        )  # fmt: skip
    return lines


def render(results: dict[str, Any], quick: bool = False) -> str:
    """``docs/benchmarks.md`` (or a quick run's page) from every section's figures."""
    lines = [
        "# Benchmarks" + (" (quick)" if quick else ""),
        "",
        "Every figure here was measured by `kedro bench` (the command is shown with each "
        "section, with the machine and date); `kedro bench --sections NAME` re-measures one "
        "section and leaves the others as they are. Ratios compare like with like in one run.",
        "",
        f"`kedro bench --quick` (fit and fused only, shortened; no data set needed) writes its "
        f"own page, `{QUICK_OUTPUT}/benchmarks.md`, and never this one."
        if not quick
        else "Measured by `kedro bench --quick`: the fit and fused sections, shortened, as a "
        f"first look; the measured page is `{PAGE}`, which a quick run never writes.",
        "",
    ]
    for section in SECTIONS:
        if section not in results:
            continue
        entry = results[section]
        machine = entry["machine"]
        lines += [
            f"## {TITLES[section]}",
            "",
            f"`{entry['command']}` on {machine['cpu']} ({machine['cores']} cores, "
            f"{machine['torch_threads']} torch threads), device {machine['device']}, torch "
            f"{machine['torch']}; measured {entry['measured']} in {entry['seconds']} s.",
            "",
            ABOUT[section],
            "",
            *RENDERERS[section](entry["figures"]),
            "",
        ]
        notes = NOTES / f"{section}.md"
        if not quick and notes.exists():  # what a person wrote of the figures, kept by reruns
            lines += [notes.read_text().rstrip(), ""]
    if not quick:  # measurements of scripts outside `kedro bench`, each beside its command
        for notes in sorted(NOTES.glob("*.md")) if NOTES.exists() else []:
            if notes.stem not in SECTIONS:
                lines += [notes.read_text().rstrip(), ""]
    return "\n".join(lines)


def _markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _fit_table(rows: list[dict[str, Any]]) -> list[str]:
    compiled = all("compile_ratio" in r for r in rows)
    extra = ["compiled fit, images/s", "compiled / eager"] if compiled else []
    return _markdown_table(
        ["architecture", "bare loop, images/s", "our fit, images/s", "ratio", *extra],
        [[f"`{r['arch']}`", f"{r['bare_images_per_s']:.0f}", f"{r['fit_images_per_s']:.0f}",
          f"{r['ratio']:.3f}",
          *([f"{r['compiled_images_per_s']:.0f}", f"{r['compile_ratio']:.3f}"] if compiled else [])]
         for r in rows],
    )  # fmt: skip


def _fused_table(rows: list[dict[str, Any]]) -> list[str]:
    return _markdown_table(
        ["architecture", "K", "sequential, model-images/s", "fused, model-images/s", "ratio"],
        [[f"`{r['arch']}`", str(r["width"]), f"{r['sequential_model_images_per_s']:.0f}",
          f"{r['fused_model_images_per_s']:.0f}", f"{r['ratio']:.3f}"] for r in rows],
    )  # fmt: skip


def _projection_table(figures: dict[str, Any]) -> list[str]:
    table = _markdown_table(
        ["architecture", "tuned fits", "trials", "train images/s",
         f"fused (K = {figures['width']}) model-images/s", "eval images/s",
         "device-hours, one at a time", "device-hours, fused"],
        [[f"`{r['arch']}`", str(r["fits"]), str(r["trials"]), f"{r['train_images_per_s']:.0f}",
          f"{r['fused_model_images_per_s']:.0f}", f"{r['eval_images_per_s']:.0f}",
          f"{r['sequential_hours']:.1f}", f"{r['fused_hours']:.1f}"] for r in figures["rows"]],
    )  # fmt: skip
    table.append(
        f"| **all** | | | | | | **{figures['sequential_hours']:.0f}** | "
        f"**{figures['fused_hours']:.0f}** |"
    )
    return table


def _search_table(figures: dict[str, Any]) -> list[str]:
    return [
        f"Epochs spent until a finished trial came within {figures['margin']} of the paper "
        "grid's best validation accuracy on the same fit (`convnet_4`, the `rcl` final step; "
        "mean over seeds; a budget that never got there is charged all it spent).",
        "",
        *_markdown_table(
            ["fit", "budget", "epochs to target", "fraction of the grid's epochs",
             "all epochs spent, fraction of the grid's", "seeds reaching it", "selected valid",
             "selected test"],
            [[r["fit"], r["budget"], f"{r['epochs_to_target']:.0f}",
              f"{r['fraction_of_grid']:.2f}", f"{r['spent_of_grid']:.2f}",
              f"{r['reached']}/{r['seeds']}", f"{r['valid']:.3f}",
              f"{r['test']:.3f}"] for r in figures["summary"]],
        ),
        "",
        "Per seed (the grid's row: its epochs and its selected configuration's accuracies):",
        "",
        *_markdown_table(
            ["fit", "seed", "budget", "epochs to target", "all epochs spent", "selected valid",
             "selected test"],
            _per_seed_rows(figures),
        ),
    ]  # fmt: skip


def _per_seed_rows(figures: dict[str, Any]) -> list[list[str]]:
    """One row per grid and budget run, so the spread behind each mean is on the page."""
    rows = []
    for grid in figures["grids"]:
        fit, seed = grid["fit"], grid["seed"]
        rows.append([fit, str(seed), "paper grid", "", str(grid["epochs"]),
                     f"{grid['best_valid']:.3f}", f"{grid['test_accuracy']:.3f}"])  # fmt: skip
        for run in figures["runs"]:
            if (run["fit"], run["seed"]) == (fit, seed):
                reached = run["epochs_to_target"]
                rows.append([fit, str(seed), run["budget"],
                             "never" if reached is None else str(reached), str(run["epochs"]),
                             f"{run['best_valid']:.3f}", f"{run['test_accuracy']:.3f}"])  # fmt: skip
    return rows


ABOUT = {
    "fit": (
        "Images/s of `training.loop.fit` and of a bare PyTorch loop doing the same work (Adam, "
        "cross entropy plus L2 on conv/linear weights, dropout 0.5, uint8 batches scaled on the "
        "device, a validation pass before training and after every epoch), alternating in one "
        "process, median of the rounds (2,000 images, 2 epochs, 3 rounds; `--quick`: 1,000, 1, "
        "2). Target: ratio ≥ 0.95 for every architecture. Without `--quick`, the same fit with "
        "`training.compile: true` takes turns with them too (timed after a warm-up fit that "
        "compiles; compiling itself is not counted), so the last column says where compiling "
        "pays."
    ),
    "fused": (
        "K configurations of one fit (learning rates spread over a decade, dropout 0.5, L2 "
        "1e-4, a seed each; patience off) trained one after another with `fit` and as one "
        "stacked model with `fit_fused`, alternating in one process, median of the rounds; "
        "model-images/s = K × training images × epochs / seconds (K = 1, 4, 8, 16, and 32 on CUDA; "
        "500 images, 1 epoch, 2 rounds; `--quick`: K = 1, 8; 100 images, 1 round). `training.fuse: auto` fuses up to 16 trials on CUDA and none on the CPU, whatever this ratio. "
        "Target on one GPU: K = 32 at ≥ 10 × sequential and ≥ 300,000 model-images/s for "
        "`convnet_4`."
    ),
    "projection": (
        "The paper's protocol (5 sequences × every architecture × 18 methods, `paper` grids, "
        "one seed) in hours of this device. What it trains is counted by running every "
        "method's states and jobs through the project's training functions on the real `rcl` sequence with "
        "each tuned fit recorded instead of trained (grid size × epochs × images per epoch); "
        "the five sequences have the same step sizes, so `rcl` counts for all. Every trial is "
        "charged its 100 epochs (an upper bound; the grid trials of the search section ran "
        "them). Rates measured here per architecture: one fit's training pass, a fused stack's "
        "of every size the grids split into (stacks of K, then one of what is left, as the "
        "tuner runs them; a stack of one is a single fit), and evaluation (counted at the "
        "single-model rate in both columns); one epoch over 1,000 random images with K = 16 on "
        "CUDA, 200 with K = 8 on the CPU."
    ),
    "replay": (
        "Every tuned fit of five methods' runs (step 0, ERM's and SFT's historical fits, the "
        "baseline, FT, ST-1's 24-point side-module grid, the joint model's 3-point grid) trained "
        "on its whole grid by `benchmarks/search_replay.py collect`, which keeps each "
        "configuration's validation curve and its selected model's test accuracy. A "
        "configuration trains the same under every budget, so a halving policy's decisions "
        "follow from the curves: replayed here with no training. Success on a fit: the test "
        "accuracy of the policy's selection at least the grid's selection's minus the margin; "
        "spend: the epochs it trains, pruned configurations included, over the grid's; the "
        "bound is the one-sided 95 % Clopper–Pearson lower bound of the success rate over these "
        "fits. `--policy FIRST,ETA[,GUARD][,known]` replays another policy."
    ),
    "search": (
        "For the baseline's fit (from scratch) and FT's fit (from one fixed ERM model of the "
        "historical steps) on the final step, the paper grid is run in full per seed; each "
        "budget then tunes the same fit. Target: `default` within 0.01 of the grid's best "
        "validation accuracy while spending ≤ 35 % of the grid's epochs (on validation: on "
        "test, what a user compares, `default`'s selection fell more than 0.01 below the "
        "grid's on 2 of these 6 fits; the replay section below judges on test). `default` is the "
        "paper's grid under successive halving (rungs at 30 and 90 epochs), chosen by this "
        "measurement; `tpe30` (4 TPE trials of ≤ 30 epochs, median pruner) was `default` before "
        "it. Each study's outcome is stored by content under `benchmarks/results/search` and "
        "reused, so the seconds above count only the studies that invocation trained."
    ),
}

TITLES = {
    "replay": "Search: synchronous halving replayed on stored grids, judged on test",
    "fit": "Single-model fit against a same-work bare loop",
    "fused": "Fused trials against the same trials one after another",
    "projection": "The paper's protocol, projected",
    "search": "Search: epochs each budget spends",
}
RENDERERS: dict[str, Callable[[Any], list[str]]] = {
    "fit": _fit_table,
    "fused": _fused_table,
    "search": _search_table,
    "projection": _projection_table,
    "replay": _replay_table,
}
