"""``kedro sweep`` from the command line's options to the report it prints."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
from kedro.config import MissingConfigException
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project
from pydantic import ValidationError

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import one_line
from seq2final.sweep.cluster import SweepSettings, connect, has_gpus, tracking_server
from seq2final.sweep.driver import Sweep, SweepReport
from seq2final.sweep.graph import Stores, SweepGraph, expand, parse_request


@dataclass(frozen=True)
class SweepOptions:
    """The command line's options."""

    sequences: str
    archs: str | None
    methods: str | None
    pairs: str | None
    seeds: str | None
    budget: str | None
    dataset: str | None
    data_path: str | None
    workers: int | None
    scheduler: str | None
    threads: int | None
    env: str | None
    params: dict[str, Any]
    dry_run: bool

    def run_params(self) -> dict[str, Any]:
        """The run parameters every task gets: the options' and ``--params``'."""
        named = {"budget": self.budget, "dataset": self.dataset, "data_path": self.data_path}
        return {**self.params, **{k: v for k, v in named.items() if v is not None}}


def sweep(options: SweepOptions, say: Callable[[str], None]) -> int:
    """Check everything, print the graph (``--dry-run``) or run it; the exit status."""
    if options.workers is not None and options.workers < 1:
        raise Seq2FinalError(f"--workers {options.workers}: needs at least 1 worker")
    if options.threads is not None and options.threads < 1:
        raise Seq2FinalError(f"--threads {options.threads}: needs at least 1 thread")
    project = Path.cwd()
    bootstrap_project(project)
    base = options.run_params()
    with KedroSession.create(project_path=project, env=options.env, runtime_params=base) as session:
        context = session.load_context()  # the project's hooks check the parameters and MLflow
        params = context.params
        settings = _settings(context.config_loader)
        catalog = context.catalog
        stores = Stores(
            catalog.load("sequences"),
            catalog.load("historical_states"),
            catalog.load("adapt_results"),
        )
    request = parse_request(
        options.sequences, options.archs or params["arch"], options.methods, options.pairs,
        options.seeds,
    )  # fmt: skip
    graph = expand(request, params, stores)
    say(describe(graph, stores))
    if options.dry_run:
        return 0
    if graph.finished(stores):  # nothing to train: no cluster, no server
        say("Nothing to train: every sequence, state and job of the sweep is finished.")
        return 0
    threads = options.threads or settings.threads
    logging.getLogger("distributed").setLevel(logging.WARNING)  # the sweep reports progress
    tracking = params["mlflow"]["enabled"] and not params["mlflow"]["tracking_uri"]
    client, cluster = connect(options.scheduler, options.workers, settings, threads)
    try:
        remote = options.scheduler is not None or settings.cluster.type != "local"
        server = (
            tracking_server(mlflow.get_tracking_uri(), project, remote)
            if tracking
            else contextlib.nullcontext(None)
        )
        with server as url:
            worker_params = dict(base)
            if url:  # every worker logs over HTTP to the one server
                worker_params["mlflow"] = {**base.get("mlflow", {}), "tracking_uri": url}
            run = Sweep(
                client, project, options.env, worker_params, params, request, stores,
                has_gpus(client), say,
            )  # fmt: skip
            report = run.run(graph)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    say(summary(report))
    return 1 if report.failures or report.lost_jobs else 0


def _settings(config_loader: Any) -> SweepSettings:
    """``conf/<env>/sweep.yml``, checked (absent: a local cluster)."""
    config_loader.config_patterns.setdefault("sweep", ["sweep*", "sweep*/**"])
    try:
        raw = config_loader["sweep"]
    except MissingConfigException:
        raw = {}
    try:
        return SweepSettings.model_validate(raw or {})
    except ValidationError as error:
        raise Seq2FinalError(f"sweep.yml: {one_line(error, SweepSettings)}") from None


def describe(graph: SweepGraph, stores: Stores) -> str:
    """The graph in a few lines: how many sequences, states and jobs, and how many are done."""
    counts = graph.counts(stores)
    lines = [
        "Sweep: "
        + ", ".join(f"{total} {what} ({done} done)" for what, (total, done) in counts.items())
    ]
    for work in graph.sequences:
        jobs = {job.key for plan in work.plans for job in plan.jobs}
        finished = sum(work.built and key in stores.results for key in jobs)
        state = "built" if work.built else "to build"
        lines.append(f"  {work.spec.key}: {state}, jobs {finished}/{len(jobs)} done")
    return "\n".join(lines)


def summary(report: SweepReport) -> str:
    """The sweep's last lines: what ran, what failed (with its log), where the tables are."""
    kinds = ("sequence", "state", "job", "evaluate")
    ran = ", ".join(f"{report.trained[k]} {k}" for k in kinds if report.trained[k]) or "nothing"
    reused = ", ".join(f"{report.reused[k]} {k}" for k in kinds if report.reused[k]) or "nothing"
    per_job = report.driver_seconds / max(1, report.jobs)
    lines = [
        f"Sweep finished in {report.seconds:.1f} s: ran {ran}; reused {reused}.",
        f"Driver overhead: {report.driver_seconds:.2f} s in all, {per_job:.3f} s per job.",
    ]
    for failure in report.failures:
        lines.append(
            f"FAILED {failure.task.kind} {failure.task.name}: {failure.reason} "
            f"(log: {failure.task.log_path})"
        )
    if report.lost_jobs:
        lines.append(f"{report.lost_jobs} job(s) not run: their sequence could not be built")
    lines += [f"Tables: {folder}" for folder in report.tables]
    return "\n".join(lines)
