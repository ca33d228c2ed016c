"""The stores' datasets memoise: ``save`` adds the keys the store lacks and leaves the others."""

import json

from result_records import make_record

from seq2final.methods import HistoricalState, ModelChain
from seq2final.models import build_model
from seq2final.runs.result_store import ResultStore, ResultStoreDataset
from seq2final.runs.state_store import HistoricalStore, HistoricalStoreDataset


def _state(arch: str) -> HistoricalState:
    return HistoricalState("erm", arch, {"main": ModelChain([build_model(arch, 2)])}, [], {})


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
