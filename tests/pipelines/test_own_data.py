"""A user's own images by time through every pipeline and both temporal protocols, from a folder
and from a manifest generated at test time (no code, no yaml: parameters only)."""

import mlflow
import pandas as pd
import pytest
from kedro.framework.session import KedroSession

from seq2final.core.errors import Seq2FinalError
from seq2final.core.startup import bootstrap_once
from seq2final.runs.planner import plan_run
from tests.temporal_images import manifest_of, write_images

PERIODS = ("2019", "2020", "2021", "2022")
SIX = ["build_sequences", "quantify_shift", "pretrain_historical", "adapt_final", "evaluate",
       "visualize"]  # fmt: skip


def _run(project, pipelines, **params):
    while mlflow.active_run():
        mlflow.end_run()
    bootstrap_once(project)
    runtime = {"budget": "smoke", "mlflow": {"enabled": False}, **params}
    with KedroSession.create(project_path=project, env="test", runtime_params=runtime) as session:
        return session.run(pipeline_names=pipelines)


def test_a_folder_of_photos_runs_every_pipeline_with_its_periods_and_classes(
    project, stores_of, tmp_path, caplog
):
    photos = tmp_path / "photos"
    write_images(photos, periods=PERIODS, classes=("ok", "worn", "broken"), per_class=12,
                 suffix=".jpg")  # fmt: skip
    caplog.set_level("INFO")
    _run(project, SIX, dataset="folder", data_path=str(photos), method=["baseline", "ft"],
         data_options={"final_labelled": 12})  # fmt: skip
    stores = stores_of(project)
    (key,) = list(stores.sequences)
    sequence = stores.sequences[key]
    assert sequence.step_names == list(PERIODS) and sequence.class_names == ["broken", "ok", "worn"]
    counts = pd.read_csv(project / "data/03_primary/sequences" / key / "counts.csv",
                         dtype={"step": str}).set_index("step")  # fmt: skip
    assert counts.loc["2022", ["train", "valid", "test"]].tolist() == [9, 3, 24]
    assert counts.loc["2019", ["broken", "ok", "worn"]].tolist() == [12, 12, 12]
    assert "2022: 36 images (train 9, valid 3, test 24): broken 12, ok 12, worn 12" in [
        r.getMessage() for r in caplog.records
    ]
    records = [stores.results[k] for k in stores.results]
    assert {r.method for r in records} == {"baseline", "ft"}
    assert all(r.test_size == 24 for r in records)
    reporting = project / "data/08_reporting"
    assert list(reporting.rglob("*examples*.png")) and list(reporting.rglob("*.csv"))
    shift = pd.read_csv(reporting / "shift_tables" / key / "relative_to_final.csv")
    assert list(shift.columns)[1:] == ["W^{0,3} 2019", "W^{1,3} 2020", "W^{2,3} 2021"]


@pytest.mark.parametrize(("protocol", "options"), [("eval_fix", {"split_step": 2}),
                                                    ("eval_stream", {"window": 1})])  # fmt: skip
def test_a_manifest_runs_under_both_temporal_protocols(project, stores_of, tmp_path, protocol,
                                                       options):  # fmt: skip
    photos = tmp_path / "photos"
    paths = write_images(photos, periods=PERIODS, per_class=10)
    manifest = manifest_of(photos, paths, "manifest.parquet")
    _run(project, ["build_sequences", "pretrain_historical", "adapt_final", "evaluate"],
         dataset="manifest", data_path=str(manifest), method="baseline", protocol=protocol,
         protocol_options=options)  # fmt: skip
    records = [stores_of(project).results[k] for k in stores_of(project).results]
    assert records and all(set(r.step_accuracies) == {"0", "1", "2", "3"} for r in records)


def test_a_protocol_asking_for_more_periods_than_the_data_has_names_the_maximum(project, tmp_path):
    photos = tmp_path / "photos"
    write_images(photos, periods=PERIODS, per_class=2)
    with pytest.raises(Seq2FinalError, match=r"split_step 5 is outside the sequence "
                                             r"\(steps 0..3\); valid: 1..2"):  # fmt: skip
        _run(project, ["build_sequences"], dataset="folder", data_path=str(photos),
             protocol="eval_fix", protocol_options={"split_step": 5})  # fmt: skip
    assert not any((project / "data/03_primary/sequences").glob("*/manifest.json"))


def test_the_oracle_is_refused_by_name_and_left_out_of_every_method_on_periods(
    project, tmp_path, checked_run
):
    """A sequence of periods has no oracle-size draw of its final step."""
    photos = tmp_path / "photos"
    write_images(photos, periods=PERIODS, per_class=2)
    with pytest.raises(Seq2FinalError, match=r"^method 'oracle' cannot run on dataset 'folder': "
                                             r"it trains on the final step's oracle-size draw"):  # fmt: skip
        _run(project, ["build_sequences"], dataset="folder", data_path=str(photos),
             method="oracle")  # fmt: skip
    every = plan_run(checked_run(dataset="folder", data_path=str(photos), method=None), "data")
    methods = {job.requested[0] for job in every.jobs}
    assert "oracle" not in methods and {"baseline", "ft"} <= methods


def test_a_family_of_intensities_on_periods_is_refused_in_one_line(checked_run, tmp_path):
    """A user's periods are one sequence: there is no shift intensity to sweep over."""
    write_images(tmp_path / "photos", periods=PERIODS, per_class=1)
    with pytest.raises(Seq2FinalError, match=r"^dataset 'folder' is a sequence by itself \(its "
                                             r"periods\), with no shift intensity to dial .*"
                                             r"intensities \[0.5, 1.0\]\); valid: intensities "
                                             r"null"):  # fmt: skip
        checked_run(dataset="folder", data_path=str(tmp_path / "photos"),
                    intensities=[0.5, 1.0])  # fmt: skip
