"""The two pipelines end to end on tiny digits sequences, through a KedroSession in the test env."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from kedro.framework.session import KedroSession
from PIL import Image

from seq2final.config.parameters import QuantifyOptions
from seq2final.core.errors import MissingPrerequisiteError, Seq2FinalError
from seq2final.core.startup import bootstrap_once
from seq2final.data.distances import Embedded, nearest_neighbour_distance, wasserstein2
from seq2final.data.sequence import StepEntry
from seq2final.pipelines.quantify_shift import nodes
from seq2final.pipelines.quantify_shift.nodes import measure_distances


def _run(project, pipeline, **params):
    bootstrap_once(project)
    with KedroSession.create(project_path=project, env="test", runtime_params=params) as session:
        return session.run(pipeline_names=[pipeline])


def test_build_then_quantify(project):
    _run(project, "build_sequences", sequence="digits_rcl", seed=11)
    [folder] = list((project / "data/03_primary/sequences").iterdir())
    assert folder.name.startswith("digits-rcl-digits-seed11-")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert [s["name"] for s in manifest["steps"]] == [
        "source",
        "rotation",
        "corruption",
        "label_flip",
    ]
    assert manifest["steps"][3]["state"]["rotation"][0] == 30.0
    assert sorted(p.name for p in folder.glob("step_*.npz")) == [
        "step_0.npz",
        "step_1.npz",
        "step_2.npz",
        "step_3.npz",
        "step_oracle.npz",
    ]
    figures = project / f"data/08_reporting/sequence_figures/{folder.name}"
    assert sorted(p.name for p in figures.iterdir()) == ["examples.pdf", "examples.png"]
    with Image.open(figures / "examples.png") as figure:
        width, height = figure.size
    assert width > 600 and height > 300  # ten classes across, a row for each of the four steps

    _run(project, "quantify_shift", sequence="digits_rcl", seed=11)
    table = pd.read_csv(
        project / f"data/08_reporting/shift_tables/{folder.name}/relative_to_final.csv"
    )
    assert list(table.columns) == [  # the paper's index and the step's own name
        "metric", "W^{0,3} source", "W^{1,3} rotation", "W^{2,3} corruption"
    ]  # fmt: skip
    assert list(table["metric"]) == ["W_X", "W_X|Y", "1-NN"]
    # Rotation is the step that makes the final distribution: before it the shift is large.
    assert table.loc[0, "W^{0,3} source"] > 1.2
    distances = pd.read_csv(project / f"data/04_feature/shift_distances/{folder.name}.csv")
    assert list(distances["comparison"]) == (
        ["half_split"] + ["consecutive"] * 3 + ["to_final"] * 4 + ["history_to_final"]
    )
    assert distances["first_size"].iloc[-1] == distances["first_size"].iloc[4:7].sum()
    assert (distances["nn1"] > 0).all()  # no final test image is a training image
    report = (project / f"data/08_reporting/shift_reports/{folder.name}.md").read_text()
    assert "W_X|Y" in report


# The default chain's order in one process: a historical state trains on 2 threads, then
# quantify_shift solves its W2 pairs in 2 threads. A process pool forked from this process hung
# for good in scikit-learn's OpenMP code on some CPUs, depending on the CPU and on timing; fork
# itself is made an error here once training has run, so no forking pool can come back.
TRAIN_THEN_QUANTIFY = textwrap.dedent(
    """
    import os, sys
    import torch
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    torch.set_num_threads(2)
    project = sys.argv[1]
    runtime = {"sequence": "source100:rotation60:label_flip60", "method": "ft", "budget": "smoke",
               "arch": "convnet_1", "mlflow": {"enabled": False},
               "build_sequences": {"test_size": 50, "oracle_size": 120},
               "quantify_shift": {"workers": 2}}
    bootstrap_project(project)
    for pipelines in (["build_sequences", "pretrain_historical"], ["quantify_shift"]):
        with KedroSession.create(project_path=project, env="test",
                                 runtime_params=runtime) as session:
            session.run(pipeline_names=pipelines)

        def fork():
            raise AssertionError("a process forked after torch trained")

        os.fork = fork
    """
)


def test_quantify_after_training_in_one_process_solves_its_pairs_without_fork(project):
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", TRAIN_THEN_QUANTIFY, str(project)],
            cwd=project, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"training then quantify_shift hung: {hung.stderr!r:.2000}")
    assert done.returncode == 0, done.stderr[-3000:]
    [distances] = (project / "data/04_feature/shift_distances").glob("*.csv")
    assert (
        len(pd.read_csv(distances)) == 1 + 2 + 3 + 1
    )  # half split, consecutive, to final, history
    assert list((project / "data/06_models/historical").iterdir())  # it did train first
    log = (project / "logs/info.log").read_text()  # each pair, solved in a thread, logged
    assert "W2 source half 1 vs source half 2: " in log


def test_subpopulation_sequence_draws_the_membership_figure(project):
    _run(project, "build_sequences", sequence="digits_sss")
    [folder] = list((project / "data/08_reporting/sequence_figures").iterdir())
    with Image.open(folder / "subpopulations.png") as figure:
        width, height = figure.size
    # 2 super-classes × 4 steps = 8 rows of 5 sub-class cells: a tall figure, not an empty one.
    assert height > width and height > 700


def test_quantify_without_a_built_sequence_names_the_command(project):
    with pytest.raises(
        MissingPrerequisiteError,
        match="kedro run --pipeline build_sequences --params sequence:digits_ttt",
    ):
        _run(project, "quantify_shift", sequence="digits_ttt")


def test_bad_parameter_stops_before_any_output(project):
    with pytest.raises(Seq2FinalError, match="unknown shift block 'rotaton'"):
        _run(project, "build_sequences", sequence="rotaton:corruption")
    assert not (project / "data/03_primary").exists()


def test_same_seed_same_content_hash(project):
    _run(project, "build_sequences", sequence="digits_ttt", seed=5)
    [folder] = list((project / "data/03_primary/sequences").iterdir())
    first = json.loads((folder / "manifest.json").read_text())["content_hash"]
    import shutil

    shutil.rmtree(folder)
    _run(project, "build_sequences", sequence="digits_ttt", seed=5)
    assert json.loads((folder / "manifest.json").read_text())["content_hash"] == first


def test_a_support_shift_reports_its_counted_intensity_beside_the_distances(project):
    spec = "source100:overlap@60/100:overlap@60/100"
    sizes = {"test_size": 50, "oracle_size": 120}
    _run(project, "build_sequences", sequence=spec, build_sequences=sizes)
    _run(project, "quantify_shift", sequence=spec, build_sequences=sizes)
    [folder] = list((project / "data/03_primary/sequences").iterdir())
    manifest = json.loads((folder / "manifest.json").read_text())
    counted = [s["support_intensity"] for s in manifest["steps"]]
    assert counted[0] == 0.0 and 0 < counted[1] < counted[2] < 1
    assert "support" not in manifest["steps"][0]["state"]  # the source's: left out
    assert [s["state"]["support"]["turn"] for s in manifest["steps"][1:]] == [60.0, 120.0]
    history = manifest["steps"][-1]["history_support_intensity"]  # against steps 0 and 1
    assert 0 < history < counted[2]
    distances = pd.read_csv(project / f"data/04_feature/shift_distances/{folder.name}.csv")
    assert distances["support_intensity"].tolist() == (
        [0.0, counted[1], counted[2]] + [counted[2]] * 3 + [history]
    )
    assert distances["comparison"].iloc[-1] == "history_to_final"
    report = (project / f"data/08_reporting/shift_reports/{folder.name}.md").read_text()
    assert "Support intensity I" in report


def test_a_sequence_whose_source_files_changed_names_the_folder_and_the_rebuild(monkeypatch):
    """The folder named is the build block's ``raw_dir`` (a typed block, read by attribute) where
    the run gives no ``data_path``."""
    from seq2final.config.parameters import BuildOptions
    from seq2final.data.spec import resolve_spec
    from seq2final.pipelines.build_sequences import nodes

    spec = resolve_spec("source100:rotation60")
    monkeypatch.setattr(nodes, "source_change", lambda *args: ("a1", "b2"))
    stored = {spec.key: SimpleNamespace(manifest=SimpleNamespace(source_fingerprint="a1"))}
    with pytest.raises(MissingPrerequisiteError) as error:
        nodes.select_sequence(stored, spec, BuildOptions(raw_dir="elsewhere/raw"))
    assert "than elsewhere/raw holds now (fingerprint a1, now b2); rebuild it with: kedro run" in (
        str(error.value)
    )


def test_pairs_solved_in_threads_equal_those_solved_in_turn_and_leave_the_filters_alone(
    monkeypatch,
):
    """Two threads give the one-thread table, and the pairs never swap the process's warning
    filters: ``catch_warnings()`` in two threads at once can leave one thread's filter behind."""
    rng = np.random.default_rng(0)

    def embedded(name, shift):
        return Embedded(name, rng.normal(shift, 1.0, (40, 3)), np.repeat(np.arange(4), 10))

    train = [embedded(f"{t}:step", t / 2) for t in range(3)]
    pooled = Embedded("0..1", np.concatenate([t.features for t in train[:2]]),
                      np.concatenate([t.labels for t in train[:2]]))  # fmt: skip
    embedding = {"key": "k", "components": 3, "train": train, "test": embedded("2:test", 1.0),
                 "halves": [embedded("half 1", 0.0), embedded("half 2", 0.0)],
                 "history": pooled, "history_support_intensity": None}  # fmt: skip
    one = measure_distances(embedding, QuantifyOptions(workers=1))["k"]
    filters = list(warnings.filters)  # with POT and scikit-learn imported, and their filters set

    caught = warnings.catch_warnings

    def in_main_thread_only(*args, **kwargs):
        assert threading.current_thread() is threading.main_thread(), "filters swapped in a pool"
        return caught(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(warnings, "catch_warnings", in_main_thread_only)
        two = measure_distances(embedding, QuantifyOptions(workers=2))["k"]
    assert warnings.filters == filters
    pd.testing.assert_frame_equal(one, two)
    assert len(two) == 1 + 2 + 3 + 1 and (two["w2_covariate"] > 0).all()


def test_the_history_row_measures_the_pooled_historical_steps_and_a_one_step_history_once(
    monkeypatch,
):
    """What a historical model trained on is steps 0..T−1 together: the last row is their
    pooled images against the final test set; with one historical step it is that step's row,
    solved once."""
    rng = np.random.default_rng(1)

    def embedded(name, shift, n=30):
        return Embedded(name, rng.normal(shift, 1.0, (n, 3)), np.repeat(np.arange(3), n // 3))

    train = [embedded("0:source", 0.0), embedded("1:step", 2.0), embedded("2:step", 1.0)]
    test, halves = embedded("2:test", 1.0), [embedded("h1", 0.0, 15), embedded("h2", 0.0, 15)]
    pooled = Embedded("0..1", np.concatenate([t.features for t in train[:2]]),
                      np.concatenate([t.labels for t in train[:2]]))  # fmt: skip
    three = {"key": "k", "components": 3, "train": train, "test": test, "halves": halves,
             "history": pooled, "history_support_intensity": None}  # fmt: skip
    row = measure_distances(three, QuantifyOptions(workers=1))["k"].iloc[-1]
    assert (row["comparison"], row["first"], row["first_size"]) == ("history_to_final", "0..1", 60)
    assert row["w2_covariate"] == pytest.approx(
        wasserstein2(pooled.features, test.features, 10**8, "pooled")
    )
    assert row["nn1"] == pytest.approx(
        nearest_neighbour_distance(pooled.features, test.features, "pooled")
    )
    solves = []
    real = nodes._wasserstein_pair
    monkeypatch.setattr(nodes, "_wasserstein_pair", lambda *a: solves.append(a) or real(*a))
    two = {**three, "train": train[:2], "history": train[0]}
    frame = measure_distances(two, QuantifyOptions(workers=1))["k"]
    assert len(solves) == 1 + 1 + 2  # halves, one consecutive, two to_final; the history reused
    to_final, history = frame.iloc[-3], frame.iloc[-1]
    assert history["comparison"] == "history_to_final"
    assert history.drop("comparison").equals(to_final.drop("comparison"))


def test_a_sequence_built_before_the_history_note_has_its_I_only_for_a_one_step_history():
    """The note is new; a stored two-step sequence's history is its source, whose I against
    the final step is the final step's own noted I; a longer history's cannot be read back."""

    def step(support: float, history: float | None = None) -> StepEntry:
        return StepEntry(name="s", state=None, sizes={}, support_intensity=support,
                         history_support_intensity=history)  # fmt: skip

    source, final = step(0.0), step(0.4)
    assert nodes._history_intensity([source, final]) == 0.4
    assert nodes._history_intensity([source, step(0.2), final]) is None
    assert nodes._history_intensity([source, step(0.4), step(0.4, 0.0)]) == 0.0


def test_a_long_historys_row_reads_a_seeded_draw_of_history_images(monkeypatch):
    """Its exact W2 against the final test set would outgrow every other pair: a history longer
    than ``history_images`` is a seeded draw of that many images, the same at every run."""
    rng = np.random.default_rng(2)
    steps = [(rng.integers(0, 255, (12, 3, 4, 4), dtype=np.uint8), np.arange(12) % 3)
             for _ in range(3)]  # fmt: skip
    test = (rng.integers(0, 255, (9, 3, 4, 4), dtype=np.uint8), np.arange(9) % 3)

    class Step:
        name = "step"

        def __init__(self, train, test=None):
            self.arrays = {"train": train, "test": test}

        def split(self, name):
            return self.arrays[name]

    class Sequence:
        key = "k"
        manifest = SimpleNamespace(
            spec=SimpleNamespace(seed=5), steps=[StepEntry(name=str(t), state=None, sizes={})
                                                 for t in range(3)]
        )  # fmt: skip

        def steps(self):
            return [Step(steps[0]), Step(steps[1]), Step(steps[2], test)]

    small = nodes.embed_sequence(Sequence(), QuantifyOptions(history_images=10, max_components=4))
    whole = nodes.embed_sequence(Sequence(), QuantifyOptions(max_components=4))
    assert len(whole["history"].labels) == 24 and whole["history"].name == "0..1"
    assert len(small["history"].labels) == 10 and small["history"].name == "0..1 (10 drawn)"
    rows = {tuple(r) for r in whole["history"].features.round(9)}
    assert {tuple(r) for r in small["history"].features.round(9)} <= rows  # drawn from it
    again = nodes.embed_sequence(Sequence(), QuantifyOptions(history_images=10, max_components=4))
    np.testing.assert_array_equal(again["history"].features, small["history"].features)
