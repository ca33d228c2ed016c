"""Trained historical states, one folder per key (``state.pt`` + a readable ``state.json``).

The store memoises: ``pretrain_historical``'s training node reads it to skip the keys it holds,
and writes each state it trains as soon as it is trained (:mod:`seq2final.runs.training`), which
is how finished work is reused and interrupted runs resume.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from kedro.io import AbstractDataset

from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import atomic_write, json_safe
from seq2final.methods import HistoricalState, ModelChain
from seq2final.models.storage import pack, unpack


def pack_state(state: HistoricalState) -> dict[str, Any]:
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
                "anchor_weight": chain.anchor_weight,
            }
            for name, chain in state.chains.items()
        },
        "fits": state.fits,
        "info": state.info,
    }


def unpack_state(payload: dict[str, Any]) -> HistoricalState:
    chains = {
        name: ModelChain(
            [unpack(m) for m in chain["models"]],
            chain["final_space"],
            [(values, fisher) for values, fisher in chain["anchors"]],
            chain.get("anchor_weight", "ewc_lambda"),  # states saved before SI existed
        )
        for name, chain in payload["chains"].items()
    }
    return HistoricalState(
        payload["mode"], payload["arch"], chains, payload["fits"], payload["info"]
    )


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
            return unpack_state(payload)
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
        atomic_write(
            folder / "state.json",
            lambda p: p.write_text(
                json.dumps(
                    json_safe(
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
        atomic_write(self._path(key), lambda p: torch.save(pack_state(state), p))


class HistoricalStoreDataset(AbstractDataset[Mapping[str, HistoricalState], HistoricalStore]):
    """Historical states by key: ``load`` gives the store, ``save`` adds the states it lacks.

    The catalog names the one folder twice, as ``historical_store`` (what the training node finds
    and writes into) and ``historical_states`` (the node's output, which ``adapt_final`` reads):
    Kedro needs a node's output to differ from its inputs, and the two names order the pipelines.
    """

    def __init__(self, path: str, metadata: dict[str, Any] | None = None) -> None:
        self._root = Path(path)
        self.metadata = metadata

    def load(self) -> HistoricalStore:
        return HistoricalStore(self._root)

    def save(self, data: Mapping[str, HistoricalState]) -> None:
        store = HistoricalStore(self._root)
        for key in data:
            if key not in store:
                store.put(key, data[key])

    def _exists(self) -> bool:
        return self._root.exists()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._root)}
