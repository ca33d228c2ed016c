"""The ``representations`` pipeline end to end: every state's curve on the same nested subsets,
P_rep tables and the figure, a resumed run that fits nothing twice, and sizes refused before
any work."""

import pandas as pd
import pytest

from seq2final.core.errors import MissingPrerequisiteError, Seq2FinalError
from seq2final.reporting.tables import report_folder
from seq2final.runs.sequence_store import SequenceStore

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


def test_states_of_every_history_on_the_sequence_final_step(project, run_kedro, monkeypatch):
    """``test_on: sequence`` under ``test_then_train``: the states that saw steps 0..t−1 are all
    fitted and tested on the sequence's final step, and P_rep is tabulated and drawn by history;
    with ``test_on: view`` each view's states are tested on the view's own final step."""
    import seq2final.representations.train as curves_training

    tested = []

    def spy(model, kind, train, valid, test, *args, **kwargs):
        tested.append((tuple(test.y.tolist()), test.x.sum().item()))
        return curve_point(model, kind, train, valid, test, *args, **kwargs)

    curve_point = curves_training.curve_point
    monkeypatch.setattr(curves_training, "curve_point", spy)
    params = {**TINY, "sequence": "source100:rotation60:rotation60:corruption100",
              "method": ["ft"], "protocol": "test_then_train"}  # fmt: skip
    options = {"sizes": [10], "max_epochs": 1}
    run_kedro(["build_sequences", "pretrain_historical"], **params)
    run_kedro(
        ["representations"], **{**params, "representations": {**options, "test_on": "sequence"}}
    )
    folder = project / "data/07_model_output/representation_curves"
    frames = pd.concat(pd.read_csv(path) for path in folder.glob("*.csv"))
    sequence = SequenceStore(project / "data/03_primary/sequences")[frames["sequence_key"].iloc[0]]

    def test_split(step):
        x, y = sequence.step(step).split("test")
        return tuple(y.tolist()), int(x.astype("int64").sum())

    # the fresh model, then erm after steps 0..0 and 0..1, each fine-tuned and probed
    assert tested == [test_split(3)] * 5
    assert sorted(zip(frames["state"], frames["history"], frames["kind"], strict=True)) == [
        ("erm", 1, "ft"), ("erm", 1, "lp"), ("erm", 2, "ft"), ("erm", 2, "lp"),
        ("scratch", 0, "ft"),
    ]  # fmt: skip
    assert frames["view"].isna().all()  # all on the whole sequence's final step
    reports = report_folder(params["sequence"], "digits")
    reporting = project / "data/08_reporting"
    report = reporting / "representation_reports" / reports / "smoke-representations.md"
    by_history = report.read_text().split("P_rep by the number of steps")[1]
    assert "| erm     | ft     |" in by_history and "2 steps" in by_history
    figures = reporting / "representation_figures" / reports
    assert (figures / "smoke-convnet_1-p_rep-history.png").exists()
    tested.clear()
    run_kedro(["representations"], **{**params, "representations": options})
    # per view: the fresh model, then erm fine-tuned and probed, on the view's final step
    assert tested == [test_split(1)] * 3 + [test_split(2)] * 3
    tested.clear()
    streamed = {**params, "protocol": "eval_stream", "representations": options}
    run_kedro(["build_sequences", "pretrain_historical", "representations"], **streamed)
    assert not tested  # 0-1's points are test_then_train's; 0-0 has no state, so no curve
    mixed = {**streamed, "protocol": "mixed_split",
             "representations": {**options, "test_on": "sequence"}}  # fmt: skip
    with pytest.raises(Seq2FinalError, match="view mixed-0-1: its training images are drawn"):
        run_kedro(["representations"], **mixed)  # refused before its state is even looked for
    with pytest.raises(Seq2FinalError) as other:  # a run that fits no curve: not for the curves
        run_kedro(["adapt_final"], **mixed)
    assert "representations.test_on" not in str(other.value)
