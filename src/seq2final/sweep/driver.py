"""The sweep's driver: submits the graph to Dask with its dependencies and follows it to the end.

Sequences are built first; a built sequence's historical states are submitted next, each trained
once (the shared step-0 model by the first state that starts from it, the states that follow it
waiting for that task), and each job waits only for its own state. Finished work is skipped (a
state too, when every job it feeds is finished, as in a sweep resumed after its models are
gone), a failure stops only what depends on it, and each sequence is evaluated once all of its jobs have
settled. The driver only plans and waits; its own time per job is measured and reported.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributed import Client, Future, wait

from seq2final.core.errors import Seq2FinalError
from seq2final.models import build_model, forward_macs
from seq2final.reporting.tables import report_folder
from seq2final.runs.plans import STEP0
from seq2final.sweep.graph import (
    SequenceWork,
    Stores,
    SweepGraph,
    SweepRequest,
    is_built,
    open_jobs_by_state,
    plans_of,
)
from seq2final.sweep.work import STARTED_TOPIC, PipelineRun, run_task

PRIORITY = {"sequence": 4, "state": 3, "free job": 2, "job": 1, "evaluate": 0}
"""Among tasks ready to run: states before jobs (each state unblocks several jobs, and a state left
to the end leaves the other workers idle while its jobs wait for it), then the jobs that need no
state (they train on the historical steps themselves, so they are the long ones), then the jobs
that adapt a state to the final step (short: the final step is the scarce one) to fill the end.
Within each kind, larger architectures go first (:func:`architecture_order`)."""


class SweepStalled(Seq2FinalError):
    """No worker has been connected for the sweep's ``stall_minutes``."""


@dataclass
class Failure:
    """A task that did not finish: what, why (one line) and where its full log is."""

    task: PipelineRun
    reason: str


@dataclass
class SweepReport:
    """What a sweep did."""

    trained: Counter[str] = field(default_factory=Counter)  # task kind -> tasks run
    reused: Counter[str] = field(default_factory=Counter)  # task kind -> already finished
    failures: list[Failure] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    seconds: float = 0.0
    driver_seconds: float = 0.0
    jobs: int = 0
    lost_jobs: int = 0  # jobs of sequences that could not be built


@dataclass
class Sweep:
    """One sweep over a built graph, on a Dask client."""

    client: Client
    project: Path
    env: str | None
    params: dict[str, Any]  # run parameters every task gets (budget, dataset, tracking URI, ...)
    request: SweepRequest
    stores: Stores
    gpus: bool
    say: Callable[[str], None]
    asked: float | None = None  # perf_counter() when the cluster was asked for (None: at run)
    stall_seconds: float = 600.0  # no worker this long stops the sweep (sweep.yml stall_minutes)
    idle_word: Callable[[], str] = lambda: "no worker joined"  # why, in the cluster's words
    log_dir: Path = field(default_factory=lambda: Path("logs/sweep"))
    report: SweepReport = field(default_factory=SweepReport)
    _id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S"))
    _tasks: dict[Future, PipelineRun] = field(default_factory=dict)
    _states: dict[str, Future | None] = field(default_factory=dict)  # None: settled, released
    _pending_jobs: dict[tuple[str, str], int] = field(default_factory=Counter)
    _good_jobs: dict[tuple[str, str], int] = field(default_factory=Counter)
    _planned: dict[tuple[str, str], int] = field(default_factory=Counter)
    _job_seconds: list[float] = field(default_factory=list)
    _unbuilt: dict[str, SequenceWork] = field(default_factory=dict)
    _reused_states: set[str] = field(default_factory=set)
    _started: set[str] = field(default_factory=set)  # keys of tasks that began on a worker
    _arch_rank: dict[str, int] = field(default_factory=dict)
    _line: str = ""
    _workers: int | None = None  # workers able to run a task (None: none has joined yet)
    _idle_since: float | None = None  # since when no worker has been there

    def run(self, graph: SweepGraph) -> SweepReport:
        """Submit ``graph`` and follow it until every task has finished or failed."""
        started = time.perf_counter()
        self.report.jobs = graph.counts(self.stores)["jobs"][0]
        self.client.subscribe_topic(STARTED_TOPIC, lambda event: self._started.add(event[1]))
        self._drive(lambda: self._arch_rank.update(architecture_order(self.request.archs)))
        self._drive(lambda: self._submit_graph(graph))
        self._wait_all(started)
        self.report.reused["state"] = len(self._reused_states)
        self.report.seconds = time.perf_counter() - started
        return self.report

    # -- submitting ----------------------------------------------------------------------------

    def _drive(self, step: Callable[[], None]) -> None:
        """Run driver work, counting its time (the overhead the sweep adds per job)."""
        started = time.perf_counter()
        step()
        self.report.driver_seconds += time.perf_counter() - started

    def _submit_graph(self, graph: SweepGraph) -> None:
        for work in graph.sequences:  # every seed counted before any can trigger evaluate
            self._planned[(work.spec.name, work.spec.dataset)] += 1
        for work in graph.sequences:
            if work.built:
                self.report.reused["sequence"] += 1
                self._submit_training(work)
            else:
                self._unbuilt[work.spec.key] = work
                self._submit(self._task("sequence", work.spec.key, "build_sequences", work.params))

    def _submit_training(self, work: SequenceWork) -> None:
        group = (work.spec.name, work.spec.dataset)
        seen_jobs: set[str] = set()
        submitted: dict[str, Future] = {}  # this sequence's jobs, for the warm starts that follow
        for plan in work.plans:
            open_jobs = open_jobs_by_state(plan, self.stores.results)
            for state in plan.states:
                if state.mode == STEP0 or state.key in self._states:
                    continue
                if state.key in self.stores.states:
                    self._reused_states.add(state.key)
                    continue
                job = open_jobs.get(state.key)
                if job is None:  # every job that continues it is finished (resumed in a new
                    # session, whose models are gone), or it is an earlier time of a growing
                    # chain that no view continues: the task of the state that extends it
                    continue  # trains it first
                step0 = state.step0_key
                before = [self._states.get(k) for k in (step0, state.extends) if k]
                after = [future for future in before if future is not None]
                task = self._task("state", state.key, "pretrain_historical", plan.job_params(job))
                future = self._submit(task, after, training=True)
                self._states[state.key] = future
                if step0 and step0 not in self._states and step0 not in self.stores.states:
                    self._states[step0] = future  # this task trains step 0 as well
            for job in plan.jobs:
                if job.key in seen_jobs:
                    continue
                seen_jobs.add(job.key)
                if job.key in self.stores.results:
                    self.report.reused["job"] += 1
                    self._good_jobs[group] += 1
                    continue
                before = [
                    self._states.get(job.state_key or ""),
                    submitted.get(job.warm_start or ""),
                ]
                after = [future for future in before if future is not None]
                task = self._task("job", job.key, "adapt_final", plan.job_params(job))
                submitted[job.key] = self._submit(
                    task, after, training=True, free=not job.state_key
                )
                self._pending_jobs[group] += 1
        self._planned[group] -= 1
        self._maybe_evaluate(group)

    def _task(self, kind: str, name: str, pipeline: str, params: dict[str, Any]) -> PipelineRun:
        log_path = self.project / self.log_dir / self._id / f"{kind}-{name}.log"
        return PipelineRun(kind, name, pipeline, {**self.params, **params}, str(log_path))

    def _submit(
        self,
        task: PipelineRun,
        after: list[Future] | None = None,
        training: bool = False,
        free: bool = False,
    ) -> Future:
        kind = "free job" if free else task.kind
        rank = self._arch_rank.get(task.params.get("arch", ""), 0)
        future = self.client.submit(
            run_task,
            str(self.project),
            self.env,
            task,
            *(after or []),
            key=f"{task.kind}-{task.name}-{uuid.uuid4().hex[:8]}",
            resources={"GPU": 1} if training and self.gpus else None,
            priority=PRIORITY[kind] * 1000 + rank,
            pure=False,
        )
        self._tasks[future] = task
        return future

    def _maybe_evaluate(self, group: tuple[str, str]) -> None:
        """Evaluate a sequence once all its seeds are planned and all its jobs have settled."""
        if self._planned[group] or self._pending_jobs[group] or not self._good_jobs[group]:
            return
        self._good_jobs[group] = 0  # once
        name, dataset = group
        work_params = {"sequence": name, "dataset": dataset}
        self._submit(self._task("evaluate", f"{name}-{dataset}", "evaluate", work_params))

    # -- following -----------------------------------------------------------------------------

    def _wait_all(self, started: float) -> None:
        """Follow the tasks to the end; everything but the wait itself counts as overhead."""
        last_line, last_time = "", 0.0
        self._idle_since = started
        while self._tasks:
            try:  # every second until a worker has joined, to tell when it did
                timeout = 1 if self._workers is None else 5
                done, _ = wait(list(self._tasks), timeout=timeout, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            self._count_workers(started)
            self._drive(functools.partial(self._follow, done, started))
            line = self._line  # said when its counts change, and once a minute
            if _counts(line) != _counts(last_line) or time.monotonic() - last_time > 60:
                self.say(line)
                last_line, last_time = line, time.monotonic()

    def _count_workers(self, started: float) -> None:
        """Count the workers that can run a task (a paused one finishes the task it runs, and
        starts no other); say when the first joined, and stop the sweep when none, paused or
        not, has been there for its ``stall_seconds``, with the cluster's word on why."""
        statuses = [w.get("status") for w in self.client.scheduler_info()["workers"].values()]
        count = statuses.count("running")
        present = count + statuses.count("paused")  # one at its lifetime finishes its task
        now = time.perf_counter()
        if count and self._workers is None:
            since = now - (self.asked or started)
            self.say(f"First worker joined {since:.1f} s after the cluster was asked for")
        if count or self._workers is not None:
            self._workers = count
        if present:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now
        elif now - self._idle_since >= self.stall_seconds:
            raise SweepStalled(
                f"The sweep stopped: no worker for {(now - self._idle_since) / 60:.1f} minutes "
                f"(sweep.yml stall_minutes {self.stall_seconds / 60:g}); {self.idle_word()}"
            )

    def _follow(self, done: set[Future], started: float) -> None:
        for future in done:
            self._settle(future)
        self._line = self._progress(started)

    def _settle(self, future: Future) -> None:
        task = self._tasks.pop(future)
        finished = future.status == "finished"  # read once: a release changes it
        if finished:
            self.report.trained[task.kind] += 1
            result = future.result()
            if task.kind == "job":
                self._job_seconds.append(result["seconds"])
        else:
            error = future.exception()
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            if not Path(task.log_path).exists():  # it never ran: a task it waited for failed
                reason = f"not run: {reason}"
            self.report.failures.append(Failure(task, reason[:300]))
        if task.kind == "evaluate" and finished:
            name, dataset = task.params["sequence"], task.params["dataset"]
            self.report.tables.append(
                f"data/08_reporting/result_table_reports/{report_folder(name, dataset)}/"
            )
        if task.kind == "sequence":
            self._after_sequence(task, built=finished)
        elif task.kind == "job":
            group = (task.params["sequence"], task.params["dataset"])
            self._pending_jobs[group] -= 1
            self._good_jobs[group] += finished
            self._maybe_evaluate(group)
        if finished:  # released: Dask forgets the result (tasks waiting for it keep it until
            # they run), so a worker that leaves has nothing to hand over, or to see computed
            # again; a failed task is kept: what is submitted after it, waiting for it, fails too
            self._states.update({k: None for k, held in self._states.items() if held is future})
            future.release()

    def _after_sequence(self, task: PipelineRun, built: bool) -> None:
        """Plan and submit a sequence's states and jobs once it is built (their keys cover its
        content); if it could not be built, its jobs are lost and counted as such."""
        work = self._unbuilt.pop(task.name)
        group = (work.spec.name, work.spec.dataset)
        if built:
            raw_dir = work.run.parameters.build_sequences.raw_dir
            work.built = is_built(work.spec, self.stores.sequences, raw_dir)
            work.plans = plans_of(work, self.request, self.stores)
            self._submit_training(work)
            return
        self.report.lost_jobs += len({job.key for plan in work.plans for job in plan.jobs})
        self._planned[group] -= 1
        self._maybe_evaluate(group)

    def _progress(self, started: float) -> str:
        running = sum(
            1 for f, t in self._tasks.items() if t.kind == "job" and f.key in self._started
        )
        done = self.report.trained["job"] + self.report.reused["job"]
        failed = self.report.lost_jobs + sum(
            1 for f in self.report.failures if f.task.kind == "job"
        )
        left = self.report.jobs - done - failed
        elapsed = time.perf_counter() - started
        line = (
            f"jobs {done}/{self.report.jobs} done · {running} running · {failed} failed · "
            f"{self._workers or 0} workers · {_clock(elapsed)} elapsed"
        )
        if self._job_seconds and left:
            mean = sum(self._job_seconds) / len(self._job_seconds)
            line += f" · ~{_clock(mean * left / max(1, self._workers or 0))} left"
        return line


def architecture_order(archs: tuple[str, ...] | list[str]) -> dict[str, int]:
    """Each architecture's rank by its forward multiply-adds per image (the largest ranks
    highest): of two tasks ready together, the longer starts first and the short ones fill the
    end, instead of one worker training a large model alone while the others idle."""
    macs = {arch: forward_macs(build_model(arch, num_classes=10)) for arch in archs}
    return {arch: rank for rank, arch in enumerate(sorted(macs, key=macs.__getitem__), start=1)}


def _counts(line: str) -> list[str]:
    """A progress line's counts (jobs, running, failed, workers), without its times."""
    return line.split(" · ")[:4]


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"
