"""A family through ``kedro run``: every member trained as its own sequence, then the
``robustness`` pipeline reads them together (docs/intensity.md)."""

import dataclasses
import json
import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from seq2final.cli import cli
from seq2final.core.errors import Seq2FinalError
from seq2final.core.startup import bootstrap_once
from seq2final.pipelines.robustness.nodes import gather_family, resolve_family
from seq2final.reporting.robustness import fit_line
from tests.result_records import make_record

FAMILY = "source60:rotation@*/60:rotation@*/60"
PARAMS = (
    f"sequence:{FAMILY},intensities:[0,45,90],budget:smoke,arch:convnet_1,"
    "method:[ft,baseline],build_sequences.test_size:40,build_sequences.oracle_size:null,"
    "mlflow.enabled:false"
)


@pytest.fixture(scope="module")
def family_run(tmp_path_factory, copy_project_to):
    project = copy_project_to(tmp_path_factory.mktemp("family"))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        patch.setenv("KEDRO_DISABLE_TELEMETRY", "1")
        bootstrap_once(project)
        result = CliRunner().invoke(cli, ["run", "--env", "test", "--params", PARAMS])
    assert result.exit_code == 0, result.output
    return project


def test_each_member_is_its_own_sequence_with_its_own_results(family_run):
    sequences = sorted(p.name for p in (family_run / "data/03_primary/sequences").iterdir())
    assert [s.split("-digits-")[0] for s in sequences] == [
        "source60-rotation-0-60-rotation-0-60",
        "source60-rotation-45-60-rotation-45-60",
        "source60-rotation-90-60-rotation-90-60",
    ]
    records = [json.loads(p.read_text())
               for p in (family_run / "data/07_model_output/results").glob("*.json")]  # fmt: skip
    assert sorted((r["sequence"], r["method"]) for r in records) == sorted(
        (FAMILY.replace("*", str(i)), m) for i in (0, 45, 90) for m in ("baseline", "ft")
    )
    for sequence in sequences:  # every member was measured
        assert (family_run / "data/04_feature/shift_distances" / f"{sequence}.csv").exists()


def test_the_robustness_tables_hold_the_members_accuracies_and_their_lines(family_run):
    folder = "source60-rotation@I-60-rotation@I-60-digits"
    tables = family_run / "data/08_reporting/robustness_tables" / folder
    points = pd.read_csv(tables / "smoke-points.csv")
    slopes = pd.read_csv(tables / "smoke-slopes.csv")
    records = {
        (r["sequence"], r["method"]): r["test_accuracy"]
        for r in (json.loads(p.read_text())
                  for p in (family_run / "data/07_model_output/results").glob("*.json"))
    }  # fmt: skip
    for _, row in points.iterrows():
        assert row["accuracy"] == records[(row["sequence"], row["method"])]
    for path in (family_run / "data/04_feature/shift_distances").glob("*.csv"):
        # the x of each member is its history's distance (steps 0 and 1 pooled) to the final
        history = pd.read_csv(path).iloc[-1]
        assert history["comparison"] == "history_to_final" and history["first"] == "0..1"
        member = points[np.isclose(points["nn1"], history["nn1"], rtol=0, atol=1e-9)]
        assert len(member) == 2 and member["intensity"].nunique() == 1  # its ft and baseline
    ft = points[points["method"] == "ft"].sort_values("intensity")
    assert ft["delta"].tolist() == pytest.approx((ft["accuracy"] - ft["accuracy"].iloc[0]).tolist())
    for measure in ("intensity", "nn1", "w2_covariate"):
        line = slopes[(slopes["method"] == "ft") & (slopes["measure"] == measure)].iloc[0]
        assert line["slope"] == pytest.approx(fit_line(ft[measure], ft["delta"])["slope"])
    assert ft["nn1"].is_monotonic_increasing or ft["nn1"].iloc[-1] > ft["nn1"].iloc[0]
    history = pd.read_csv(tables / "smoke-history.csv")
    assert set(history["method"]) == {"ft"} and sorted(history["intensity"]) == [0, 45, 90]
    figures = family_run / "data/08_reporting/robustness_figures" / folder
    assert {p.name for p in figures.iterdir()} >= {
        "smoke-convnet_1-deltas.png",
        "smoke-slope_vs_clean-nn1.png",
        "smoke-history.png",
    }


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ("intensities:[]", "an empty family"),
        ("intensities:[0,200]", "intensity 200 of shift block 'rotation'"),
        ("intensities:[10,10]", "repeat"),
        ("sequence:source60:rotation/60,intensities:[1]", "has no '@\\*'"),
        ("sequence:source60:rotation@*/60", "without intensities"),
    ],
)
def test_a_bad_family_is_one_line_before_any_member_trains(project, params, needle):
    bootstrap_once(project)
    base = "sequence:source60:rotation@*/60,mlflow.enabled:false"
    result = CliRunner().invoke(cli, ["run", "--env", "test", "--params", f"{base},{params}"])
    assert result.exit_code != 0
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: ") and re.search(needle, last), last
    assert not (project / "data/03_primary").exists()


def test_a_session_runs_a_family_through_robustness_only(run_kedro):
    runtime = {"sequence": FAMILY, "intensities": [0, 45], "mlflow": {"enabled": False}}
    with pytest.raises(Seq2FinalError, match="is a family: pipelines build_sequences"):
        run_kedro(["build_sequences"], **runtime)
    with pytest.raises(Seq2FinalError, match="no member of the family has results"):
        run_kedro(["robustness"], **runtime)


def test_each_seeds_points_read_that_seeds_own_distances(caplog, checked_run):
    """Each seed draws its own images, so a member's x at a seed is measured at that seed; a
    seed without distances is named with the command that measures it."""
    run = checked_run(sequence="source60:rotation@*/60", intensities=[0, 90], dataset="digits",
                      seed=1007, budget="smoke",
                      build_sequences={"test_size": 40, "oracle_size": None})  # fmt: skip
    family = resolve_family(run)
    assert [member.intensity for member, _ in family] == [0, 90]
    records, distances = {}, {}
    for member, spec in family:
        for seed in (1007, 1011):
            key = dataclasses.replace(spec, seed=seed).key
            records[f"{key}.ft"] = make_record(
                sequence=member.sequence, dataset=spec.dataset, sequence_key=key, seed=seed,
                method="ft", historical="erm", final="ft", job_key=f"{key}.ft",
            )  # fmt: skip
            if (member.intensity, seed) != (90, 1011):
                distances[key] = pd.DataFrame([{"comparison": "history_to_final",
                    "nn1": 1000.0 * seed + member.intensity, "w2_covariate": 1.0}])  # fmt: skip
    points = gather_family(family, records, distances, run)
    measured = points.dropna(subset=["nn1"])
    assert (measured["nn1"] == 1000.0 * measured["seed"] + measured["intensity"]).all()
    assert len(measured) == 3
    assert (
        "has no distances at seed 1011: kedro run --pipelines build_sequences,quantify_shift "
        "--params 'sequence:source60:rotation@90/60,seed:1011' measures them"
    ) in caplog.text
