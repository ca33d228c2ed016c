"""Method recipes, mode combinations and the paper's grids as configured in conf/base."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch import nn

import seq2final
from seq2final.config.checks import check_mode_configs
from seq2final.core.errors import Seq2FinalError
from seq2final.methods import (
    FINAL_MODES,
    HISTORICAL_MODES,
    METHODS,
    HistoricalState,
    JobNames,
    ModelChain,
    continue_chains,
    settings_of,
)
from seq2final.methods.requests import canonical_modes, check_combination, resolve_request
from seq2final.methods.schedules import (
    ScheduleSettings,
    check_schedules,
    schedule_lr,
    selected_schedules,
)
from seq2final.training.records import FitRecord
from seq2final.training.search import SearchSpace, get_budget


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_is_a_valid_combination_of_registered_modes(name):
    recipe = METHODS[name]
    assert recipe.historical in HISTORICAL_MODES and recipe.final in FINAL_MODES
    check_combination(recipe.historical, recipe.final)


def test_every_registered_mode_has_its_yaml_block_and_its_spaces_parse(project_parameters):
    check_mode_configs(
        project_parameters["historical_modes"],
        project_parameters["final_modes"],
        project_parameters["pretrain_historical"]["step0"],
    )


def _grid(block: dict, key: str = "space") -> int:
    return SearchSpace.parse(block[key], key).grid_size()


def test_paper_budget_evaluates_exactly_the_papers_grids(project_parameters):
    """Grid sizes per fit, reference §3.2-3.5 and the configuration counts of §6.4."""
    h, f = project_parameters["historical_modes"], project_parameters["final_modes"]
    assert get_budget(project_parameters["budgets"], "paper").sampler == "grid"
    assert get_budget(project_parameters["budgets"], "paper").max_epochs == 100
    assert (
        SearchSpace.parse(project_parameters["pretrain_historical"]["step0"], "s").grid_size() == 8
    )
    assert {m: _grid(h[m]) for m in ("erm", "irm", "dro", "sequential_ewc")} == dict.fromkeys(
        ("erm", "irm", "dro", "sequential_ewc"), 8
    )
    assert _grid(h["sequential_side_1"]) == _grid(h["sequential_side_b"]) == 24
    finals = {name: _grid(block) for name, block in f.items() if "space" in block}
    papers = {
        "scratch": 8, "scratch_oracle": 8, "all_erm": 8, "all_irm": 8, "all_dro": 8, "ft": 8,
        "lp_ft": 8, "side_1": 24, "side_b": 24, "joint": 3, "joint_side_1": 1, "joint_side_b": 1,
    }  # fmt: skip
    assert {name: finals[name] for name in papers} == papers
    # Wild-Time's modes: the standard grid, their λ fixed at Wild-Time's Yearbook values
    wild_time = ("coral_t", "irm_t", "dro_t", "mixup", "lisa")
    assert {finals[f"all_{n}"] for n in wild_time} == {_grid(h[n]) for n in wild_time} == {8}
    assert _grid(f["lp_ft"], "head_space") == 8
    # SFT: all six schedules; `none` tunes lr (8 per step), the others fix it (4 per step).
    schedules = selected_schedules(h["sequential"], "paper", "historical_modes.sequential")
    assert len(schedules) == 6
    space = SearchSpace.parse(h["sequential"]["space"], "s")
    sizes = [
        space.grid_size()
        if schedule_lr(s, 1) is None
        else space.fix({"lr": schedule_lr(s, 1)}).grid_size()
        for s in schedules.values()
    ]
    assert sorted(sizes) == [4, 4, 4, 4, 4, 8]


def test_sft_schedules_give_the_listed_learning_rates(project_parameters):
    written = project_parameters["historical_modes"]["sequential"]["schedules"]
    schedules = ScheduleSettings.model_validate({"schedules": written}).schedules
    linear = [schedule_lr(schedules["linear_1e-3"], t) for t in range(4)]
    assert linear == pytest.approx([1e-3, 9e-4, 8e-4, 7e-4])
    exponential = [schedule_lr(schedules["exponential_2e-4_0.75"], t) for t in range(4)]
    assert exponential == pytest.approx([2e-4, 1.5e-4, 1.125e-4, 8.4375e-5])
    assert schedule_lr(schedules["none"], 3) is None


def test_convnet_one_layer_variants_are_their_block_versions():
    assert canonical_modes("erm", "side_1", "convnet_2") == ("erm", "side_b")
    assert canonical_modes("sequential_side_1", "side_1", "convnet_1") == (
        "sequential_side_b",
        "side_b",
    )
    assert canonical_modes("none", "joint_side_1", "resnet_3") == ("none", "joint_side_1")


def test_no_method_and_no_modes_means_every_method():
    assert [name for name, *_ in resolve_request(None, None, None)] == list(METHODS)
    assert resolve_request(None, "irm", "lp_ft") == [("irm+lp_ft", "irm", "lp_ft")]
    assert resolve_request(None, None, "scratch") == [("baseline", "none", "scratch")]
    with pytest.raises(Seq2FinalError, match="unknown schedule"):
        selected_schedules(
            {"schedules": {"none": {"kind": "none"}}, "budget_schedules": {"x": ["cosine"]}},
            "x",
            "historical_modes.sequential",
        )


@pytest.mark.parametrize(
    ("schedules", "budgets", "message"),
    [
        ({"linear_1e-3": {"kind": "linear", "start": 1e-3, "decrement": 1e-4, "factr": 3}}, {},
         r"'schedules.linear_1e-3.linear.factr' = 3: Extra inputs are not permitted"),
        ({"a": {"kind": "none"}, "b": {"kind": "exponential", "start": 1e-3}}, {"quick": ["a"]},
         r"'schedules.b.exponential.factor': Field required"),  # a budget that does not run b
        ({"a": {"kind": "cosine"}}, {}, r"'schedules.a' = \{'kind': 'cosine'\}: Input tag "
                                        r"'cosine' found using 'kind' does not match"),
        ({"a": {"kind": "none"}}, {"paper": ["a", "b"]},
         r"budget 'paper' names unknown schedule\(s\) b; valid: a"),
    ],
)  # fmt: skip
def test_every_declared_schedule_is_checked_key_by_key(schedules, budgets, message):
    """A nested typo or a schedule no budget runs is refused by name like any block's key."""
    block = {"schedules": schedules, "budget_schedules": budgets}
    with pytest.raises(Seq2FinalError, match=r"^historical_modes.sequential.*" + message):
        selected_schedules(block, "quick", "historical_modes.sequential")


def test_only_the_budgets_schedules_must_stay_positive_on_long_sequences(project_parameters):
    """A linear schedule reaches zero at step 10; a budget that does not run it still works."""

    sequential = project_parameters["historical_modes"]["sequential"]
    check_schedules(sequential, 12, "quick", "historical_modes.sequential")
    with pytest.raises(Seq2FinalError, match="linear_1e-3 reaches learning rate .* at step 10"):
        check_schedules(sequential, 12, "paper", "historical_modes.sequential")


def _chain_choice(valid_by_chain: dict[str, float]):
    """Run SFT's choice among chains whose continued fits score the given validation accuracies."""
    ctx = SimpleNamespace(fits=[])
    models = {name: nn.Linear(1, 1) for name in valid_by_chain}

    def fit_chain(name: str, chain: ModelChain) -> nn.Module:
        ctx.fits.append(FitRecord(stage=name, params={}, valid_accuracy=valid_by_chain[name],
                                  best_epoch=1, epochs=1, trials=1))  # fmt: skip
        return models[name]

    chains = {name: ModelChain(models=[nn.Linear(1, 1)]) for name in valid_by_chain}
    state = HistoricalState(mode="sequential", arch="convnet_4", chains=chains)
    return continue_chains(ctx, state, fit_chain, None), models


def test_sft_keeps_the_best_schedule_on_validation_and_the_first_of_a_tie():
    outcome, models = _chain_choice({"none": 0.5, "linear": 0.7, "exponential": 0.7})
    assert outcome.chosen.chain == "linear" and outcome.model is models["linear"]
    assert outcome.valid_accuracy == 0.7
    assert {name: valid for name, (_, valid) in outcome.candidates.items()} == {
        "none": 0.5,
        "linear": 0.7,
        "exponential": 0.7,
    }
    assert all(outcome.candidates[n][0] is models[n] for n in models)


def test_one_chain_is_no_choice():
    outcome, models = _chain_choice({"main": 0.4})
    assert (
        outcome.chosen.chain is None
        and outcome.candidates == {}
        and outcome.model is models["main"]
    )


def test_a_job_is_named_by_its_first_name_in_the_papers_order_wherever_it_is_shown():
    """One decision for the plan, the records, MLflow and the tables: the ConvNet job asked for
    as ``st_b`` and ``st_1`` is ``st_1``, whichever was asked first; a plugin's method keeps its
    own name; a temporal protocol's view is a model of its own in MLflow."""
    assert JobNames.of("st_b", ["st_b", "st_1"]) == JobNames("st_1", ("st_b",))
    assert JobNames.of("st_1", ["st_b"]) == JobNames("st_1", ("st_b",))
    assert JobNames.of("my_method") == JobNames("my_method", ())
    assert JobNames.of("ft").model_name("0-2") == "ft.0-2"
    assert JobNames.of("ft").model_name(None) == "ft"


def test_every_block_names_itself_from_the_registry_and_no_source_types_a_location(
    project_parameters,
):
    """A mode's messages name its block by the checked block's ``where``; a location typed by
    hand (one named ``historical_modes.sequential_side``, which is no mode) is never needed, and
    any left in the source must name a registered mode."""
    params = project_parameters
    blocks = check_mode_configs(params["historical_modes"], params["final_modes"],
                                params["pretrain_historical"]["step0"])  # fmt: skip
    for group, registry, checked in (("historical_modes", HISTORICAL_MODES, blocks.historical),
                                     ("final_modes", FINAL_MODES, blocks.final)):  # fmt: skip
        assert list(checked) == list(registry)
        assert all(block.where == f"{group}.{name}" for name, block in checked.items())
    registries = {"historical_modes": HISTORICAL_MODES, "final_modes": FINAL_MODES}
    typed = [
        (path.name, group, name)
        for path in Path(seq2final.__file__).parent.rglob("*.py")
        for group, name in re.findall(r"\b(historical_modes|final_modes)\.(\w+)", path.read_text())
    ]
    assert [entry for entry in typed if entry[2] not in registries[entry[1]]] == []
    block = blocks.final["agem"]
    assert settings_of(type(block.settings), block) is block.settings  # read once, at the check
