import pytest

from seq2final.errors import Seq2FinalError
from seq2final.params import validate_parameters


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"sequence": "rotaton"}, "unknown sequence 'rotaton'"),
        ({"dataset": "imagenet"}, "unknown dataset 'imagenet'; valid: digits"),
        ({"method": "st_c"}, "unknown method 'st_c'; valid: oracle, baseline"),
        ({"historical": "ermm"}, "unknown historical mode 'ermm'; valid: none, erm"),
        ({"final": "fine_tune"}, "unknown final mode 'fine_tune'; valid: scratch"),
        ({"arch": "resnet_5"}, "unknown architecture 'resnet_5'; valid: "),
        ({"seed": "abc"}, "parameter 'seed' = 'abc'"),
        ({"budget": 0}, "parameter 'budget' = 0"),
        ({"sequense": "clr"}, "unknown parameter 'sequense'; valid: sequence, dataset"),
        (
            {"quantify_shift": {"varience": 0.9}},
            "unknown parameter 'quantify_shift.varience'; valid: variance",
        ),
    ],
)
def test_bad_parameters_stop_with_one_line(params, needle):
    with pytest.raises(Seq2FinalError) as error:
        validate_parameters(params)
    assert needle in str(error.value)
    assert "\n" not in str(error.value)


def test_good_parameters_pass():
    run = validate_parameters(
        {"sequence": "clr", "dataset": "npz", "seed": 3, "method": "st_b", "arch": "resnet_4"}
    )
    assert run.seed == 3 and run.quantify_shift.variance == 0.95
