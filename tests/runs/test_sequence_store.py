import json

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


def test_a_manifest_reads_typed_and_writes_back_byte_for_byte_an_older_one_too(tmp_path, built):
    """The manifest is read into its typed record (spec, steps, hashes) and written back as it
    was: one from before fingerprints and sub-class names (neither field) keeps lacking them,
    and a hand-broken one is one line naming the sequence."""
    dataset = SequenceStoreDataset(str(tmp_path / "store"))
    dataset.save({built.key: built})
    path = tmp_path / "store" / built.key / "manifest.json"
    written = path.read_text()
    loaded = dataset.load()[built.key]
    assert loaded.manifest.spec == built.manifest.spec and loaded.manifest.spec.seed == 1007
    assert json.dumps(loaded.manifest.to_json(), indent=1) == written
    older = {k: v for k, v in json.loads(written).items()
             if k not in ("source_fingerprint", "subclass_names")}  # fmt: skip
    path.write_text(json.dumps(older, indent=1))
    old = dataset.load()[built.key].manifest
    assert old.source_fingerprint is None and old.subclass_names is None
    assert json.dumps(old.to_json(), indent=1) == json.dumps(older, indent=1)
    path.write_text(json.dumps({**older, "steps": [{"name": 3}]}))
    with pytest.raises(Seq2FinalError, match=f"stored sequence '{built.key}' has an unreadable"):
        dataset.load()[built.key]
