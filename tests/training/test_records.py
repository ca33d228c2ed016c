"""The result record: typed on load, versioned, and records written before the version load."""

import json
from pathlib import Path

import pytest
from result_records import make_record

from seq2final.core.errors import Seq2FinalError
from seq2final.models import build_model
from seq2final.runs.result_store import ResultStore
from seq2final.training.records import RECORD_FORMAT, ResultRecord

GOLDEN = Path(__file__).resolve().parents[1] / "golden/default_run_smoke/AVX2.json"
STUDIES = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def _store(tmp_path: Path) -> ResultStore:
    return ResultStore(tmp_path / "results", tmp_path / "models", tmp_path / "curves")


def test_records_written_before_the_format_existed_load_as_format_1(tmp_path):
    """The golden records are files as the default run wrote them before records had a format."""
    store = _store(tmp_path)
    store.results.mkdir()
    written = json.loads(GOLDEN.read_text())["records"]
    for key, old in written.items():
        assert "format" not in old
        store.record_path(key).write_text(json.dumps({**old, "wall_seconds": 1.5}))
    for key, old in written.items():
        record = store[key]
        assert record.format == 1 and record.job_key == key
        assert record.test_accuracy == old["test_accuracy"]
        assert [fit.to_json() for fit in record.fits] == old["fits"]
        # nothing is lost or changed: written again, the record is the old file plus its format
        assert record.to_json() == {**old, "wall_seconds": 1.5, "format": 1}


def test_a_record_round_trips_through_the_store_at_the_current_format(tmp_path):
    store = _store(tmp_path)
    record = make_record(view={"name": "0-1", "steps": [0, 1]},
                         step_accuracies={"0": {"train": 0.75, "test": 0.5, "test_size": 200}})  # fmt: skip
    model = build_model("convnet_1", 2)
    store.put(record.job_key, record, model, [{"epoch": 0, "valid_accuracy": 0.1}])
    loaded = store[record.job_key]
    assert loaded == record and loaded.format == RECORD_FORMAT
    assert loaded.view.name == "0-1" and loaded.step_accuracies["0"].test == 0.5
    on_disk = json.loads(store.record_path(record.job_key).read_text())
    assert on_disk["format"] == RECORD_FORMAT
    assert on_disk["step_accuracies"]["0"] == {"train": 0.75, "test": 0.5, "test_size": 200}
    assert isinstance(on_disk["step_accuracies"]["0"]["test_size"], int)
    assert "view" not in make_record().to_json()  # only a protocol's views carry one


def test_every_stored_study_record_reads_typed_to_its_leaves_and_writes_back_as_it_was():
    """The studies' records under ``benchmarks/results`` were written by earlier releases:
    each one's engine, fits and trials read as typed records, and written again it is the
    same JSON, key order included (an engine block written with ``augment: none``, which
    :meth:`Engine.recorded` leaves out, or before an option existed, included)."""
    paths = sorted(STUDIES.rglob("*.json"))
    records = [json.loads(path.read_text()) for path in paths]
    records = [r for r in records if isinstance(r, dict) and "job_key" in r]
    assert len(records) >= 300  # the protocol, intensity and representation studies' jobs
    trials = 0
    for written in records:
        record = ResultRecord.model_validate(written)
        assert record.engine.batch_size == written["engine"]["batch_size"]
        for fit, stored in zip(record.fits, written["fits"], strict=True):
            assert fit.stage == stored["stage"] and fit.train_flops == stored["train_flops"]
            trials += len(fit.trial_summaries)
            assert [t.valid_curve for t in fit.trial_summaries] == [
                t["valid_curve"] for t in stored["trial_summaries"]
            ]
        assert json.dumps(record.to_json()) == json.dumps(written)
        before_options = {**written, "engine": {k: v for k, v in written["engine"].items()
                                                if k not in ("fuse", "compile")}}  # fmt: skip
        again = ResultRecord.model_validate(before_options)
        assert again.engine.fuse == "auto" and not again.engine.compile  # the defaults
        assert json.dumps(again.to_json()) == json.dumps(before_options)
    assert trials > len(records)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (lambda r: r["fits"][0].update(valid_acuracy=0.5), "unknown key 'fits.0.valid_acuracy'; valid: stage, params,"),
        (lambda r: r["fits"][0]["trial_summaries"][0].update(value="best"),
         "'fits.0.trial_summaries.0.value' = 'best'"),
        (lambda r: r["engine"].update(batch_size=0), "'engine.batch_size' = 0"),
    ],
)  # fmt: skip
def test_a_leaf_that_does_not_match_is_refused_naming_where_it_is(tmp_path, where, message):
    store = _store(tmp_path)
    store.results.mkdir()
    written = {
        **next(iter(json.loads(GOLDEN.read_text())["records"].values())),
        "wall_seconds": 1.5,
    }
    where(written)
    store.record_path("k").write_text(json.dumps(written))
    with pytest.raises(Seq2FinalError) as error:
        store["k"]
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"test_accuracy": "high"}, "record field 'test_accuracy' = 'high'"),
        ({"tested_accuracy": 0.5}, "record field: unknown key 'tested_accuracy'"),
        ({"format": RECORD_FORMAT + 1}, "record field 'format'"),
    ],
)
def test_a_record_that_does_not_match_is_refused_in_one_line_naming_its_file(
    tmp_path, change, message
):
    store = _store(tmp_path)
    store.results.mkdir()
    path = store.record_path("k")
    path.write_text(json.dumps({**make_record().to_json(), **change}))
    with pytest.raises(Seq2FinalError) as error:
        store["k"]
    assert str(error.value).startswith(f"result record {path} is corrupt (")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_shared_flops_count_the_states_a_job_continues():
    record = make_record(historical_flops={"states": {"erm": 10, "step0": 5}})
    assert record.shared_train_flops() == {"erm": 10, "step0": 5}
    assert make_record(historical_flops=None).shared_train_flops() == {}
    assert isinstance(record, ResultRecord)


def test_format_1_records_of_earlier_releases_load(tmp_path):
    """Before FLOPs were counted a record had no FLOP fields; before a chain's step-0 model was
    charged it held one state's FLOPs; a diverged model's NLL was written as null."""
    store = _store(tmp_path)
    store.results.mkdir()
    current = make_record(historical_state="erm-key").to_json()
    current.pop("format")
    before_flops = {k: v for k, v in current.items() if not k.endswith("flops_per_image")
                    and k not in ("train_flops", "eval_flops", "historical_flops")}  # fmt: skip
    one_state = {**current, "historical_flops": {"state": "erm-key", "shared": True,
                                                  "train_flops": 7}}  # fmt: skip
    diverged = {**current, "test_nll": None, "ece": None}
    for key, old in {"a": before_flops, "b": one_state, "c": diverged}.items():
        store.record_path(key).write_text(json.dumps(old))
    assert store["a"].train_flops is None and store["a"].shared_train_flops() == {}
    assert "train_flops" not in store["a"].to_json()  # written again, still without them
    assert store["b"].shared_train_flops() == {"erm-key": 7}
    assert store["c"].test_nll is None and store["c"].format == 1
