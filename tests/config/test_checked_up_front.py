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


def test_an_unknown_key_in_a_modes_block_stops_the_run_before_any_node(project):
    """Every key of every mode's block is checked against what the mode declares (its spaces and
    its ``settings`` schema), with no opt-in: a typo trains nothing and stores nothing."""
    from click.testing import CliRunner

    from seq2final.cli import cli

    params = "sequence=source100:rotation60,method=ft,budget=smoke,final_modes.ft.bogus=1"
    done = CliRunner().invoke(cli, ["run", "--env", "test", "--params", params])
    assert done.exit_code != 0
    [line] = done.stderr.strip().splitlines()
    assert line == "Error: final_modes.ft has unknown key(s) bogus; valid: space"
    assert not (project / "data/03_primary").exists()
    assert not (project / "data/07_model_output").exists()


def test_every_registered_modes_block_holds_only_the_keys_it_declares(project_parameters):
    """Looped over both registries (the lab plugin's modes too): the project's block of each mode
    passes, and the same block with one key more is refused naming the keys the mode declares."""
    from seq2final.config.checks import check_mode_configs
    from seq2final.methods import FINAL_MODES, HISTORICAL_MODES
    from seq2final.methods.modes import block_keys

    p = project_parameters
    blocks = {"historical_modes": p["historical_modes"], "final_modes": p["final_modes"]}
    step0 = p["pretrain_historical"]["step0"]
    check_mode_configs(blocks["historical_modes"], blocks["final_modes"], step0)
    for where, registry in (("historical_modes", HISTORICAL_MODES), ("final_modes", FINAL_MODES)):
        for name, mode in registry.items():
            bad = {**blocks, where: {**blocks[where], name: {**(blocks[where].get(name) or {}),
                                                             "typo": 1}}}  # fmt: skip
            valid = ", ".join(block_keys(mode)) or "none (the mode has no settings)"
            message = f"{where}.{name} has unknown key(s) typo; valid: {valid}"
            with pytest.raises(Seq2FinalError) as error:
                check_mode_configs(bad["historical_modes"], bad["final_modes"], step0)
            assert str(error.value) == message
