"""Checks of MLflow names before any training."""

import numpy as np
import pytest
from mlflow import MlflowClient

from seq2final.core.errors import Seq2FinalError
from seq2final.tracking.names import check_registry_names


class CountingClient(MlflowClient):
    """A real client on a file database that counts the registry lookups it makes."""

    asked: list[str]

    def get_registered_model(self, name: str):  # noqa: ANN201
        self.asked.append(name)
        return super().get_registered_model(name)


def test_each_accepted_name_is_asked_once_per_registry_and_a_refused_one_every_time(tmp_path):
    first = CountingClient(f"sqlite:///{tmp_path / 'a.db'}")
    first.asked = []
    check_registry_names(first, ["seq.convnet_1.ft", "seq.convnet_1.ft", "seq.best"])
    assert first.asked == ["seq.convnet_1.ft", "seq.best"]  # repeated names asked once
    check_registry_names(first, ["seq.best", "seq.convnet_1.erm"])
    assert first.asked[2:] == ["seq.convnet_1.erm"]  # accepted before: not asked again
    other = CountingClient(f"sqlite:///{tmp_path / 'b.db'}")
    other.asked = []
    check_registry_names(other, ["seq.best"])
    assert other.asked == ["seq.best"]  # another registry answers for itself
    for _ in range(2):
        with pytest.raises(Seq2FinalError, match="MLflow refuses the registered model name"):
            check_registry_names(first, ["seq/ft"])
    assert first.asked[3:] == ["seq/ft", "seq/ft"]


def test_the_names_checked_before_work_are_the_names_the_tracker_gives_every_view(checked_run):
    """Under a temporal protocol each view's model is registered under a name of its own; the
    tracking hook checks names the tracker gives, each method's and each view's part among
    them, before any work, not the views' common name."""
    from seq2final.runs.planner import plan_run
    from seq2final.tracking.jobs import JobTracker
    from seq2final.tracking.kedro_hook import _job_names

    run = checked_run(
        sequence="source100:rotation60:corruption100:label_flip60", dataset="digits",
        build_sequences={"test_size": 50}, arch="convnet_1", budget="smoke", method=["erm", "ft"],
        protocol="eval_stream", protocol_options={"window": 1}, training={"device": "cpu"},
    )  # fmt: skip
    plan = plan_run(run, "data")
    tracker = JobTracker(None, plan, "{}", np.zeros((1, 1, 8, 8), np.uint8), 10)
    given = {tracker.names(job).registered_model for job in plan.jobs}
    checked = {names.registered_model for names in _job_names(run)}
    # each view's own: time 0's one model (every method's) and each method at later times
    shown = {name.split(".convnet_1.")[1] for name in given}
    assert shown == {"baseline.0-0", "erm.0-1", "ft.0-1", "erm.0-2", "ft.0-2"}
    # checked: every name and every view among them, not each pair of the two
    asked = {name.split(".convnet_1.")[1] for name in checked}
    assert asked < shown and len(asked) == 4
    assert {n.split(".")[0] for n in asked} == {"baseline", "erm", "ft"}
    assert {n.split(".")[1] for n in asked} == {"0-0", "0-1", "0-2"}
