"""Trained historical states, one folder per key (``state.pt`` + a readable ``state.json``).

The store memoises: ``pretrain_historical``'s training node reads it to skip the keys it holds,
and writes each state it trains as soon as it is trained (:mod:`seq2final.runs.execution`), which
is how finished work is reused and interrupted runs resume.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from kedro.io import AbstractDataset
from pydantic import ValidationError

from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import atomic_write, json_safe
from seq2final.core.schema import stored_problem
from seq2final.methods import HistoricalState, ModelChain
from seq2final.models.storage import pack, unpack
from seq2final.training.records import FitRecord, StateInfo


def _added(items: list[Any], earlier: list[Any] | None) -> tuple[int, list[Any]]:
    """How many of ``items`` are ``earlier``'s own (the same objects, in order), and the rest."""
    shared = 0
    for mine, theirs in zip(items, earlier or [], strict=False):
        if mine is not theirs:
            break
        shared += 1
    return shared, items[shared:]


def pack_state(state: HistoricalState) -> dict[str, Any]:
    """A state as ``state.pt`` holds it: a state that ``extends`` the previous time's holds only
    the models and anchors it adds (``shared_models`` and ``shared_anchors`` count those it keeps
    from that state), so a stream's chain is stored in space linear in its length."""
    base = state.extends
    chains = {}
    for name, chain in state.chains.items():
        earlier = base.chains.get(name) if base is not None else None
        shared_models, models = _added(chain.models, earlier.models if earlier else None)
        shared_anchors, anchors = _added(chain.anchors, earlier.anchors if earlier else None)
        chains[name] = {
            "models": [pack(m) for m in models],
            "shared_models": shared_models,
            "final_space": chain.final_space,
            "anchors": [
                [{k: v.cpu() for k, v in values.items()}, {k: v.cpu() for k, v in fisher.items()}]
                for values, fisher in anchors
            ],
            "shared_anchors": shared_anchors,
            "anchor_weight": chain.anchor_weight,
        }
    return {
        "format": 1,
        "mode": state.mode,
        "arch": state.arch,
        "chains": chains,
        "fits": [fit.to_json() for fit in state.fits],
        "info": _info_json(state),
    }


def unpack_state(
    payload: dict[str, Any], info: StateInfo | None, base: HistoricalState | None = None
) -> HistoricalState:
    """A state from ``state.pt`` with its ``info`` (read from ``state.json``, which holds the
    same); ``base`` is the state it extends (``info.extends``), whose shared models and anchors
    it continues."""
    chains = {}
    for name, chain in payload["chains"].items():
        earlier = base.chains[name] if base is not None else ModelChain([])
        chains[name] = ModelChain(
            earlier.models[: chain.get("shared_models", 0)] + [unpack(m) for m in chain["models"]],
            chain["final_space"],
            earlier.anchors[: chain.get("shared_anchors", 0)]
            + [(values, fisher) for values, fisher in chain["anchors"]],
            chain.get("anchor_weight", "ewc_lambda"),  # states saved before SI existed
        )
    return HistoricalState(payload["mode"], payload["arch"], chains, _fits(payload["fits"]), info)


def _info(stored: dict[str, Any], folder: Path) -> StateInfo | None:
    """A state's info as stored (empty for a state made outside a run); one that does not read
    is one line naming the state's folder."""
    try:
        return StateInfo.model_validate(stored) if stored else None
    except ValidationError as error:
        raise Seq2FinalError(
            f"historical state {folder} has unreadable info ({stored_problem(error)}); delete "
            "its folder and rerun pretrain_historical"
        ) from None


def _info_json(state: HistoricalState) -> dict[str, Any]:
    return state.info.to_json() if state.info is not None else {}


def _fits(stored: list[dict[str, Any]]) -> list[FitRecord]:
    """A state's fit records as stored (states stored before the records were typed included:
    :class:`FitRecord` reads them)."""
    return [FitRecord.model_validate(fit) for fit in stored]


class HistoricalStore(Mapping[str, HistoricalState]):
    """Historical states by key, one folder each (``state.pt`` + a readable ``state.json``).

    The last :data:`RECENT` states read are kept: a growing chain's state of steps 0..k is read
    through the one of 0..k−1, which the stream has just read or trained, so reading a stream's
    states in order reads each file once instead of the whole chain every time.
    """

    RECENT = 4

    def __init__(self, root: Path) -> None:
        self.root = root
        self._recent: OrderedDict[str, HistoricalState] = OrderedDict()

    def _path(self, key: str) -> Path:
        return self.root / key / "state.pt"

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._path(key).exists()

    def __getitem__(self, key: str) -> HistoricalState:
        if key in self._recent:
            self._recent.move_to_end(key)
            return self._recent[key]
        path = self._path(key)
        if not path.exists():
            raise KeyError(key)
        info = _info(json.loads((path.parent / "state.json").read_text())["info"], path.parent)
        extends = info.extends if info is not None else None
        base = self[extends] if extends else None  # the previous time's, for a growing chain
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
            state = unpack_state(payload, info, base)
        except Exception as error:  # any unreadable or inconsistent file is the same problem
            raise Seq2FinalError(
                f"historical state {path} is corrupt ({stored_problem(error)[:120]}); delete its "
                "folder and rerun pretrain_historical"
            ) from None
        return self._remember(key, state)

    def _remember(self, key: str, state: HistoricalState) -> HistoricalState:
        self._recent[key] = state
        if len(self._recent) > self.RECENT:
            self._recent.popitem(last=False)
        return state

    def summary(self, key: str) -> HistoricalState:
        """State ``key`` without its models (its mode, arch, fits and info, from ``state.json``):
        what a job's cost needs, read without loading a stream's chain."""
        record = json.loads((self.root / key / "state.json").read_text())
        return HistoricalState(record["mode"], record["arch"], {}, _fits(record["fits"]),
                               _info(record["info"], self.root / key))  # fmt: skip

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
                            "info": _info_json(state),
                            "fits": [fit.to_json() for fit in state.fits],
                        }
                    ),
                    indent=1,
                )
            ),
        )
        atomic_write(self._path(key), lambda p: torch.save(pack_state(state), p))
        # kept without the state it extends, which only packing needs: a stream's newest state
        # must not hold every earlier one alive
        self._remember(key, replace(state, extends=None))


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
