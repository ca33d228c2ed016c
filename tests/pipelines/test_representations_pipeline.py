"""The ``representations`` pipeline end to end: every state's curve on the same nested subsets,
P_rep tables and the figure, a resumed run that fits nothing twice, and sizes refused before
any work."""

import pandas as pd
import pytest

from seq2final.core.errors import MissingPrerequisiteError, Seq2FinalError
from seq2final.reporting.tables import report_folder

TINY = {
    "sequence": "source100:rotation60:corruption100",
    "build_sequences": {"test_size": 50, "oracle_size": 120},
    "budget": "smoke",
    "arch": "convnet_1",
    "method": ["ft", "sft_gated"],
    "mlflow": {"enabled": False},
    "representations": {"sizes": [10, 20], "max_epochs": 2},
}


def _points(project):
    folder = project / "data/07_model_output/representation_curves"
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.csv")}


def test_curves_of_every_state_then_a_resumed_run_fits_nothing(project, run_kedro):
    def _run(pipelines, **params):
        return run_kedro(pipelines, **{**TINY, **params})

    with pytest.raises(MissingPrerequisiteError, match="has not been trained; make it with"):
        _run(["build_sequences", "representations"])
    assert not _points(project)
    _run(["build_sequences", "pretrain_historical"])
    with pytest.raises(
        Seq2FinalError, match=r"curve size 1000: valid: whole numbers from 1 to \d+"
    ):
        _run(["representations"], representations={"sizes": [10, 1000]})
    assert not _points(project)  # refused before any fit
    _run(["representations"])
    stored = _points(project)
    # erm (ft's state) and sft_gated, FT and LP; the fresh model FT only; two sizes each
    assert len(stored) == (2 * 2 + 1) * 2
    frames = pd.concat([pd.read_csv(project / "data/07_model_output/representation_curves" / n)
                        for n in stored])  # fmt: skip
    assert sorted(set(zip(frames["state"], frames["kind"], strict=True))) == [
        ("erm", "ft"),
        ("erm", "lp"),
        ("scratch", "ft"),
        ("sft_gated", "ft"),
        ("sft_gated", "lp"),
    ]
    assert set(frames["size"]) == {10, 20} and (frames["train_flops"] > 0).all()
    folder = report_folder(TINY["sequence"], "digits")  # the test environment's dataset
    reporting = project / "data/08_reporting"
    p_rep = pd.read_csv(reporting / "representation_tables" / folder / "smoke-p_rep.csv")
    for row in p_rep.itertuples():
        mine = frames[(frames["state"] == row.state) & (frames["kind"] == row.kind)]
        assert row.p_rep == pytest.approx(mine["test_accuracy"].mean())
    assert (reporting / "representation_reports" / folder / "smoke-representations.md").exists()
    assert (reporting / "representation_figures" / folder / "smoke-convnet_1-curves.png").exists()
    _run(["representations"])
    assert _points(project) == stored  # every point reused, none rewritten
