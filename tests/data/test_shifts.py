import numpy as np
import pytest

from seq2final.core.errors import Seq2FinalError
from seq2final.data.effects import EFFECTS, ShiftState, add_noise, flip_labels, recolour, rotate
from seq2final.data.shifts import SHIFTS, advance


def _marker_image() -> np.ndarray:
    """One 3×9×9 image, black but for a white pixel at the top centre."""
    image = np.zeros((1, 3, 9, 9), np.uint8)
    image[0, :, 0, 4] = 255
    return image


def test_plus_90_moves_top_centre_to_left_centre():
    turned = rotate(_marker_image(), np.array([0]), [90.0])
    assert turned[0, 0, 4, 0] == 255
    assert turned[0, 0].sum() == 255  # nothing else lit


def test_minus_90_moves_top_centre_to_right_centre():
    turned = rotate(_marker_image(), np.array([0]), [-90.0])
    assert turned[0, 0, 4, 8] == 255


def test_rotation_by_30_leaves_black_corners():
    image = np.full((1, 3, 32, 32), 200, np.uint8)
    turned = rotate(image, np.array([0]), [30.0])
    assert turned[0, :, 0, 0].tolist() == [0, 0, 0]
    assert turned[0, :, 16, 16].tolist() == [200, 200, 200]


def test_conditional_rotation_direction_follows_class_parity():
    state = advance(
        advance(advance(ShiftState.source(4), ["rotation_cond"]), ["rotation_cond"]),
        ["rotation_cond"],
    )
    assert state["rotation"] == (90.0, -90.0, 90.0, -90.0)
    images = np.repeat(_marker_image(), 2, axis=0)
    turned = rotate(images, np.array([0, 1]), state["rotation"])
    assert turned[0, 0, 4, 0] == 255  # even class: counter-clockwise
    assert turned[1, 0, 4, 8] == 255  # odd class: clockwise


def test_rotation_accumulates_30_degrees_per_step():
    state = ShiftState.source(3)
    for _ in range(3):
        state = SHIFTS["rotation"](state)
    assert state["rotation"] == (90.0, 90.0, 90.0)


def test_noise_values_are_in_minus3_to_2_then_clipped():
    rng = np.random.RandomState(0)
    mid = np.full((200, 3, 8, 8), 100, np.uint8)
    noisy = add_noise(mid, rng).astype(int) - 100
    assert set(np.unique(noisy)) == {-3, -2, -1, 0, 1, 2}
    low = add_noise(np.zeros((50, 3, 8, 8), np.uint8), rng)
    high = add_noise(np.full((50, 3, 8, 8), 255, np.uint8), rng)
    assert set(np.unique(low)) == {0, 1, 2}
    assert set(np.unique(high)) == {252, 253, 254, 255}


def test_two_flips_send_y_to_11_minus_y_mod_10():
    state = advance(advance(ShiftState.source(10), ["label_flip"]), ["label_flip"])
    assert state["label_flips"] == (1, 2)
    labels = np.arange(10)
    assert flip_labels(labels, state["label_flips"], 10).tolist() == [(11 - y) % 10 for y in labels]
    assert flip_labels(labels, (1,), 10).tolist() == [9 - y for y in labels]


def test_recolor_adds_30_red_per_step_and_clips():
    state = ShiftState.source(2)
    for _ in range(3):
        state = SHIFTS["recolor"](state)
    images = np.full((2, 3, 4, 4), 200, np.uint8)
    images[1] = 10
    out = recolour(images, np.array([0, 1]), state["tint"])
    assert out[0, 0, 0, 0] == 255 and out[0, 1, 0, 0] == 200
    assert out[1, 0, 0, 0] == 100 and out[1, 2, 0, 0] == 10


def test_conditional_recolor_picks_channel_by_class_mod_3():
    state = SHIFTS["recolor_cond"](ShiftState.source(4))
    assert state["tint"] == ((30, 0, 0), (0, 30, 0), (0, 0, 30), (30, 0, 0))


def test_label_shift_moves_probability_to_odd_classes_and_stops_at_three():
    state = ShiftState.source(10)
    for _ in range(3):
        state = SHIFTS["label_shift"](state)
    assert state["class_weights"].weights[0] == pytest.approx(0.01)
    assert state["class_weights"].weights[1] == pytest.approx(0.19)
    with pytest.raises(Seq2FinalError, match="at most 3 label_shift"):
        SHIFTS["label_shift"](state)


def test_subpop_membership_per_step():
    state = ShiftState.source(2, with_subpopulations=True)
    members = [{s for s, p in enumerate(state["subpopulations"].weights) if p > 0}]
    for _ in range(3):
        state = SHIFTS["subpop"](state)
        members.append({s for s, p in enumerate(state["subpopulations"].weights) if p > 0})
    assert members == [{0, 1}, {0, 1, 2}, {1, 2, 3}, {2, 3, 4}]
    with pytest.raises(Seq2FinalError, match="subpop step 4"):
        SHIFTS["subpop"](state)


def test_order_rotation_and_tint_use_pre_flip_labels():
    """Class 0 is rotated and tinted as class 0 even though its label is flipped to 9."""
    state = advance(ShiftState.source(10), ["rotation_cond", "recolor_cond", "label_flip"])
    images = np.zeros((2, 3, 9, 9), np.uint8)
    images[:, :, 0, 4] = 100
    labels = np.array([0, 1])
    [(x, y)] = state.apply([(images, labels)], np.random.RandomState(0))
    assert y.tolist() == [9, 8]
    expected_0 = recolour(
        rotate(images[:1], np.array([0]), state["rotation"]), np.array([0]), state["tint"]
    )
    expected_1 = recolour(
        rotate(images[1:], np.array([1]), state["rotation"]), np.array([1]), state["tint"]
    )
    assert np.array_equal(x[0], expected_0[0]) and np.array_equal(x[1], expected_1[0])


def test_noise_comes_before_rotation():
    """Rotated corners stay exactly black: noise was added before rotating, not after."""
    state = advance(advance(ShiftState.source(1), ["corruption"]), ["rotation"])
    images = np.full((4, 3, 32, 32), 128, np.uint8)
    [(x, _)] = state.apply([(images, np.zeros(4, np.int64))], np.random.RandomState(1))
    assert (x[:, :, 0, 0] == 0).all()
    assert len(np.unique(x[:, :, 16, 16])) > 1


def test_noise_is_fresh_per_application():
    state = advance(advance(ShiftState.source(1), ["corruption"]), ["corruption"])
    images = np.full((100, 3, 8, 8), 100, np.uint8)
    [(x, _)] = state.apply([(images, np.zeros(100, np.int64))], np.random.RandomState(0))
    assert set(np.unique(x.astype(int) - 100)) == set(range(-6, 5))


@pytest.mark.parametrize("name", [n for n, e in EFFECTS.items() if e.apply is not None])
def test_every_effect_leaves_images_alone_and_draws_nothing_at_its_initial_value(name):
    """Every sequence carries every registered effect, a plugin's too: at its initial value an
    effect must change no pixel or label and take no random number, or loading it would change
    every existing sequence."""
    entry = EFFECTS[name]
    rng = np.random.default_rng(0)
    splits = [(rng.integers(0, 256, (6, 3, 8, 8), dtype=np.uint8), np.arange(6) % 3)
              for _ in range(3)]  # fmt: skip
    draws = np.random.RandomState(5)
    out = entry.apply(splits, entry.initial(3, True), draws, 3)
    assert all(np.array_equal(x, x0) and np.array_equal(y, y0)
               for (x, y), (x0, y0) in zip(out, splits, strict=True))  # fmt: skip
    assert draws.randint(0, 2**31) == np.random.RandomState(5).randint(0, 2**31)
