"""Kedro datasets of the project.

:class:`HistoricalStoreDataset` and :class:`ResultStoreDataset` keep trained historical states and
finished jobs, one key each, written atomically. They save *lazily*, as Kedro's
``PartitionedDataset`` does with callables: a pipeline hands over recipes, and a recipe runs only
when its key is not stored yet, which is how finished work is reused and interrupted runs resume.

:class:`SequenceStoreDataset` keeps built sequences on disk, one folder per sequence key with one
``.npz`` file per step and a ``manifest.json``. Like Kedro's ``PartitionedDataset`` it saves a
``{key: sequence}`` dict and loads a mapping whose values load lazily, so a later pipeline reads
only the steps it needs. A sequence is written to a temporary folder and renamed into place, so an
interrupted save never leaves a half-written sequence behind.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from kedro.io import AbstractDataset

from seq2final.errors import Seq2FinalError
from seq2final.methods import HistoricalState
from seq2final.models.storage import pack, unpack
from seq2final.sequences import ShiftSequence, Step

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"


class SequenceStore(Mapping[str, ShiftSequence]):
    """The sequences in a store folder, by key; steps load on first use and are hash-checked."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _folder(self, key: str) -> Path:
        return self.root / key

    def __getitem__(self, key: str) -> ShiftSequence:
        manifest_path = self._folder(key) / MANIFEST
        if not manifest_path.exists():
            raise KeyError(key)
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise Seq2FinalError(
                f"stored sequence '{key}' has an unreadable manifest: {error}"
            ) from None
        return ShiftSequence(manifest, _loader=lambda name: self._load_step(key, name, manifest))

    def _load_step(self, key: str, name: str, manifest: dict[str, Any]) -> Step:
        path = self._folder(key) / f"step_{name}.npz"
        try:
            with np.load(path, allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        except (OSError, ValueError) as error:
            raise Seq2FinalError(
                f"stored sequence step {path} is unreadable ({error}); rebuild it"
            ) from None
        index = None if name == "oracle" else int(name)
        step = Step("oracle" if index is None else manifest["steps"][index]["name"], arrays)
        if step.content_hash() != manifest["step_hashes"][name]:
            raise Seq2FinalError(
                f"stored sequence step {path} is corrupt (hash mismatch); rebuild it"
            )
        return step

    def __iter__(self) -> Iterator[str]:
        if not self.root.exists():
            return iter(())
        return iter(sorted(p.name for p in self.root.iterdir() if (p / MANIFEST).exists()))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class SequenceStoreDataset(AbstractDataset[Mapping[str, ShiftSequence], SequenceStore]):
    """Saves ``{key: ShiftSequence}`` under ``path/key/``; loads a lazy :class:`SequenceStore`."""

    def __init__(self, path: str, metadata: dict[str, Any] | None = None) -> None:
        self._root = Path(path)
        self.metadata = metadata

    def load(self) -> SequenceStore:
        return SequenceStore(self._root)

    def save(self, data: Mapping[str, ShiftSequence]) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        for key, sequence in data.items():
            self._save_one(key, sequence)

    def _save_one(self, key: str, sequence: ShiftSequence) -> None:
        final = self._root / key
        partial = self._root / f".partial-{key}-{uuid.uuid4().hex[:8]}"
        partial.mkdir()
        try:
            names = [str(i) for i in range(sequence.num_steps)]
            names += ["oracle"] if sequence.manifest["has_oracle"] else []
            for name in names:
                np.savez(partial / f"step_{name}.npz", **sequence.step(name).arrays)
            (partial / MANIFEST).write_text(json.dumps(sequence.manifest, indent=1))
            if final.exists():
                shutil.rmtree(final)
            os.replace(partial, final)
        finally:
            if partial.exists():
                shutil.rmtree(partial)

    def _exists(self) -> bool:
        return self._root.exists()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._root)}


# --------------------------------------------------------------------------------------------
# Trained state: historical states and finished jobs
# --------------------------------------------------------------------------------------------


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary name in the same folder, then rename into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".partial-{uuid.uuid4().hex[:8]}-{path.name}")
    try:
        write(partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _pack_state(state: HistoricalState) -> dict[str, Any]:
    return {
        "format": 1,
        "mode": state.mode,
        "arch": state.arch,
        "chains": {
            name: {
                "models": [pack(m) for m in chain.models],
                "final_space": chain.final_space,
                "anchors": [
                    [
                        {k: v.cpu() for k, v in values.items()},
                        {k: v.cpu() for k, v in fisher.items()},
                    ]
                    for values, fisher in chain.anchors
                ],
            }
            for name, chain in state.chains.items()
        },
        "fits": state.fits,
        "info": state.info,
    }


def _unpack_state(payload: dict[str, Any]) -> HistoricalState:
    from seq2final.methods import Chain

    chains = {
        name: Chain(
            [unpack(m) for m in chain["models"]],
            chain["final_space"],
            [(values, fisher) for values, fisher in chain["anchors"]],
        )
        for name, chain in payload["chains"].items()
    }
    return HistoricalState(
        payload["mode"], payload["arch"], chains, payload["fits"], payload["info"]
    )


def _json_safe(value: Any) -> Any:
    """JSON without NaN tokens (epoch 0 has no training metrics): NaN becomes null."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


class HistoricalStore(Mapping[str, HistoricalState]):
    """Historical states by key, one folder each (``state.pt`` + a readable ``state.json``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / key / "state.pt"

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._path(key).exists()

    def __getitem__(self, key: str) -> HistoricalState:
        path = self._path(key)
        if not path.exists():
            raise KeyError(key)
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
            return _unpack_state(payload)
        except Exception as error:  # any unreadable or inconsistent file is the same problem
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise Seq2FinalError(
                f"historical state {path} is corrupt ({first[:120]}); delete its folder and rerun "
                "pretrain_historical"
            ) from None

    def __iter__(self) -> Iterator[str]:
        if not self.root.exists():
            return iter(())
        return iter(sorted(p.parent.name for p in self.root.glob("*/state.pt")))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def put(self, key: str, state: HistoricalState) -> None:
        folder = self.root / key
        _atomic_write(
            folder / "state.json",
            lambda p: p.write_text(
                json.dumps(
                    _json_safe(
                        {
                            "mode": state.mode,
                            "arch": state.arch,
                            "info": state.info,
                            "fits": state.fits,
                        }
                    ),
                    indent=1,
                )
            ),
        )
        _atomic_write(self._path(key), lambda p: torch.save(_pack_state(state), p))


class HistoricalStoreDataset(AbstractDataset[Mapping[str, Any], HistoricalStore]):
    """Historical states, saved lazily: a recipe runs only when its key is not stored yet.

    ``save`` takes ``{key: StateRecipe}`` in dependency order (the shared step-0 model before the
    chains that start from it); each recipe may read earlier states from the store.
    """

    def __init__(self, path: str, metadata: dict[str, Any] | None = None) -> None:
        self._root = Path(path)
        self.metadata = metadata

    def load(self) -> HistoricalStore:
        return HistoricalStore(self._root)

    def save(self, data: Mapping[str, Any]) -> None:
        store = HistoricalStore(self._root)
        for key, recipe in data.items():
            if key in store:
                log.info("historical state %s exists; reusing it", key)
                continue
            store.put(key, recipe.build(store))
            recipe.finished(store, computed=True)

    def _exists(self) -> bool:
        return self._root.exists()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._root)}


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
        if not self.results.exists():
            return iter(())
        return iter(sorted(p.stem for p in self.results.glob("*.json")))

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
        _atomic_write(self.model_path(key), lambda p: torch.save(pack(model), p))
        _atomic_write(self.curves_path(key), lambda p: pd.DataFrame(curves).to_csv(p, index=False))
        _atomic_write(
            self.record_path(key),
            lambda p: p.write_text(json.dumps(_json_safe(record), indent=1)),
        )


class ResultStoreDataset(AbstractDataset[Mapping[str, Any], ResultStore]):
    """Finished jobs, saved lazily: a job recipe runs only if its record is missing or forced.

    A recipe has ``force``, ``run()`` (returning record, model and curves), ``failed(error)``,
    called when running or storing it raised, and ``finished(store, computed)``, called once the
    job's record is in the store, whether it was just computed or reused (tracking logs it from
    there).
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
        for key, recipe in data.items():
            if key in store and not recipe.force:
                log.info("job %s finished earlier; reusing it (force:true recomputes)", key)
                recipe.finished(store, computed=False)
                continue
            try:
                outcome = recipe.run()
                store.put(key, outcome.record, outcome.model, outcome.curves)
            except BaseException as error:
                recipe.failed(error)
                raise
            recipe.finished(store, computed=True)

    def _exists(self) -> bool:
        return self._paths[0].exists()

    def _describe(self) -> dict[str, Any]:
        return {"results_path": str(self._paths[0])}


class FrameStore(Mapping[str, pd.DataFrame]):
    """Computed tables (one CSV per key) that are costly to remake, such as interpolation paths."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.csv"

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._path(key).exists()

    def __getitem__(self, key: str) -> pd.DataFrame:
        if key not in self:
            raise KeyError(key)
        return pd.read_csv(self._path(key))

    def __iter__(self) -> Iterator[str]:
        return (
            iter(sorted(p.stem for p in self.root.glob("*.csv")))
            if self.root.exists()
            else iter(())
        )

    def __len__(self) -> int:
        return sum(1 for _ in self)


class FrameStoreDataset(
    AbstractDataset[Mapping[str, Callable[[], pd.DataFrame | None]], FrameStore]
):
    """Tables saved lazily: ``save`` takes ``{key: make_table}`` and calls only the missing keys,
    each written atomically, so an interrupted run keeps what it finished. A maker returning
    ``None`` (its inputs are not there) stores nothing."""

    def __init__(self, path: str, metadata: dict[str, Any] | None = None) -> None:
        self._root = Path(path)
        self.metadata = metadata

    def load(self) -> FrameStore:
        return FrameStore(self._root)

    def save(self, data: Mapping[str, Callable[[], pd.DataFrame | None]]) -> None:
        store = FrameStore(self._root)
        for key, make in data.items():
            if key in store:
                continue
            frame = make()
            if frame is None:  # its inputs are missing: nothing to keep, try again next run
                continue
            _atomic_write(store._path(key), lambda p, f=frame: f.to_csv(p, index=False))

    def _exists(self) -> bool:
        return self._root.exists()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._root)}
