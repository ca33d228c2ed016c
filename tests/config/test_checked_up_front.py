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


def test_a_device_this_machine_lacks_is_refused_even_when_every_job_is_reused(run_kedro, project):
    run_kedro(["build_sequences", "pretrain_historical", "adapt_final"], **TINY)
    missing = f"cuda:{torch.cuda.device_count()}"  # one past the last GPU (cuda:0 on a CPU)
    for pipelines in (["adapt_final"], ["evaluate"]):  # the job is reused; evaluate never trains
        with pytest.raises(Seq2FinalError, match=f"parameter 'training': device '{missing}'"):
            run_kedro(pipelines, **{**TINY, "training": {"device": missing}})


def test_an_empty_experiment_name_is_one_line_before_any_work(run_kedro, project):
    with pytest.raises(Seq2FinalError, match="empty experiment name ''") as error:
        run_kedro(["build_sequences"], **{**TINY, "mlflow": {"experiment": "{seed}"[:0]}})
    assert "\n" not in str(error.value)
    assert not (project / "data/03_primary").exists()
