import numpy as np
import pytest

from seq2final.core.errors import Seq2FinalError
from seq2final.data.sampler import build_sequence
from seq2final.data.spec import resolve_spec
from seq2final.runs.sequence_store import SequenceStoreDataset


@pytest.fixture
def built(source):
    spec = resolve_spec(
        "source100:rotation100:label_flip100", dataset="digits", test_size=50, oracle_size=200
    )
    return build_sequence(spec, source)


def test_store_round_trip_loads_one_step_lazily(tmp_path, built):
    dataset = SequenceStoreDataset(str(tmp_path / "store"))
    dataset.save({built.key: built})
    store = dataset.load()
    assert list(store) == [built.key]
    loaded = store[built.key]
    assert loaded.content_hash == built.content_hash and loaded._steps == {}
    final = loaded.step(-1)
    assert set(loaded._steps) == {"2"}
    for name, array in built.step(-1).arrays.items():
        assert np.array_equal(final.arrays[name], array)


def test_interrupted_save_leaves_nothing_half_written(tmp_path, built, monkeypatch):
    dataset = SequenceStoreDataset(str(tmp_path / "store"))
    calls = []

    def failing_savez(path, **arrays):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        np.save(str(path) + ".npy", np.zeros(1))

    monkeypatch.setattr(np, "savez", failing_savez)
    with pytest.raises(KeyboardInterrupt):
        dataset.save({built.key: built})
    assert list((tmp_path / "store").iterdir()) == []
    assert list(dataset.load()) == []


def test_corrupt_step_is_detected(tmp_path, built):
    dataset = SequenceStoreDataset(str(tmp_path / "store"))
    dataset.save({built.key: built})
    path = tmp_path / "store" / built.key / "step_1.npz"
    arrays = dict(np.load(path))
    arrays["y_train"] = (arrays["y_train"] + 1) % 10
    np.savez(path, **arrays)
    with pytest.raises(Seq2FinalError, match="corrupt"):
        dataset.load()[built.key].step(1)


def test_rebuilding_repairs_a_corrupt_step(tmp_path, built):
    dataset = SequenceStoreDataset(str(tmp_path / "store"))
    dataset.save({built.key: built})
    (tmp_path / "store" / built.key / "step_1.npz").write_bytes(b"garbage")
    with pytest.raises(Seq2FinalError, match="unreadable"):
        dataset.load()[built.key].step(1)
    dataset.save({built.key: built})
    assert np.array_equal(
        dataset.load()[built.key].step(1).arrays["y_train"], built.step(1).arrays["y_train"]
    )
