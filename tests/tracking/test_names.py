"""Checks of MLflow names before any training."""

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
