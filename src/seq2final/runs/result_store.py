"""Finished jobs: a result record per job key, plus its final model and learning curves.

A record's presence means the job finished: the model and curves are written first, the record
last, each atomically. :class:`ResultStoreDataset` saves lazily (see
:mod:`seq2final.runs.state_store`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from kedro.io import AbstractDataset

from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import atomic_write, json_safe, stored_files
from seq2final.core.progress import Progress
from seq2final.models.storage import pack, unpack
from seq2final.runs.leases import claim

log = logging.getLogger(__name__)


class ResultStore(Mapping[str, dict[str, Any]]):
    """Finished jobs: a result record per job key, plus its final model and learning curves."""

    def __init__(self, results: Path, models: Path, curves: Path) -> None:
        self.results, self.models, self.curves = results, models, curves

    def record_path(self, key: str) -> Path:
        return self.results / f"{key}.json"

    def model_path(self, key: str) -> Path:
        return self.models / f"{key}.pt"

    def curves_path(self, key: str) -> Path:
        return self.curves / f"{key}.csv"

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.record_path(key).exists()

    def __getitem__(self, key: str) -> dict[str, Any]:
        path = self.record_path(key)
        if not path.exists():
            raise KeyError(key)
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise Seq2FinalError(f"result record {path} is corrupt ({error})") from None

    def __iter__(self) -> Iterator[str]:
        return (p.stem for p in stored_files(self.results, ".json"))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def model(self, key: str) -> torch.nn.Module:
        """The job's final model, on the CPU in eval mode."""
        path = self.model_path(key)
        try:
            return unpack(torch.load(path, map_location="cpu", weights_only=True))
        except Exception as error:
            raise Seq2FinalError(f"final model {path} is unreadable ({error})") from None

    def learning_curves(self, key: str) -> pd.DataFrame:
        return pd.read_csv(self.curves_path(key))

    def put(
        self, key: str, record: dict[str, Any], model: torch.nn.Module, curves: list[dict[str, Any]]
    ) -> None:
        """Model and curves first, the record last: a record's presence means the job finished."""
        atomic_write(self.model_path(key), lambda p: torch.save(pack(model), p))
        atomic_write(self.curves_path(key), lambda p: pd.DataFrame(curves).to_csv(p, index=False))
        atomic_write(
            self.record_path(key),
            lambda p: p.write_text(json.dumps(json_safe(record), indent=1)),
        )


class ResultStoreDataset(AbstractDataset[Mapping[str, Any], ResultStore]):
    """Finished jobs, saved lazily: a job recipe runs only if its record is missing or forced.

    A recipe has ``label`` (its name in progress lines), ``force``, ``run()`` (returning record,
    model and curves), ``failed(error)``, called when running or storing it raised, and
    ``finished(store, computed)``, called once the job's record is in the store, whether it was
    just computed or reused (tracking logs it from there). A job runs under its lease
    (:mod:`seq2final.runs.leases`), so processes sharing the store run it once.
    """

    def __init__(
        self,
        results_path: str,
        models_path: str,
        curves_path: str,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self._paths = (Path(results_path), Path(models_path), Path(curves_path))
        self.metadata = metadata

    def load(self) -> ResultStore:
        return ResultStore(*self._paths)

    def save(self, data: Mapping[str, Any]) -> None:
        store = ResultStore(*self._paths)
        with Progress("job", [recipe.label for recipe in data.values()]) as progress:
            for key, recipe in data.items():
                if key in store and not recipe.force:
                    progress.reused()
                    self._reuse(store, key, recipe)
                    continue
                # One process runs a job; another asking for it meanwhile waits and reuses it.
                with claim(self._paths[0], key, done=lambda key=key: key in store) as claimed:
                    if not claimed or (key in store and not recipe.force):
                        computed = False
                    else:
                        with progress.item(recipe.label) as shown:
                            try:
                                outcome = recipe.run()
                                store.put(key, outcome.record, outcome.model, outcome.curves)
                            except BaseException as error:
                                recipe.failed(error)
                                raise
                            shown.note = (
                                f"test {outcome.record['test_accuracy']:.3f}, "
                                f"valid {outcome.record['valid_accuracy']:.3f}; {key}"
                            )
                        computed = True
                if computed:
                    recipe.finished(store, computed=True)
                else:
                    progress.reused()
                    self._reuse(store, key, recipe)

    @staticmethod
    def _reuse(store: ResultStore, key: str, recipe: Any) -> None:
        log.info("job %s finished earlier; reusing it (force:true recomputes)", key)
        recipe.finished(store, computed=False)

    def _exists(self) -> bool:
        return self._paths[0].exists()

    def _describe(self) -> dict[str, Any]:
        return {"results_path": str(self._paths[0])}
