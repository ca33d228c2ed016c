"""The fits a stream trains, counted per method: docs/protocols.md, "Chains that grow".

Under ``eval_stream`` every time t of a stream is a view (steps 0..t) with a job per method. A
continual method's model of time t is its model of time t−1 trained on step t: its chain's state
of steps 0..t−1 is shared by every view that continues it, so it fits each step once (and each
view's final step once), where re-running the chain in every view fits ~T²/2 times.

    .venv/bin/python benchmarks/stream_fits.py           # count: every fit recorded, none trained
    .venv/bin/python benchmarks/stream_fits.py --train   # the 84-step stream trained (budget smoke)

Two streams: 20 steps of digits (a source step and 19 rotated ones, window 2) and an 84-step
Yearbook-shaped one (the ``yearbook`` preset on a synthetic folder with the real layout, 84 years,
Wild-Time's window of 10 years). Counting runs the project's pipelines with each tuned fit
recorded instead of trained (its untrained model handed on, and EWC's Fisher information, which
is not a fit, left out), so what is counted is what the pipelines ask for. ``--train`` trains the 84-step stream for SFT and ERM with budget ``smoke``
and counts the same way while training. Both use ``convnet_1`` (the counts do not depend on the
architecture; the chains' stored models do) and run in a throw-away copy of the project.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

from kedro.framework.session import KedroSession
from torch import nn

from seq2final.bench.projection import counted_fit
from seq2final.core.startup import bootstrap_once
from seq2final.data.sources.portraits import write_synthetic_portraits
from seq2final.methods.context import Context
from seq2final.protocols import ProtocolOptions, stream_times

PROJECT = Path(__file__).resolve().parents[1]
PIPELINES = ["build_sequences", "pretrain_historical", "adapt_final"]
DIGITS_20 = ":".join(["source100", *["rotation40"] * 19])
# the owner keys' readable parts of each method's fits: its chain's states (none for ERM), its jobs
OWNERS = {
    "sft": ("sequential-", ".sequential+ft."),
    "ewc": ("sequential_ewc-", ".sequential_ewc+ft."),
    "erm": (None, ".none+all_erm."),
}
SHARED = {"step0": ("step0-",), "time 0": (".none+scratch.",)}


@contextlib.contextmanager
def project_copy() -> Iterator[Path]:
    """A throw-away copy of the project (its configuration), made the working directory."""
    here = Path.cwd()
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        shutil.copytree(PROJECT / "conf", project / "conf", ignore=shutil.ignore_patterns("local"))
        (project / "conf" / "local").mkdir()
        shutil.copy(PROJECT / "pyproject.toml", project / "pyproject.toml")
        for name in ("data", "logs", "src"):
            (project / name).mkdir()
        os.chdir(project)
        try:
            yield project
        finally:
            os.chdir(here)


def run_stream(runtime: Mapping[str, Any], train: bool) -> tuple[Counter[str], float]:
    """Run the stream's pipelines; each tuned fit's owner key, counted, and the wall seconds.
    Without ``train`` each fit is recorded and its untrained model handed on."""
    owners: Counter[str] = Counter()
    tuned = Context.tuned

    def count(
        ctx: Context, stage: str, space: Any, make_model: Callable[[], nn.Module], task: Any
    ) -> tuple[nn.Module, Any]:
        owners[ctx.owner_key] += 1
        if train:
            return tuned(ctx, stage, space, make_model, task)
        ctx.fits.append(counted_fit(stage, 0))
        model = make_model()
        model.eval()
        return model, SimpleNamespace(extras={})

    def no_fisher(model: nn.Module, data: Any, engine: Any) -> dict[str, Any]:
        return {name: value.detach() * 0 for name, value in model.named_parameters()}

    with project_copy() as project:
        runtime = dict(runtime)
        if "data_path" in runtime:
            runtime["data_path"] = str(write_synthetic_portraits(project / "yearbook", per_year=5))
        bootstrap_once(project)
        started = time.perf_counter()
        with (
            mock.patch.object(Context, "tuned", count),
            # counting, EWC's Fisher information (not a fit) is not computed either
            mock.patch("seq2final.methods.historical.fisher_information", no_fisher)
            if not train
            else contextlib.nullcontext(),
            KedroSession.create(project_path=project, env="test", runtime_params=runtime) as s,
        ):
            s.run(pipeline_names=PIPELINES)
        return owners, time.perf_counter() - started


def fits_by_method(owners: Counter[str]) -> dict[str, dict[str, int]]:
    """Each method's fits: its chain's states', its jobs', and the shared ones it uses."""
    table = {}
    for method, (state, job) in OWNERS.items():
        table[method] = {
            "states": sum(n for key, n in owners.items() if state and key.startswith(state)),
            "jobs": sum(n for key, n in owners.items() if job in key),
        }
    for name, marks in SHARED.items():
        table[name] = {"shared": sum(n for k, n in owners.items() if any(m in k for m in marks))}
    return table


def report(name: str, steps: int, window: int, owners: Counter[str]) -> list[str]:
    """Markdown rows: per method, its fits and its fits per step of the stream."""
    times = len(stream_times(steps, ProtocolOptions(window=window)))
    table = fits_by_method(owners)
    shared = table["step0"]["shared"]
    rows = []
    for method in OWNERS:
        own = table[method]["states"] + table[method]["jobs"]
        step0 = shared if method != "erm" else 0  # the step-0 model the chains start from
        total = own + step0 + table["time 0"]["shared"]
        rows.append(
            f"| {name} | {steps} | {times} | {method} | {table[method]['states']} | "
            f"{table[method]['jobs']} | {step0} | {total} | {total / steps:.2f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help="train the 84-step stream")
    args = parser.parse_args()
    os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "1")
    common = {"arch": "convnet_1", "budget": "smoke", "mlflow": {"enabled": False},
              "protocol": "eval_stream"}  # fmt: skip
    yearbook = {**common, "sequence": "yearbook", "data_path": "set per run"}
    digits = {**common, "sequence": DIGITS_20, "build_sequences": {"test_size": 10}}
    streams = [("yearbook-shaped", 84, 10, yearbook)]
    if not args.train:
        streams.insert(0, ("digits", 20, 2, {**digits, "protocol_options": {"window": 2}}))
    methods = ["sft", "erm"] if args.train else list(OWNERS)
    lines = [
        "| stream | steps | times | method | chain-state fits | job fits | step-0 fit | "
        "fits (with time 0's) | per step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    totals = []
    for name, steps, window, runtime in streams:
        owners, seconds = run_stream({**runtime, "method": methods}, args.train)
        rows = report(name, steps, window, owners)
        lines += [row for row, method in zip(rows, OWNERS, strict=True) if method in methods]
        totals.append(f"{name}: {sum(owners.values())} fits in {seconds:.0f} s")
    print("\n".join([*lines, "", *totals]))


if __name__ == "__main__":
    main()
