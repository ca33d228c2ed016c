"""The stores' datasets memoise: ``save`` adds the keys the store lacks and leaves the others."""

import json

import pytest
import torch
from result_records import make_record

from seq2final.core.errors import Seq2FinalError
from seq2final.methods import HistoricalState, ModelChain
from seq2final.models import build_model
from seq2final.runs.execution import historical_costs
from seq2final.runs.result_store import ResultStore, ResultStoreDataset
from seq2final.runs.state_store import HistoricalStore, HistoricalStoreDataset
from seq2final.training.records import FitRecord, StateInfo


def _fit(stage: str, train_flops: int) -> FitRecord:
    return FitRecord(stage=stage, params={}, valid_accuracy=0.5, best_epoch=0, epochs=0, trials=0,
                     train_flops=train_flops)  # fmt: skip


def _info(key: str, extends: str | None) -> StateInfo:
    return StateInfo(key=key, sequence_key="s", seed=1, budget="smoke", step0=None,
                     extends=extends, wall_seconds=0.5, device="cpu")  # fmt: skip


def _state(arch: str) -> HistoricalState:
    return HistoricalState("erm", arch, {"main": ModelChain([build_model(arch, 2)])}, [])


def test_saving_states_adds_the_missing_keys_only(tmp_path):
    dataset = HistoricalStoreDataset(str(tmp_path / "states"))
    dataset.save({"a": _state("convnet_1")})
    stamp = (tmp_path / "states/a/state.pt").stat().st_mtime_ns
    dataset.save({"a": _state("convnet_2"), "b": _state("convnet_2")})
    store = dataset.load()
    assert isinstance(store, HistoricalStore) and sorted(store) == ["a", "b"]
    assert store["a"].arch == "convnet_1" and store["b"].arch == "convnet_2"  # "a" kept
    assert (tmp_path / "states/a/state.pt").stat().st_mtime_ns == stamp
    dataset.save(store)  # the store itself, as the training node returns it: nothing to write
    assert (tmp_path / "states/a/state.pt").stat().st_mtime_ns == stamp


def test_saving_results_copies_the_jobs_another_store_has(tmp_path):
    def folders(root):
        return (root / "results", root / "models", root / "curves")

    elsewhere = ResultStore(*folders(tmp_path / "elsewhere"))
    first, second = make_record(job_key="j1"), make_record(job_key="j2", test_accuracy=0.9)
    for record in (first, second):
        elsewhere.put(record.job_key, record, build_model("convnet_1", 2), [{"epoch": 0}])
    dataset = ResultStoreDataset(*map(str, folders(tmp_path / "here")))
    here = dataset.load()
    here.put("j1", make_record(job_key="j1", test_accuracy=0.1), build_model("convnet_1", 2), [])
    dataset.save(elsewhere)
    assert sorted(here) == ["j1", "j2"]
    assert here["j1"].test_accuracy == 0.1 and here["j2"] == second  # j1 kept, j2 copied
    assert json.loads(here.record_path("j2").read_text()) == second.to_json()
    assert list(here.learning_curves("j2")["epoch"]) == [0]


def _bytes(model) -> list[bytes]:
    return [value.numpy().tobytes() for value in model.state_dict().values()]


def test_a_grown_chain_state_stores_only_what_it_adds_to_the_state_it_extends(tmp_path):
    """EWC's chain appends a model and an anchor per step, SI's replaces its one anchor: the
    state of steps 0..1 keeps step 0's model and anchor from the state it extends and stores only
    its own, and loads back whole."""
    store = HistoricalStore(tmp_path / "states")
    models = [build_model("convnet_1", 2) for _ in range(2)]
    anchor = ({"w": torch.ones(2)}, {"w": torch.full((2,), 0.5)})
    first = HistoricalState("sequential_ewc", "convnet_1", {
        "main": ModelChain(models[:1], {"lr": {"grid": [0.1]}}, [anchor]),
        "si": ModelChain(models[:1], None, [anchor], "si_c"),
    }, [_fit("x", 5)], _info("k0", None))  # fmt: skip
    store.put("k0", first)
    loaded = HistoricalStore(tmp_path / "states")["k0"]  # from the files, not the recent ones
    second_anchor = ({"w": torch.zeros(2)}, {"w": torch.ones(2)})
    main, si = loaded.chains["main"], loaded.chains["si"]
    second = HistoricalState("sequential_ewc", "convnet_1", {
        "main": ModelChain([*main.models, models[1]], main.final_space,
                           [*main.anchors, second_anchor]),
        "si": ModelChain([*si.models, models[1]], None, [second_anchor], "si_c"),
    }, [_fit("y", 7)], _info("k1", "k0"), loaded)  # fmt: skip
    store.put("k1", second)
    payload = torch.load(tmp_path / "states/k1/state.pt", weights_only=True)
    saved = payload["chains"]
    assert (saved["main"]["shared_models"], len(saved["main"]["models"])) == (1, 1)
    assert (saved["main"]["shared_anchors"], len(saved["main"]["anchors"])) == (1, 1)
    assert (saved["si"]["shared_anchors"], len(saved["si"]["anchors"])) == (0, 1)
    back = HistoricalStore(tmp_path / "states")["k1"]
    for name in ("main", "si"):
        assert [_bytes(m) for m in back.chains[name].models] == [_bytes(m) for m in models]
    assert [a[0]["w"].tolist() for a in back.chains["main"].anchors] == [[1, 1], [0, 0]]
    assert [a[0]["w"].tolist() for a in back.chains["si"].anchors] == [[0, 0]]
    # a job's cost walks the chain through the stored fits alone
    assert historical_costs("k1", store.summary) == {"k1": 7, "k0": 5}
    # a state stored before fits were typed kept its selected trial's epochs in each fit
    summary = tmp_path / "states/k0/state.json"
    stored = json.loads(summary.read_text())
    stored["fits"][0]["history"] = [{"epoch": 0, "valid_accuracy": 0.5}]
    assert list(stored["info"]) == ["key", "sequence_key", "seed", "budget", "step0", "extends",
                                    "wall_seconds", "device"]  # fmt: skip
    del stored["info"]["extends"]  # written before chains grew: its info has no `extends`
    summary.write_text(json.dumps(stored))
    old = store.summary("k0")
    assert old.fits == [_fit("x", 5)] and old.info == _info("k0", None)
    assert list(old.info.to_json()) == list(stored["info"])  # written back as it was
    summary.write_text(json.dumps({**stored, "info": {"key": "k0"}}))
    with pytest.raises(Seq2FinalError, match=r"states/k0 has unreadable info \('sequence_key'"):
        store.summary("k0")
    kept = store["k1"]  # the states just written or read are kept, without what they extend
    assert kept.chains["main"].models[1] is models[1] and kept.extends is None
