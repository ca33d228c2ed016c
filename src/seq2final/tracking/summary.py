"""The summary run of a sequence: its tables and figures, and the ``best`` model alias."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from seq2final.config.parameters import MlflowOptions
from seq2final.reporting.tables import report_folder
from seq2final.tracking.mlflow_io import (
    NOTE,
    ensure_registered_model,
    experiment_id,
    quiet_model_logging,
)
from seq2final.tracking.names import MlflowNames, sequence_names

log = logging.getLogger(__name__)

SETTLE_SECONDS = 2.0
"""How long a summary run may take to become visible to other workers after its start time
(a request to the tracking server, plus clock differences between machines)."""


@dataclass
class SequenceSummary:
    """The summary run of one sequence: its tables and figures, and the ``best`` model alias.

    One run per (sequence, dataset), tagged ``kind=summary``, in the sequence's experiment (created
    once, even by workers that ask at the same moment); later
    ``evaluate``/``visualize`` runs update it in place (same artifact paths), so it always shows
    the latest tables. The best adapted model per (sequence, arch) is registered under the
    ``best_model`` name and carries the alias ``best``.
    """

    client: MlflowClient
    options: MlflowOptions
    sequence: str
    dataset: str
    seed: int
    _run_id: str | None = None

    def _names(self, arch: str = "all") -> MlflowNames:
        return sequence_names(self.options, self.sequence, self.dataset, self.seed, arch)

    @property
    def run_id(self) -> str:
        if self._run_id is None:
            experiment = experiment_id(self.client, self._names().experiment)
            tags = {"kind": "summary", "sequence": self.sequence, "dataset": self.dataset}
            winner = self._settled_oldest(experiment, tags)
            if winner is None:
                run = self.client.create_run(
                    experiment,
                    tags={**tags, NOTE: self._description()},
                    run_name=f"summary · {self.sequence} · {self.dataset}",
                )
                self.client.set_terminated(run.info.run_id, "FINISHED")
                # Workers racing here each create one; all keep the oldest, the others go.
                winner = self._settled_oldest(experiment, tags)
                assert winner is not None, "the run made here is one of them"
                if winner != run.info.run_id:
                    self.client.delete_run(run.info.run_id)
            self._run_id = winner
        return self._run_id

    def _description(self) -> str:
        """What the UI shows atop the run: it has artifacts only, which a user finds under
        *Artifacts*, and it changes in place."""
        best = self._names("ARCH").best_model.replace("ARCH", "<arch>")
        return (
            f"The tables and figures of the sequence `{self.sequence}` ({self.dataset}), under "
            "*Artifacts*: `tables/` from `evaluate`, `figures/` from `visualize`. Each later run of "
            "those pipelines replaces them in place, so they are always the latest. The best "
            f"adapted model of each architecture on validation is `models:/{best}@best`."
        )

    def _settled_oldest(self, experiment: str, tags: Mapping[str, str]) -> str | None:
        """The oldest summary run, once no older one can still appear.

        A run's start time is its creator's clock when it asked, so a run created at the same
        moment by another worker may become visible after a younger one. Every run is visible
        within :data:`SETTLE_SECONDS` of its start time, so once the oldest visible run is that
        old, every worker sees the same oldest run and keeps it.
        """
        while True:
            runs = self._summary_runs(experiment, tags)
            if not runs:
                return None
            start_ms, run_id = runs[0]
            wait = start_ms / 1000 + SETTLE_SECONDS - time.time()
            if wait <= 0:
                return run_id
            if wait > SETTLE_SECONDS:  # its creator's clock runs ahead of ours: do not wait on it
                log.warning("summary run %s starts %.1f s in this machine's future; keeping it",
                            run_id, wait - SETTLE_SECONDS)  # fmt: skip
                return run_id
            time.sleep(wait)

    def _summary_runs(self, experiment: str, tags: Mapping[str, str]) -> list[tuple[int, str]]:
        """The sequence's summary runs as (start time in ms, id), oldest first (ties by id,
        so every worker agrees)."""
        runs = self.client.search_runs(
            [experiment],
            filter_string=" and ".join(f"tags.{k} = '{v}'" for k, v in tags.items()),
        )
        return sorted((run.info.start_time, run.info.run_id) for run in runs)

    @property
    def folder(self) -> str:
        """The folder the sequence's tables and figures are filed under (``report_folder``)."""
        return report_folder(self.sequence, self.dataset)

    def log_text(self, folder: str, files: Mapping[str, str]) -> None:
        for key, text in files.items():
            self.client.log_text(self.run_id, text, f"{folder}/{key}")

    def log_figures(
        self, folder: str, figures: Mapping[str, Any], written: Path | None = None
    ) -> None:
        """Each figure under ``folder`` as PNG: the file the catalog wrote for it under
        ``written`` where there is one (drawing a figure is its cost), else the figure drawn
        again."""
        for key, figure in figures.items():
            path, file = PurePosixPath(f"{folder}/{key}.png"), written and written / f"{key}.png"
            if file and file.is_file():
                self.client.log_artifact(self.run_id, str(file), str(path.parent))
            else:
                self.client.log_figure(self.run_id, figure, str(path))

    def mark_best(self, best: pd.DataFrame) -> None:
        """Point ``<best_model>@best`` at each architecture's chosen job's registered model.

        A version is added only when the choice changed, so re-running ``evaluate`` is free.
        """
        for row in best.itertuples():
            name = self._names(arch=row.arch).best_model
            job_names = MlflowNames.of(
                self.options, sequence=self.sequence, dataset=self.dataset, arch=row.arch,
                method=row.job_method, budget=row.budget, seed=row.seed,
            )  # fmt: skip
            experiment = self.client.get_experiment_by_name(job_names.experiment)
            runs = (
                []
                if experiment is None
                else self.client.search_runs(
                    experiment_ids=[experiment.experiment_id],
                    filter_string=(
                        f"tags.job_key = '{row.job_key}' and tags.kind = 'job' "
                        "and attributes.status = 'FINISHED'"
                    ),
                    order_by=["attributes.start_time DESC"],
                    max_results=1,
                )
            )
            if not runs or "registered_model" not in runs[0].data.tags:
                log.warning(
                    "no registered model for job %s (untracked, or log_models off); "
                    "alias 'best' for %s not set", row.job_key, row.arch,
                )  # fmt: skip
                continue
            try:
                current = self.client.get_model_version_by_alias(name, "best")
                if current.run_id == runs[0].info.run_id:  # a retrained job has a new run
                    continue
            except MlflowException:
                ensure_registered_model(self.client, name)
            run = runs[0]
            model = run.data.tags.get("logged_model")  # a run logged before logged models: its
            with quiet_model_logging():  # model is the run's artifact folder `model`
                version = self.client.create_model_version(
                    name,
                    f"models:/{model}" if model else f"runs:/{run.info.run_id}/model",
                    run.info.run_id,
                    tags={"job_key": row.job_key, "method": row.method, "budget": row.budget,
                          "seed": str(row.seed)},
                    description=f"best on validation: {row.method} ({row.valid_accuracy:.3f})",
                    model_id=model,
                )  # fmt: skip
            self.client.set_registered_model_alias(name, "best", version.version)
            log.info("%s@best is now %s (valid %.3f)", name, row.method, row.valid_accuracy)
