import copy

import pytest

from seq2final.config.checks import validate_parameters
from seq2final.core.errors import Seq2FinalError
from seq2final.methods import FINAL_MODES, FinalMode
from seq2final.training import ModelWrapper


def _with(base: dict, **overrides):
    """The project's own parameters with some values replaced (nested keys joined by '.')."""
    params = copy.deepcopy(base)
    for dotted, value in overrides.items():
        *path, last = dotted.split(".")
        node = params
        for part in path:
            node = node[part]
        node[last] = value
    return params


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"sequence": "rotaton"}, "unknown sequence 'rotaton'"),
        ({"dataset": "imagenet"}, "unknown dataset 'imagenet'; valid: digits"),
        ({"method": "st_c"}, "unknown method 'st_c'; valid: oracle, baseline"),
        ({"method": ["si", "st_c"]}, "unknown method 'st_c'; valid: oracle, baseline"),
        ({"method": []}, "an empty list runs nothing; valid: a method, a list of them, or null"),
        ({"historical": "ermm"}, "unknown historical mode 'ermm'; valid: none, erm"),
        ({"final": "fine_tune"}, "unknown final mode 'fine_tune'; valid: scratch"),
        ({"arch": "resnet_5"}, "unknown architecture 'resnet_5'; valid: "),
        ({"seed": "abc"}, "parameter 'seed' = 'abc'"),
        (
            {"budget": "huge"},
            "parameter 'budget': unknown budget 'huge'; valid: smoke, tour, quick, default, tpe30, efficient, paper",
        ),
        (
            {"method": "st_b", "final": "ft"},
            "method 'st_b' is historical 'erm' + final 'side_b', which contradicts final 'ft'",
        ),
        (
            {"historical": "none", "final": "ft"},
            "historical 'none' cannot precede final 'ft': 'ft' continues from a trained historical",
        ),
        (
            {"historical": "sequential_side_b", "final": "side_1"},
            "'sequential_side_b' adds block side modules and 'side_1' adds one_layer ones",
        ),
        (
            {"historical": "erm", "final": "joint"},
            "'joint' trains on the steps itself and would ignore 'erm''s state; valid historical modes for 'joint': none",
        ),
        ({"historical": "erm"}, "historical 'erm' needs a final mode too"),
        (
            {"final_modes.ft.space.lr.low": 1.0},
            "search space final_modes.ft.space.lr: low 1.0 > high 0.003",
        ),
        (
            {"historical_modes.erm.space.dropout.grid": []},
            "historical_modes.erm.space.dropout 'grid' = []",
        ),
        (
            {"final_modes.ft.space.irm_penalty": {"grid": [1.0]}},
            "search space final_modes.ft.space names hyper-parameter(s) irm_penalty that no loss "
            "term of the mode declares; valid: dropout, lr, weight_decay",
        ),
        (
            {"historical_modes.irm.space.irm_penalty.grid": [-1.0]},
            "search space historical_modes.irm.space (loss term 'irm') 'irm_penalty' = -1.0: Input "
            "should be greater than or equal to 0",
        ),
        (
            {"training.input_scale": "raw255"},
            "parameter 'training.input_scale' = 'raw255': Input should be 'unit' or 'raw'",
        ),
        ({"sequense": "clr"}, "unknown parameter 'sequense'; valid: sequence, dataset"),
        (
            {"quantify_shift": {"varience": 0.9}},
            "unknown parameter 'quantify_shift.varience'; valid: variance",
        ),
    ],
)
def test_bad_parameters_stop_with_one_line(params, needle, project_parameters):
    nested = {k: v for k, v in params.items() if "." in k}
    merged = {
        **_with(project_parameters, **nested),
        **{k: v for k, v in params.items() if "." not in k},
    }
    with pytest.raises(Seq2FinalError) as error:
        validate_parameters(merged)
    assert needle in str(error.value)
    assert "\n" not in str(error.value)


def test_good_parameters_pass(project_parameters):
    run = validate_parameters(
        {
            **_with(project_parameters),
            "sequence": "clr",
            "dataset": "npz",
            "seed": 3,
            "method": "st_b",
            "arch": "resnet_4",
        }
    )
    assert run.parameters.seed == 3 and run.parameters.quantify_shift.variance == 0.95
    assert run.spec.seed == 3 and run.spec.dataset == "npz"


class _AdapterFirst(ModelWrapper):
    """Trains parameters named ``adapter.`` first: a ConvNet has none."""

    def phases(self):
        return [(1, ["adapter."]), (None, None)]


def test_a_wrapper_phase_that_trains_nothing_stops_the_run_before_any_work(
    project_parameters, monkeypatch
):
    def never(ctx, config, state):  # the check stops the run before any mode runs
        raise AssertionError("trained")

    mode = FinalMode("adapter_ft", "adapter first", ("model",), never, wrapper=_AdapterFirst())
    monkeypatch.setitem(FINAL_MODES._entries, "adapter_ft", mode)
    params = {**_with(project_parameters), "historical": "erm", "final": "adapter_ft",
              "final_modes": {**project_parameters["final_modes"], "adapter_ft": {"space": {
                  "lr": {"grid": [1e-3]}}}}}  # fmt: skip
    with pytest.raises(Seq2FinalError) as error:
        validate_parameters(params)
    assert str(error.value).startswith(
        "final mode 'adapter_ft': model wrapper _AdapterFirst: phase 1 trains no parameter "
        "(prefixes ['adapter.'])"
    )
    assert "\n" not in str(error.value)
    # the same wrapper with a phase the architecture has passes
    monkeypatch.setattr(_AdapterFirst, "phases", lambda self: [(1, ["fc."]), (None, None)])
    assert validate_parameters(params).parameters.final == "adapter_ft"
