"""Support-overlap shifts: exact selections in a known embedding, and sequences drawn from them."""

import numpy as np
import pytest

from seq2final.core.errors import Seq2FinalError
from seq2final.data.effects import SUPPORT, ShiftState, Support
from seq2final.data.sampler import build_sequence, support_space
from seq2final.data.shifts import SHIFTS
from seq2final.data.spec import resolve_spec
from seq2final.data.support import SupportSpace


def _circle(n=3600, radii=None):
    """Points at n evenly spaced angles on the unit circle (or at ``radii``), t1 = x, t2 = y."""
    angles = np.arange(n) * 360.0 / n
    r = np.ones(n) if radii is None else radii
    points = np.stack([r * np.cos(np.deg2rad(angles)), r * np.sin(np.deg2rad(angles))], axis=1)
    return angles, points


def _space(points, caps=True, ball=False, radius=1.0):
    axes = (np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    return SupportSpace(
        {"train": points}, {"train": np.full(len(points), radius)}, axes, caps, ball
    )


def _gap(angles, centre):
    """Brute force: each angle's distance in degrees from ``centre`` on the circle."""
    return np.abs((angles - centre + 180.0) % 360.0 - 180.0)


@pytest.mark.parametrize("theta", [0.0, 15.0, 45.0, 90.0, 135.0, -60.0])
def test_overlap_selects_the_turned_hemisphere_and_its_I_is_the_share_outside(theta):
    angles, points = _circle()
    space = _space(points)
    state = SHIFTS["overlap"](ShiftState.source(2), theta)[SUPPORT]
    held = space.inside("train", np.arange(len(points)), state)
    assert np.array_equal(held, _gap(angles, theta) <= 90.0 + 1e-9)
    base = _gap(angles, 0.0) <= 90.0 + 1e-9
    outside = (held & ~base).sum() / held.sum()
    assert space.intensity(state) == pytest.approx(outside)
    assert outside == pytest.approx(abs(theta) / 180.0, abs=1e-3)  # uniform: I = θ/180


@pytest.mark.parametrize("theta", [0.0, 30.0, 60.0])
def test_extend_widens_the_cap_and_I_counts_the_new_band(theta):
    angles, points = _circle()
    space = _space(points)
    state = SHIFTS["extend"](ShiftState.source(2), theta)[SUPPORT]
    held = space.inside("train", np.arange(len(points)), state)
    assert np.array_equal(held, _gap(angles, 0.0) <= 90.0 + theta + 1e-9)
    assert space.intensity(state) == pytest.approx(theta / (90.0 + theta), abs=1e-3)


def test_truncate_grows_the_ball_and_I_counts_the_shell():
    radii = np.linspace(0.01, 3.0, 300)
    _, points = _circle(300, radii)
    space = _space(points, caps=False, ball=True, radius=1.0)
    state = SHIFTS["truncate"](ShiftState.source(2), 0.5)[SUPPORT]
    held = space.inside("train", np.arange(len(points)), state)
    assert np.array_equal(held, radii <= 1.5)
    assert space.intensity(state) == pytest.approx(
        ((radii > 1) & (radii <= 1.5)).sum() / held.sum()
    )


@pytest.mark.parametrize(
    ("seen", "final"), [((0.0, 60.0), 60.0), ((0.0, 60.0), 120.0), ((0.0, 90.0), 45.0)]
)
def test_I_against_several_training_supports_counts_what_none_of_them_holds(seen, final):
    """A model trained on steps of several supports has seen their union (docs/intensity.md):
    brute force on the circle, where a turned hemisphere holds the angles within 90° of it."""
    angles, points = _circle()
    space = _space(points)
    training = [Support(turn=turn) for turn in seen]
    held = _gap(angles, final) <= 90.0 + 1e-9
    union = np.any([_gap(angles, turn) <= 90.0 + 1e-9 for turn in seen], axis=0)
    expected = (held & ~union).sum() / held.sum()
    assert space.intensity(Support(turn=final), training) == pytest.approx(expected)
    if final in seen:
        assert expected == 0.0


def test_the_final_steps_I_against_its_history_is_noted_and_zero_when_the_history_holds_it(
    source_factory,
):
    """``overlap_full``'s design: the final step keeps the support a historical step turned to,
    so against the history's supports its I is 0, against the source's it is not."""
    source = source_factory(per_class=200, per_class_test=60, classes=4)
    for spec_text, covered in (("source40:overlap@60/40:overlap@0/40", True),
                               ("source40:overlap@60/40:overlap@60/40", False)):  # fmt: skip
        spec = resolve_spec(spec_text, dataset="digits", test_size=20, oracle_size=60)
        final = build_sequence(spec, source).manifest.steps[-1]
        space = support_space(spec, source)
        seen = [Support(), Support(turn=60.0)]
        turn = 60.0 if covered else 120.0
        assert final.history_support_intensity == pytest.approx(
            space.intensity(Support(turn=turn), seen)
        )
        assert final.support_intensity == pytest.approx(space.intensity(Support(turn=turn)))
        assert final.support_intensity > 0.2
        assert (final.history_support_intensity == 0.0) is covered


def test_support_sequences_draw_only_inside_each_steps_support(source_factory):
    source = source_factory(per_class=200, per_class_test=60, classes=4)
    spec = resolve_spec("source40:overlap@60/40:overlap@60/40", dataset="digits", test_size=20,
                        oracle_size=60)  # fmt: skip
    sequence = build_sequence(spec, source)
    space = support_space(spec, source)
    for index, step in enumerate(sequence.steps()):
        support = Support(turn=60.0 * index)
        for split in ("train", "valid", "test"):
            if f"idx_{split}" not in step.arrays:
                continue
            pool = "test" if split == "test" else "train"
            assert space.inside(pool, step.arrays[f"idx_{split}"], support).all()
        noted = sequence.manifest.steps[index].support_intensity
        assert noted == pytest.approx(space.intensity(support))
    assert sequence.manifest.steps[0].support_intensity == 0.0
    assert 0.2 < sequence.manifest.steps[-1].support_intensity < 0.9
    again = build_sequence(spec, source)
    assert again.content_hash == sequence.content_hash  # seeded: the same data


def test_a_sequence_without_support_blocks_keeps_its_pools_whole(source_factory):
    source = source_factory(per_class=200, per_class_test=60, classes=4)
    spec = resolve_spec("source40:rotation40", dataset="digits", test_size=20, oracle_size=60)
    assert support_space(spec, source) is None
    steps = build_sequence(spec, source).manifest.steps
    assert all("support_intensity" not in s and "support" not in s.state for s in steps)


def test_a_support_too_narrow_for_a_step_says_how_many_it_found(source_factory):
    source = source_factory(per_class=60, per_class_test=30, classes=4)
    spec = resolve_spec("source100:overlap@90/100", dataset="digits", test_size=20,
                        oracle_size=60)  # fmt: skip
    with pytest.raises(Seq2FinalError, match=r"needs \d+ train\+valid images .* has \d+ inside "
                       r"the step's support .*wider support"):  # fmt: skip
        build_sequence(spec, source)


def test_extending_the_cap_past_the_whole_sphere_is_refused():
    state = SHIFTS["extend"](ShiftState.source(2), 60.0)
    with pytest.raises(Seq2FinalError, match="widen the support's cap by 120° .*at most 90°"):
        SHIFTS["extend"](state, 60.0)
