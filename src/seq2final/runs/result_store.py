"""Finished jobs: a result record per job key, plus its final model and learning curves.

A record's presence means the job finished: the model and curves are written first, the record
last, each atomically. The store memoises: ``adapt_final``'s training node reads it to skip the
jobs it holds, and writes each job it fits as soon as it is fitted
(:mod:`seq2final.runs.execution`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from kedro.io import AbstractDataset
from pydantic import ValidationError

from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import atomic_write, stored_files
from seq2final.core.schema import one_line
from seq2final.models.storage import pack, unpack
from seq2final.training.records import CurveRow, ResultRecord


class ResultStore(Mapping[str, ResultRecord]):
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

    def __getitem__(self, key: str) -> ResultRecord:
        path = self.record_path(key)
        if not path.exists():
            raise KeyError(key)
        try:
            return ResultRecord.model_validate_json(path.read_bytes())
        except OSError as error:
            raise Seq2FinalError(f"result record {path} is corrupt ({error})") from None
        except ValidationError as error:
            raise Seq2FinalError(
                f"result record {path} is corrupt ({one_line(error, ResultRecord, 'record field')})"
            ) from None

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
        """The job's fits' curves; empty for a job that trained nothing on the final step
        (``as_is``), whose CSV holds no column, and for a record restored without its curves
        (a study's kept records: ``benchmarks/protocol_study.py``)."""
        try:
            return pd.read_csv(self.curves_path(key))
        except (pd.errors.EmptyDataError, FileNotFoundError):
            return pd.DataFrame()

    def put(
        self, key: str, record: ResultRecord, model: torch.nn.Module, curves: list[CurveRow]
    ) -> None:
        """Model and curves first, the record last: a record's presence means the job finished."""
        atomic_write(self.model_path(key), lambda p: torch.save(pack(model), p))
        atomic_write(self.curves_path(key), lambda p: pd.DataFrame(curves).to_csv(p, index=False))
        atomic_write(
            self.record_path(key), lambda p: p.write_text(json.dumps(record.to_json(), indent=1))
        )


class ResultStoreDataset(AbstractDataset[ResultStore, ResultStore]):
    """Finished jobs: ``load`` gives the store, ``save`` adds the jobs it lacks from another one.

    The catalog names the folders twice, as ``result_store`` (what the training node finds and
    writes into) and ``adapt_results`` (the node's output, which ``evaluate`` reads): Kedro needs
    a node's output to differ from its inputs, and the two names order the pipelines.
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

    def save(self, data: ResultStore) -> None:
        store = ResultStore(*self._paths)
        for key in data:
            if key not in store:
                store.put(
                    key, data[key], data.model(key), data.learning_curves(key).to_dict("records")
                )

    def _exists(self) -> bool:
        return self._paths[0].exists()

    def _describe(self) -> dict[str, Any]:
        return {"results_path": str(self._paths[0])}
