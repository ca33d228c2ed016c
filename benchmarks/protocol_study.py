"""The real-data protocol study of docs/protocols.md: Wild-Time's and NED's questions asked of one
sequence, every method trained under each, summarised in one table.

    .venv/bin/python benchmarks/protocol_study.py                  # conf/protocol_study (below: ~1 h)
    .venv/bin/python benchmarks/protocol_study.py --summary-only   # the table from what is trained

On a 2-core machine two processes at one torch thread each, started in different orders, train
more per hour than one at two threads (``convnet_1``'s training step on a 2-core EPYC: 56 ms a
batch at two threads; 83 ms at one thread with two processes side by side, 1.34 times the
throughput); each waits for a view the other is training and then reuses it (the study of
docs/protocols.md trained a seed in 49 to 60 minutes so, on a 2-core EPYC):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/protocol_study.py &
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/protocol_study.py --order mixed_split,eval_stream,eval_fix

It runs ``eval_fix``, ``eval_stream`` and ``mixed_split`` with the environment's parameters (the
protocols share their views, and an interrupted study resumes where it stopped), then
``evaluate`` and ``visualize`` for each (tables and figures under ``data/08_reporting``), and
prints a Markdown table, one row per method: Eval-Fix's ID accuracy, OOD average and worst,
Eval-Stream's average and worst, the mixed split's OOD average, Eval-Fix's ID→OOD drop and
the OOD accuracy mixing the training data gains, and the training GFLOPs of every view trained
(each historical state the views share counted once); then the mean drop and the share of it
that mixing closes, over the methods.

Every finished job's result record (JSON, no model) is kept under ``benchmarks/results/
protocol_study/`` as soon as a protocol's run ends (and by ``--summary-only``, which a second
process may run while the study trains), and copied back into the result store before
anything trains: a study spread over machines or sessions without its data folder resumes from
its records, training only the views it has no record of (and the historical states those
continue), and ``--summary-only`` needs nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from kedro.framework.session import KedroSession

from seq2final.bench.machine import describe_machine
from seq2final.config.checks import validate_parameters
from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import atomic_write
from seq2final.core.startup import bootstrap_once
from seq2final.pipelines.evaluate.nodes import gather_results
from seq2final.protocols import FIRST_MODEL, ProtocolOptions
from seq2final.reporting.protocols import ProtocolScore, protocol_scores
from seq2final.reporting.tables import shown_name, train_flops_once
from seq2final.training import Engine
from seq2final.training.records import ResultRecord

PROJECT = Path(__file__).resolve().parents[1]
KEPT = PROJECT / "benchmarks" / "results" / "protocol_study"
PROTOCOLS = ("eval_fix", "eval_stream", "mixed_split")
PIPELINES = ["build_sequences", "pretrain_historical", "adapt_final", "evaluate", "visualize"]


def run_study(env: str, overrides: Mapping[str, Any], protocols: Sequence[str]) -> None:
    """Train and report ``protocols`` in this order, keeping each one's records as it ends."""
    bootstrap_once(PROJECT)
    for protocol in protocols:
        runtime = {**overrides, "protocol": protocol}
        with KedroSession.create(project_path=PROJECT, env=env, runtime_params=runtime) as session:
            session.run(pipeline_names=PIPELINES)
        keep_records(env, overrides)


def result_folder(env: str, overrides: Mapping[str, Any]) -> Path:
    """Where the study's result store keeps its records (the catalog's ``adapt_results``)."""
    bootstrap_once(PROJECT)
    runtime = {**overrides, "protocol": PROTOCOLS[0]}
    with KedroSession.create(project_path=PROJECT, env=env, runtime_params=runtime) as session:
        return Path(session.load_context().catalog.load("adapt_results").results)


def restore_records(env: str, overrides: Mapping[str, Any]) -> int:
    """Copy the kept records the result store lacks into it; how many."""
    folder = result_folder(env, overrides)
    folder.mkdir(parents=True, exist_ok=True)
    missing = [p for p in sorted(KEPT.glob("*.json")) if not (folder / p.name).exists()]
    for path in missing:
        _copy(path, folder / path.name)
    return len(missing)


def _copy(source: Path, target: Path) -> None:
    """Copy in one step: a process reading ``target`` meanwhile sees all of it or none."""
    atomic_write(target, lambda partial: shutil.copyfile(source, partial))


def keep_records(env: str, overrides: Mapping[str, Any]) -> None:
    """Copy the study's records (its sequence, architecture, budget and methods) into
    :data:`KEPT`, each once: a record never changes once its job has finished."""
    KEPT.mkdir(parents=True, exist_ok=True)
    folder = result_folder(env, overrides)
    for record in study_records(env, overrides)[1]:
        if not (KEPT / f"{record.job_key}.json").exists():
            _copy(folder / f"{record.job_key}.json", KEPT / f"{record.job_key}.json")


def study_records(
    env: str, overrides: Mapping[str, Any]
) -> tuple[dict[str, Any], list[ResultRecord]]:
    """The study's parameters and view records: its sequence's, as ``evaluate`` gathers them
    (two settings under one budget name refused in one line), of its architecture, budget and
    methods."""
    bootstrap_once(PROJECT)
    runtime = {**overrides, "protocol": PROTOCOLS[0]}  # any temporal protocol: views' records
    with KedroSession.create(project_path=PROJECT, env=env, runtime_params=runtime) as session:
        context = session.load_context()
        params = context.config_loader["parameters"]  # raw, as the hooks read them
        store = context.catalog.load("adapt_results")
    methods = study_methods(params)
    records = [
        record
        for record in gather_results(validate_parameters(params).spec, store)
        if (record.arch, record.budget) == (params["arch"], params["budget"])
        # time 0's one model is every method's (docs/protocols.md), under its own name
        and (shown_name(record) in methods or (record.historical, record.final) == FIRST_MODEL)
    ]
    return params, records


def study_methods(params: Mapping[str, Any]) -> list[str]:
    """The methods the study asks for (one name or a list in the parameters)."""
    return params["method"] if isinstance(params["method"], list) else [params["method"]]


def summary(params: Mapping[str, Any], records: list[ResultRecord]) -> str:
    """The study's Markdown table, each cell the mean over the seeds trained under all three
    protocols (± their standard deviation when there are several), then the mean ID→OOD drop of
    Eval-Fix and the share of it that the mixed split closes, over all methods and over those
    whose drop is above the mean. The share is not given per method: where a method's drop is a
    point or two (a model fitted last on one rotated step has a low ID accuracy on the pooled
    steps), a ratio to it says nothing, and such methods' gains inflate the share over all."""
    options = ProtocolOptions(**(params.get("protocol_options") or {}))
    scores = {
        protocol: by_method_and_seed(protocol_scores(records, protocol, options))
        for protocol in PROTOCOLS
    }
    methods = study_methods(params)
    lines = [
        "| method | ID (fix) | OOD avg (fix) | OOD worst (fix) | stream avg | stream worst | "
        "OOD avg (mixed) | ID→OOD drop (fix) | OOD gain by mixing | training GFLOPs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    drop_and_gain: dict[str, tuple[float, float]] = {}
    seeds_seen: set[int] = set()
    for method in methods:
        fix, stream, mixed = (scores[p].get(method, {}) for p in PROTOCOLS)
        seeds = sorted(set(fix) & set(stream) & set(mixed))
        if not seeds:
            lines.append(f"| {method} | not trained yet | | | | | | | | |")
            continue
        seeds_seen.update(seeds)
        drop = [fix[s]["id_accuracy"] - fix[s]["ood_average"] for s in seeds]
        gain = [mixed[s]["ood_average"] - fix[s]["ood_average"] for s in seeds]
        drop_and_gain[method] = (statistics.mean(drop), statistics.mean(gain))
        cells = [
            [fix[s]["id_accuracy"] for s in seeds],
            [fix[s]["ood_average"] for s in seeds],
            [fix[s]["ood_worst"] for s in seeds],
            [stream[s]["average"] for s in seeds],
            [stream[s]["worst"] for s in seeds],
            [mixed[s]["ood_average"] for s in seeds],
        ]
        flops = statistics.mean(
            train_flops_once(r for r in records if shown_name(r) == method and r.seed == s)
            for s in seeds
        )
        lines.append(
            f"| {method} | {' | '.join(_cell(values) for values in cells)} | "
            f"{_cell(drop, '+')} | {_cell(gain, '+')} | {flops / 1e9:,.0f} |"
        )
    machine = ", ".join(f"{k} {v}" for k, v in describe_machine(engine_device(params)).items())
    totals = ""
    if drop_and_gain:
        mean_drop = statistics.mean(d for d, _ in drop_and_gain.values())
        clear = {m: dg for m, dg in drop_and_gain.items() if dg[0] > mean_drop}
        totals = (
            f"Seeds {', '.join(map(str, sorted(seeds_seen)))}. Over the {len(drop_and_gain)} "
            f"methods: {_drop_and_gain(drop_and_gain.values())}. "
        )
        if clear and len(clear) < len(drop_and_gain):
            totals += (
                f"Over those whose drop is above the mean ({', '.join(clear)}): "
                f"{_drop_and_gain(clear.values())}. "
            )
    return "\n".join([*lines, "", f"{totals}Machine: {machine}."])


def _drop_and_gain(pairs: Iterable[tuple[float, float]]) -> str:
    """Mean ID→OOD drop and mean OOD gain by mixing of (drop, gain) pairs, and the share of the
    drop the gain closes where there is a drop to close."""
    drops, gains = zip(*pairs, strict=True)
    drop, gain = statistics.mean(drops), statistics.mean(gains)
    share = f" ({gain / drop:.0%} of the drop)" if drop > 0 else ""
    return f"mean ID→OOD drop (eval_fix) {drop:.3f}, mean OOD gain by mixing {gain:.3f}{share}"


def _cell(values: list[float], sign: str = "") -> str:
    """The mean of ``values``, with their standard deviation when there are several."""
    mean = f"{statistics.mean(values):{sign}.3f}"
    return f"{mean} ± {statistics.stdev(values):.3f}" if len(values) > 1 else mean


def by_method_and_seed(rows: list[ProtocolScore]) -> dict[str, dict[int, Mapping[str, Any]]]:
    """A protocol's numbers by method, then seed."""
    table: dict[str, dict[int, Mapping[str, Any]]] = {}
    for row in rows:
        table.setdefault(row.method, {})[row.seed] = row.numbers
    return table


def engine_device(params: Mapping[str, Any]) -> torch.device:
    return Engine.model_validate(params["training"]).torch_device()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="protocol_study")
    parser.add_argument("--params", default="{}", help="JSON runtime parameters over the env's")
    parser.add_argument("--summary-only", action="store_true", help="train nothing")
    parser.add_argument(
        "--order",
        default=",".join(PROTOCOLS),
        help="the protocols to train, in this order: two processes started in different orders "
        "(one torch thread each) share the CPU better than one, and wait for each other's views",
    )
    args = parser.parse_args()
    os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "1")
    overrides = json.loads(args.params)
    restored = restore_records(args.env, overrides)
    if restored:
        print(f"{restored} kept record(s) restored from {KEPT.relative_to(PROJECT)}")
    if not args.summary_only:
        order = args.order.split(",")
        if unknown := sorted(set(order) - set(PROTOCOLS)):
            parser.error(
                f"--order {','.join(unknown)}: not a protocol of the study; valid: "
                f"{', '.join(PROTOCOLS)}"
            )
        run_study(args.env, overrides, order)
    try:
        keep_records(args.env, overrides)
        params, records = study_records(args.env, overrides)
    except Seq2FinalError as error:  # e.g. two settings under the budget's name: one line
        parser.exit(2, f"{error}\n")
    print(summary(params, records))


if __name__ == "__main__":
    main()
