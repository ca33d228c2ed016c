"""``kedro sweep`` from the command line's options to the report it prints."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import mlflow
from kedro.config import MissingConfigException
from kedro.framework.session import KedroSession
from mlflow import MlflowClient
from pydantic import ValidationError

from seq2final.config.checks import validate_parameters
from seq2final.config.parameters import MlflowOptions
from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import one_line
from seq2final.core.startup import bootstrap_once
from seq2final.data.family import expand_sequences, members
from seq2final.data.presets import NATURAL
from seq2final.data.sources import SOURCES
from seq2final.data.spec import resolve_spec
from seq2final.reporting.robustness import history_distances
from seq2final.reporting.tables import report_folder
from seq2final.sweep.batch import (
    LOST_JOB_GRACE,
    close_batch_cluster,
    idle_word,
    jobqueue_options,
    submit_errors,
)
from seq2final.sweep.cluster import (
    SweepSettings,
    connect,
    forked_local_workers,
    has_gpus,
    tracking_server,
)
from seq2final.sweep.driver import Sweep, SweepReport
from seq2final.sweep.graph import Stores, SweepGraph, SweepRequest, expand, parse_request
from seq2final.sweep.work import PipelineRun, run_task
from seq2final.tracking.names import (
    MlflowNames,
    check_experiment_names,
    check_registry_names,
    fail_fast,
)


@dataclass(frozen=True)
class SweepOptions:
    """The command line's options."""

    sequences: str | None  # None: the run parameters' sequence, as --archs and --budget default
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
    bootstrap_once(project)
    base = options.run_params()
    params, settings, stores, measured = _project(project, options, base)
    request = _request(options, params, say)
    intensities = base.get("intensities", params.get("intensities"))
    sequences, families = expand_sequences(request.sequences, intensities)
    if families:  # each member is a sequence of its own; the family is read by `robustness`
        request = dataclasses.replace(request, sequences=sequences)
        params, base = {**params, "intensities": None}, {**base, "intensities": None}
        say(f"Families: {', '.join(families)} at intensities {intensities}")
    planning = time.perf_counter()
    graph = expand(request, params, stores)
    if params["mlflow"]["enabled"]:
        check_names(graph, MlflowOptions.model_validate(params["mlflow"]))
    planning = time.perf_counter() - planning
    say(describe(graph, stores))
    if options.dry_run:
        return 0
    if graph.finished(stores):  # nothing to train: no cluster, no server
        say("Nothing to train: every sequence, state and job of the sweep is finished.")
        for folder in evaluate_stale(graph, stores, project, options.env, base):
            say(f"Tables: {folder}")
    else:
        report = _run_on_cluster(options, settings, params, base, request, stores, graph, say)
        report.driver_seconds += planning
        say(summary(report))
        if report.failures or report.lost_jobs:
            return 1
    for folder in read_families(
        families, intensities, request.seeds, params, measured, project, options.env, base
    ):
        say(f"Robustness: {folder}")
    return 0


def _project(
    project: Path, options: SweepOptions, base: dict[str, Any]
) -> tuple[dict[str, Any], SweepSettings, Stores, Any]:
    """The project's parameters (raw: the workers get them as --params), checked by its hooks
    with MLflow, its sweep settings, stores and measured distances (a family's slopes read
    them)."""
    # --sequences replaces the run parameter's sequence, so a family's intensities are checked
    # with the families they belong to (below), not with that sequence
    own = {k: v for k, v in base.items() if k != "intensities" or options.sequences is None}
    with KedroSession.create(project_path=project, env=options.env, runtime_params=own) as session:
        context = session.load_context()  # type: ignore[attr-defined]  # Kedro types create() as returning its AbstractSession
        params = context.config_loader["parameters"]
        settings = _settings(context.config_loader)
        catalog = context.catalog
        stores = Stores(
            catalog.load("sequences"),
            catalog.load("historical_states"),
            catalog.load("adapt_results"),
        )
        return params, settings, stores, catalog.load("measured_distances")


def _request(
    options: SweepOptions, params: dict[str, Any], say: Callable[[str], None]
) -> SweepRequest:
    """The sweep's lists; without --sequences, the run parameter's sequence, whole (a spec
    string may hold commas), said so."""
    request = parse_request(
        options.sequences or str(params["sequence"]), options.archs or params["arch"],
        options.methods, options.pairs, options.seeds,
    )  # fmt: skip
    if options.sequences is not None:
        return request
    dataset = params.get("dataset")
    if isinstance(dataset, str) and dataset in SOURCES and SOURCES[dataset].natural:  # periods
        say(f"Sequence: {NATURAL} (the periods of dataset {dataset})")
    else:
        say(f"Sequence: {params['sequence']} (the run parameter; --sequences to choose)")
    return dataclasses.replace(request, sequences=(str(params["sequence"]),))


def _run_on_cluster(
    options: SweepOptions, settings: SweepSettings, params: dict[str, Any],
    base: dict[str, Any], request: SweepRequest, stores: Stores, graph: SweepGraph,
    say: Callable[[str], None],
) -> SweepReport:  # fmt: skip
    """Start the cluster and, where runs are tracked locally, one MLflow server beside it (each
    takes seconds), then run the graph on it."""
    project = Path.cwd()
    threads = options.threads or settings.threads
    logging.getLogger("distributed").setLevel(logging.WARNING)  # the sweep reports progress
    tracking = params["mlflow"]["enabled"] and not params["mlflow"]["tracking_uri"]
    remote = options.scheduler is not None or settings.cluster.type != "local"
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(1) as pool:
        stack.enter_context(forked_local_workers(options.scheduler, settings))
        if settings.cluster.type != "local":  # a lost job is replaced at once
            stack.enter_context(
                dask.config.set({"distributed.deploy.lost-worker-timeout": LOST_JOB_GRACE})
            )
        watch = stack.enter_context(submit_errors(say))  # a refused sbatch, said once
        asked = time.perf_counter()
        connecting = pool.submit(connect, options.scheduler, options.workers, settings, threads)
        stack.callback(_disconnect, connecting)
        if options.scheduler:  # a running cluster answers at once: unreachable is said first
            connecting.result()
        url = stack.enter_context(
            tracking_server(mlflow.get_tracking_uri(), project, remote)
            if tracking
            else contextlib.nullcontext(None)
        )
        client, cluster = connecting.result()
        worker_params = dict(base)
        if url:  # every worker logs over HTTP to the one server
            worker_params["mlflow"] = {**base.get("mlflow", {}), "tracking_uri": url}
        run = Sweep(
            client, project, options.env, worker_params, request, stores,
            has_gpus(client, settings), say, asked=asked, stall_seconds=settings.stall_minutes * 60,
            idle_word=lambda: idle_word(cluster, settings.cluster, watch.last),
        )  # fmt: skip
        return run.run(graph)


def _disconnect(connecting: Future) -> None:
    """Close the client and the cluster the sweep started, once they have started."""
    if connecting.exception() is not None:
        return
    client, cluster = connecting.result()
    client.close()
    if cluster is not None:
        close_batch_cluster(cluster)


def check_names(graph: SweepGraph, options: MlflowOptions) -> None:
    """Every experiment and registered-model name the sweep's jobs will use, checked against
    MLflow's rules before any work (the project's hooks check only the default parameters')."""
    names = {
        MlflowNames.of(
            options, sequence=plan.sequence_name, dataset=plan.dataset, arch=plan.arch,
            method=job.model_name, budget=plan.budget_name, seed=plan.seed,
        )
        for work in graph.sequences
        for plan in work.plans
        for job in plan.jobs
    }  # fmt: skip
    check_experiment_names(sorted({n.experiment for n in names}))
    if options.log_models:
        with fail_fast():
            registered = {m for n in names for m in (n.registered_model, n.best_model)}
            check_registry_names(MlflowClient(), sorted(registered))


def evaluate_stale(
    graph: SweepGraph, stores: Stores, project: Path, env: str | None, params: dict[str, Any]
) -> list[str]:
    """Evaluate, here, each sequence whose tables are missing or older than its newest result
    (a sweep stopped after its last job, before ``evaluate``); the tables' folders."""
    folders = []
    for name, dataset in dict.fromkeys((w.spec.name, w.spec.dataset) for w in graph.sequences):
        folder = f"data/08_reporting/result_table_reports/{report_folder(name, dataset)}/"
        newest = max(
            (
                stores.results.record_path(job.key).stat().st_mtime
                for work in graph.sequences
                if (work.spec.name, work.spec.dataset) == (name, dataset)
                for plan in work.plans
                for job in plan.jobs
            ),
            default=0.0,
        )
        tables = [p.stat().st_mtime for p in (project / folder).glob("*.md")]
        if not tables or min(tables) < newest:
            log_path = project / "logs" / "sweep" / f"evaluate-{name}-{dataset}.log"
            task = PipelineRun("evaluate", name, "evaluate",
                        {**params, "sequence": name, "dataset": dataset}, str(log_path))  # fmt: skip
            run_task(str(project), env, task)
        folders.append(folder)
    return folders


def read_families(
    families: tuple[str, ...],
    intensities: list[float] | None,
    seeds: tuple[int | None, ...],
    params: dict[str, Any],
    measured: Mapping[str, Any],
    project: Path,
    env: str | None,
    base: dict[str, Any],
) -> list[str]:
    """Run ``robustness``, here, on each family whose members the sweep finished, after
    ``quantify_shift`` on each member at each of the sweep's seeds not measured yet (each seed
    draws its own images, and the slopes read each seed's own distances), or measured before
    the history's row existed; its reports' folders."""
    folders = []
    for family in families:
        for member, seed in itertools.product(members(family, intensities), seeds):
            at_seed = {"sequence": member.sequence, **({} if seed is None else {"seed": seed})}
            spec = validate_parameters({**params, **at_seed}).spec
            if not history_distances(measured.get(spec.key)):
                log_path = project / "logs" / "sweep" / f"quantify-{spec.key}.log"
                run_task(str(project), env, PipelineRun(
                    "quantify", member.sequence, "quantify_shift", {**base, **at_seed},
                    str(log_path),
                ))  # fmt: skip
        first = members(family, intensities)[0].sequence
        folder = report_folder(family, resolve_spec(first, params["dataset"]).dataset)
        task = PipelineRun(
            "robustness", family, "robustness",
            {**base, "sequence": family, "intensities": intensities},
            str(project / "logs" / "sweep" / f"robustness-{folder}.log"),
        )  # fmt: skip
        run_task(str(project), env, task)
        folders.append(f"data/08_reporting/robustness_reports/{folder}/")
    return folders


def _settings(config_loader: Any) -> SweepSettings:
    """``conf/<env>/sweep.yml``, checked (absent: a local cluster); a batch system's
    ``dask_jobqueue`` is imported here, in the main thread, as it must be."""
    config_loader.config_patterns.setdefault("sweep", ["sweep*", "sweep*/**"])
    try:
        raw = config_loader["sweep"]
    except MissingConfigException:
        raw = {}
    try:
        settings = SweepSettings.model_validate(raw or {})
    except ValidationError as error:
        raise Seq2FinalError(f"sweep.yml: {one_line(error, SweepSettings)}") from None
    if settings.cluster.type != "local":
        jobqueue_options(settings.cluster)  # its walltime and lifetimes, checked before any work
    return settings


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
