"""Every run option is checked against the machine and MLflow's rules before any work, whether
or not anything will train."""

import pytest
import torch

from seq2final.core.errors import Seq2FinalError

TINY = {
    "sequence": "source100:rotation60",
    "build_sequences": {"test_size": 50, "oracle_size": 120},
    "budget": "smoke",
    "method": "baseline",
    "arch": "convnet_1",
    "mlflow": {"enabled": False},
}


def test_a_device_this_machine_lacks_is_refused_whatever_the_pipelines_would_do(run_kedro, project):
    """The check runs when the session starts, before any pipeline, so it cannot depend on
    whether a job would train or be reused: ``evaluate`` never trains, and ``adapt_final``
    refuses as it does here, with nothing stored yet."""
    missing = f"cuda:{torch.cuda.device_count()}"  # one past the last GPU (cuda:0 on a CPU)
    for pipelines in (["adapt_final"], ["evaluate"]):
        with pytest.raises(Seq2FinalError, match=f"parameter 'training': device '{missing}'"):
            run_kedro(pipelines, **{**TINY, "training": {"device": missing}})


def test_an_empty_experiment_name_is_one_line_before_any_work(run_kedro, project):
    with pytest.raises(Seq2FinalError, match="empty experiment name ''") as error:
        run_kedro(["build_sequences"], **{**TINY, "mlflow": {"experiment": "{seed}"[:0]}})
    assert "\n" not in str(error.value)
    assert not (project / "data/03_primary").exists()
