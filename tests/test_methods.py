import pytest

from seq2final.methods import FINAL_MODES, HISTORICAL_MODES, METHODS


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_is_a_registered_historical_and_final_mode(name):
    recipe = METHODS[name]
    assert recipe.historical in HISTORICAL_MODES
    assert recipe.final in FINAL_MODES
