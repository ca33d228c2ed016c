"""A mode's block where no YAML gives one: its declared spaces, else every declared default entry
of what its fits read; its settings checked and read without opt-in; YAML overrides by key."""

import pytest
from pydantic import Field

from seq2final.config import checks
from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry
from seq2final.core.schema import StrictModel
from seq2final.methods import FINAL_MODES, FinalMode
from seq2final.methods.modes import default_space
from seq2final.training.hyperparameters import FitHyperParameters
from seq2final.training.hyperparameters import default_space as schema_space
from seq2final.training.terms import L2, LOSS_TERMS

STEP0 = {"lr": {"grid": [1.0e-3]}}


class Memory(StrictModel):
    memory: int = Field(default=200, ge=1)


def _run(mode, monkeypatch, final_modes=None):
    only = Registry("final mode")
    only.add(mode.name, mode)
    monkeypatch.setattr(checks, "FINAL_MODES", only)
    return checks.check_mode_configs({}, final_modes or {}, STEP0).final[mode.name]


def _mode(**options):
    return FinalMode("replay_test", "a test mode", ("model",), lambda *a: None, **options)


def test_with_no_block_a_mode_searches_every_declared_default_its_fits_read(monkeypatch):
    block = _run(_mode(terms=("irm",), settings=Memory), monkeypatch)
    expected = {**schema_space(FitHyperParameters), **schema_space(L2.hyperparameters),
                **schema_space(LOSS_TERMS["irm"].hyperparameters)}  # fmt: skip
    assert dict(block["space"]) == expected
    assert set(expected) == {"lr", "dropout", "weight_decay", "irm_penalty"}
    assert list(block.spaces["space"].params["irm_penalty"].grid) == expected["irm_penalty"]["grid"]
    assert block.settings == Memory(memory=200)  # read without a settings_of call


def test_the_defaults_are_what_the_projects_standard_yaml_space_holds(project_parameters):
    """The derived default of a plain fine-tuning mode is the paper's grid the YAML spells out."""
    assert default_space(FINAL_MODES["ft"], "space") == dict(
        project_parameters["final_modes"]["ft"]["space"]
    )


def test_a_declared_space_is_used_and_yaml_replaces_it_key_by_key(monkeypatch):
    declared = {"lr": {"grid": [0.01]}}
    mode = _mode(settings=Memory, spaces={"space": declared})
    assert dict(_run(mode, monkeypatch)["space"]) == declared
    yaml_space = {"lr": {"grid": [0.5]}}
    block = _run(mode, monkeypatch, {"replay_test": {"memory": 7}})
    assert dict(block["space"]) == declared and block.settings.memory == 7
    block = _run(mode, monkeypatch, {"replay_test": {"space": yaml_space}})
    assert dict(block["space"]) == yaml_space and block.settings.memory == 200


def test_a_bad_setting_and_a_bad_declaration_are_one_line(monkeypatch):
    with pytest.raises(Seq2FinalError, match="final_modes.replay_test.*memory"):
        _run(_mode(settings=Memory), monkeypatch, {"replay_test": {"memory": 0}})
    with pytest.raises(ValueError, match="spaces for head_space, which are not its search"):
        _mode(spaces={"head_space": {"lr": {"grid": [0.1]}}})
    with pytest.raises(ValueError, match="unknown optimizer 'nope'; valid: adam"):
        _mode(optimizer="nope")


def test_a_one_entry_override_merges_into_a_declared_space_and_null_removes_an_entry(monkeypatch):
    """``--params final_modes.<mode>.space.dropout.grid:[0.1]`` changes dropout's grid alone."""
    declared = {"lr": {"grid": [1e-3, 1e-4], "low": 1e-4, "high": 1e-2, "log": True},
                "dropout": {"grid": [0.0, 0.5], "low": 0.0, "high": 0.5}}  # fmt: skip
    mode = _mode(spaces={"space": declared})
    block = _run(mode, monkeypatch, {"replay_test": {"space": {"dropout": {"grid": [0.1]}}}})
    assert dict(block["space"]) == {**declared, "dropout": {"grid": [0.1], "low": 0.0, "high": 0.5}}
    assert block.spaces["space"].grid_size() == 2
    block = _run(mode, monkeypatch, {"replay_test": {"space": {"dropout": None}}})
    assert dict(block["space"]) == {"lr": declared["lr"]}  # a null entry leaves the search
    written = {"lr": {"grid": [0.1]}, "dropout": None}  # a space with no declared one too
    assert dict(_run(_mode(), monkeypatch, {"replay_test": {"space": written}})["space"]) == {
        "lr": {"grid": [0.1]}
    }
    with pytest.raises(Seq2FinalError, match=r"needs 'lr' \(a space written for a mode without a "
                                             r"declared one replaces its default space whole"):  # fmt: skip
        _run(_mode(), monkeypatch, {"replay_test": {"space": {"dropout": {"grid": [0.1]}}}})
