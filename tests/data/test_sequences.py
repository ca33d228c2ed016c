import numpy as np
import pytest

from seq2final.core.errors import Seq2FinalError
from seq2final.data.effects import ShiftState, Weights
from seq2final.data.presets import PRESETS
from seq2final.data.sampler import build_sequence, plan_units, shift_states, split_counts
from seq2final.data.shifts import SHIFTS
from seq2final.data.sizes import PAPER_SIZES
from seq2final.data.spec import parse_spec, resolve_spec


def test_paper_sizes_split_per_class_80_20():
    units = plan_units(ShiftState.source(10), 6000, 0)
    assert {(u.train, u.valid) for u in units} == {(480, 120)}
    assert sum(u.train for u in units) == 4800 and sum(u.valid for u in units) == 1200
    units = plan_units(ShiftState.source(10), 4000, 5000)
    assert {(u.train, u.valid, u.test) for u in units} == {(320, 80, 500)}


def test_subclass_split_floors_and_gives_zero_share_nothing():
    state = ShiftState.source(20, with_subpopulations=True)
    for _ in range(3):
        state = SHIFTS["subpop"](state)
    units = [u for u in plan_units(state, 4000, 5000) if u.label == 0]
    assert [u.train + u.valid for u in units] == [0, 0, 66, 66, 68]
    assert [u.train for u in units] == [0, 0, 52, 52, 54]
    assert [u.test for u in units] == [0, 0, 83, 83, 84]


def test_split_counts_remainder_to_last_nonzero():
    assert split_counts(10, [0.5, 0.5, 0, 0, 0]) == [5, 5, 0, 0, 0]
    assert split_counts(200, [1 / 3, 1 / 3, 1 / 3, 0, 0]) == [66, 66, 68, 0, 0]


def test_parse_spec_sizes_and_defaults():
    steps = parse_spec("source6000:rotation4000:corruption+label_flip6000:recolor", PAPER_SIZES)
    assert [s.size for s in steps] == [6000, 4000, 6000, 4000]
    assert steps[2].blocks == ("corruption", "label_flip")
    assert [s.size for s in parse_spec("rotation:rotation:rotation", PAPER_SIZES)] == [
        6000,
        4000,
        6000,
        4000,
    ]
    assert parse_spec("rotation,recolor", PAPER_SIZES)[1].blocks == ("rotation", "recolor")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("rotation::", "malformed sequence 'rotation::'"),
        ("rotaton", "unknown sequence 'rotaton'"),
        ("rotaton:corruption", "unknown shift block 'rotaton'"),
        ("source:", "no shifted step"),
        ("rotation:4000x", "malformed sequence"),
        ("sourceX:rotation", "bad source step"),
    ],
)
def test_malformed_specs_are_refused_with_valid_choices(text, needle):
    with pytest.raises(Seq2FinalError, match="valid|write steps") as error:
        resolve_spec(text)
    assert needle in str(error.value)
    assert "\n" not in str(error.value)


def test_unknown_dataset_lists_valid_sources():
    with pytest.raises(Seq2FinalError, match="unknown dataset 'cifar11'; valid: digits, cifar10"):
        resolve_spec("clr", dataset="cifar11")


def test_presets_resolve_with_paper_sizes():
    spec = resolve_spec("rcl")
    assert spec.dataset == "cifar10" and spec.seed == 1007
    assert [s.size for s in spec.steps] == [6000, 4000, 6000, 4000]
    assert (spec.test_size, spec.oracle_size) == (5000, 20000)
    assert [s.size for s in resolve_spec("rot7").steps] == [
        4000,
        2000,
        3000,
        2000,
        3000,
        2000,
        4000,
    ]
    assert resolve_spec("sss").dataset == "cifar100"
    for name in PRESETS:
        resolve_spec(name)


def test_step_seeds_match_the_original_draws():
    assert resolve_spec("clr").step_seeds() == [1007, 6906, 8583, 6709]


def test_sampling_without_replacement_and_test_disjoint(source):
    spec = resolve_spec(
        "source400:rotation300:corruption400:label_flip300",
        dataset="digits",
        test_size=100,
        oracle_size=400,
    )
    sequence = build_sequence(spec, source)
    for step in [*sequence.steps(), sequence.step("oracle")]:
        train_valid = np.concatenate([step.arrays["idx_train"], step.arrays["idx_valid"]])
        assert len(np.unique(train_valid)) == len(train_valid)
    final = sequence.step(-1)
    assert len(final.arrays["y_test"]) == 100 and len(np.unique(final.arrays["idx_test"])) == 100
    train_images = {
        x.tobytes() for s in sequence.steps() for x in source.x_train[s.arrays["idx_train"]]
    }
    assert not train_images & {x.tobytes() for x in source.x_test[final.arrays["idx_test"]]}
    assert [s.sizes for s in sequence.manifest.steps][0] == {"train": 320, "valid": 80}


def test_oracle_shares_the_final_test_images(source):
    spec = resolve_spec("source400:rotation300", dataset="digits", test_size=100, oracle_size=500)
    sequence = build_sequence(spec, source)
    same_images = np.sort(sequence.step(1).arrays["idx_test"])
    assert np.array_equal(same_images, np.sort(sequence.step("oracle").arrays["idx_test"]))
    assert len(sequence.step("oracle").arrays["y_train"]) == 400


def test_labels_and_pixels_carry_the_shift(source):
    spec = resolve_spec(
        "source100:label_flip100:rotation100", dataset="digits", test_size=50, oracle_size=None
    )
    sequence = build_sequence(spec, source)
    final = sequence.step(-1)
    original = source.y_train[final.arrays["idx_train"]]
    assert np.array_equal(final.arrays["y_train"], 9 - original)
    assert not np.array_equal(final.arrays["x_train"], source.x_train[final.arrays["idx_train"]])
    step0 = sequence.step(0)
    assert np.array_equal(step0.arrays["x_train"], source.x_train[step0.arrays["idx_train"]])


def test_same_seed_same_hash_other_seed_other_hash(source):
    def build(seed):
        spec = resolve_spec(
            "corruption:rotation", dataset="digits", seed=seed, test_size=50, oracle_size=200
        )
        spec = type(spec)(
            **{
                **spec.to_dict(),
                "steps": tuple(type(spec.steps[0])(s.blocks, 200) for s in spec.steps),
            }
        )
        return build_sequence(spec, source)

    assert build(1).content_hash == build(1).content_hash
    assert build(1).content_hash != build(2).content_hash


def test_sss_membership_per_step(source_factory):
    source = source_factory(per_class=200, per_class_test=40, classes=2, subclasses=5)
    spec = resolve_spec(
        "source100:subpop60:subpop100:subpop60", dataset="digits", test_size=30, oracle_size=90
    )
    sequence = build_sequence(spec, source)
    members = [sorted(set(step.arrays["sub_train"].tolist())) for step in sequence.steps()]
    assert members == [[0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert sorted(set(sequence.step(-1).arrays["sub_test"].tolist())) == [2, 3, 4]


def test_fourth_subpop_step_is_refused(source_factory):
    source = source_factory(per_class=200, per_class_test=40, classes=2, subclasses=5)
    spec = resolve_spec("subpop:subpop:subpop:subpop", dataset="digits")
    with pytest.raises(Seq2FinalError, match="subpop step 4 .*valid: at most 3"):
        build_sequence(spec, source)


def test_subpop_on_a_source_without_subclasses_is_refused(source):
    from dataclasses import replace

    spec = resolve_spec("subpop", dataset="digits")
    with pytest.raises(Seq2FinalError, match="no sub-populations.*valid: digits, cifar100"):
        build_sequence(spec, replace(source, name="npz"))


def test_sizes_larger_than_a_class_pool_are_refused_before_sampling(source):
    spec = resolve_spec("source700:rotation300", dataset="digits", test_size=50, oracle_size=None)
    with pytest.raises(
        Seq2FinalError, match=r"step 0 .*needs 70 train\+valid images of class 0 .*has 60"
    ):
        build_sequence(spec, source)
    spec = resolve_spec("source100:rotation100", dataset="digits", test_size=500, oracle_size=None)
    with pytest.raises(Seq2FinalError, match="needs 50 test images"):
        build_sequence(spec, source)


def test_digits_presets_build_on_the_embedded_source():
    from seq2final.data.sources import load_source

    digits = load_source("digits", None, "data/01_raw")
    for name in [p for p in PRESETS if p.startswith("digits_")]:
        sequence = build_sequence(resolve_spec(name), digits)
        sizes = [sum(s.sizes[k] for k in ("train", "valid")) for s in sequence.manifest.steps]
        assert sizes == [500, 300, 500, 300]
        assert sequence.manifest.steps[-1].sizes["test"] == 200


def test_portraits_split_per_decade_80_20_and_final_40_10_50():
    from seq2final.data.sources import SourceData

    counts = [10, 20, 30]  # images in three decades
    time = np.repeat([0, 3, 7], counts)
    source = SourceData(
        name="portraits",
        x_train=np.zeros((len(time), 3, 32, 32), np.uint8),
        y_train=np.arange(len(time)) % 2,
        x_test=np.zeros((0, 3, 32, 32), np.uint8),
        y_test=np.zeros(0, np.int64),
        class_names=("male", "female"),
        time_train=time,
        time_names=("1930s", "1940s", "1950s", "1960s", "1970s", "1980s", "1990s", "2000s"),
    )
    sequence = build_sequence(resolve_spec("portraits"), source)
    assert sequence.step_names == ["1930s", "1960s", "2000s"]
    sizes = [s.sizes for s in sequence.manifest.steps]
    assert sizes == [
        {"train": 8, "valid": 2},
        {"train": 16, "valid": 4},
        {"train": 12, "valid": 3, "test": 15},
    ]
    final = sequence.step(-1)
    used = np.concatenate([final.arrays[f"idx_{s}"] for s in ("train", "valid", "test")])
    assert sorted(used.tolist()) == list(range(30, 60))
    with pytest.raises(Seq2FinalError, match="does not fit"):
        resolve_spec("portraits", dataset="cifar10")


def test_yearbook_steps_are_the_years_each_with_a_tenth_held_out_under_temporal_protocols():
    from seq2final.data.sources import SourceData
    from seq2final.data.sources.portraits import GRANULARITIES

    years = GRANULARITIES["year"].names
    time = np.repeat(np.arange(len(years)), 20)
    source = SourceData(
        name="portraits_1y",
        x_train=np.arange(len(time) * 3 * 4, dtype=np.uint8).reshape(len(time), 3, 2, 2),
        y_train=np.arange(len(time)) % 2,
        x_test=np.zeros((0, 3, 2, 2), np.uint8),
        y_test=np.zeros(0, np.int64),
        class_names=("male", "female"),
        time_train=time,
        time_names=years,
    )
    spec = resolve_spec("yearbook", step_tests=True, train_fraction=0.9)
    assert spec.dataset == "portraits_1y" and spec.num_targets == 83  # known before loading
    sequence = build_sequence(spec, source)
    assert sequence.step_names == list(years)
    for t in range(len(years)):
        step = sequence.step(t)
        assert {s: len(step.arrays[f"idx_{s}"]) for s in ("train", "valid", "test")} == {
            "train": 16, "valid": 2, "test": 2,
        }  # fmt: skip
        used = np.concatenate([step.arrays[f"idx_{s}"] for s in ("train", "valid", "test")])
        assert sorted(used.tolist()) == list(range(20 * t, 20 * t + 20))  # its own year, once
    # the paper's decades keep their key: no steps are written into their spec
    assert resolve_spec("portraits").steps == ()
    # a source claiming every period but missing one is stopped before anything is keyed
    gap = SourceData(**{**vars(source), "time_train": np.where(time == 5, 6, time)})
    with pytest.raises(Seq2FinalError, match="images in 83 of its 84 time periods"):
        build_sequence(spec, gap)


def test_a_source_with_subclasses_is_drawn_by_subclass_without_subpop_steps(source_factory):
    """CIFAR-100 without subpop keeps the source proportions: sub-classes 0 and 1 only."""
    source = source_factory(per_class=100, per_class_test=40, classes=4, subclasses=5)
    spec = resolve_spec(
        "source40:rotation40:label_flip40", dataset="digits", test_size=20, oracle_size=80
    )
    sequence = build_sequence(spec, source)
    for step in [*sequence.steps(), sequence.step("oracle")]:
        assert sorted(set(step.arrays["sub_train"].tolist())) == [0, 1]


def test_steps_too_small_for_a_split_are_refused(source_factory):
    source = source_factory(per_class=100, per_class_test=40, classes=2, subclasses=5)
    spec = resolve_spec("source2:subpop40", dataset="digits", test_size=20, oracle_size=None)
    with pytest.raises(Seq2FinalError, match="step 0 .*leaves its train split empty"):
        build_sequence(spec, source)


@pytest.mark.parametrize("block", list(SHIFTS))
def test_every_registered_block_shifts_a_sequence(block, source_factory):
    """Each block changes the state and builds; a newly registered block is covered here too."""
    source = source_factory(per_class=400, per_class_test=160, classes=4, subclasses=5)
    spec = resolve_spec(f"source40:{block}40", dataset="digits", test_size=20, oracle_size=60)
    states = shift_states(spec, source)
    assert states[1] != states[0]
    sequence = build_sequence(spec, source)
    assert sequence.manifest.steps[1].name == block
    assert sequence.content_hash == build_sequence(spec, source).content_hash


def test_the_protocol_options_leave_a_sequence_built_without_them_unchanged(source):
    plain = resolve_spec("source100:label_flip100:rotation100", dataset="digits", test_size=50)
    assert set(plain.to_dict()) == {
        "name", "dataset", "data_path", "steps", "test_size", "oracle_size", "seed", "natural"
    }  # fmt: skip
    tested = resolve_spec(
        "source100:label_flip100:rotation100", dataset="digits", test_size=50, step_tests=True
    )
    assert tested.key != plain.key and tested.to_dict()["step_tests"] is True
    a, b = build_sequence(plain, source), build_sequence(tested, source)
    for index in range(3):  # the same train and valid images; the final step's test too
        for name, array in a.step(index).arrays.items():
            assert np.array_equal(array, b.step(index).arrays[name]), (index, name)


def test_step_tests_draw_every_step_a_shifted_test_split_from_the_test_pool(source):
    spec = resolve_spec(
        "source100:label_flip100:rotation100", dataset="digits", test_size=50, step_tests=True
    )
    sequence = build_sequence(spec, source)
    assert [s.sizes["test"] for s in sequence.manifest.steps] == [50, 50, 50]
    step0, step1 = sequence.step(0), sequence.step(1)
    for step in (step0, step1):
        index = step.arrays["idx_test"]
        assert len(np.unique(index)) == 50
        assert np.array_equal(np.bincount(source.y_test[index]), [5] * 10)  # per class, as sampled
    assert np.array_equal(step0.arrays["x_test"], source.x_test[step0.arrays["idx_test"]])
    assert np.array_equal(step0.arrays["y_test"], source.y_test[step0.arrays["idx_test"]])
    # step 1 flips labels: its test split carries the flip, as its training split does
    assert np.array_equal(step1.arrays["y_test"], 9 - source.y_test[step1.arrays["idx_test"]])
    assert not np.array_equal(step0.arrays["idx_test"], step1.arrays["idx_test"])
    again = build_sequence(spec, source)
    assert again.content_hash == sequence.content_hash


def test_train_fraction_splits_each_step_and_bad_shares_are_one_line(source):
    spec = resolve_spec("source100:rotation100", dataset="digits", test_size=50,
                        train_fraction=0.9)  # fmt: skip
    sequence = build_sequence(spec, source)
    assert sequence.manifest.steps[0].sizes == {"train": 90, "valid": 10}
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(Seq2FinalError, match=f"train_fraction {bad}: valid: a share"):
            resolve_spec("source100:rotation100", dataset="digits", train_fraction=bad)


def _tested_sequence(source):
    spec = resolve_spec("source100:label_flip100:rotation100:corruption100", dataset="digits",
                        test_size=50, step_tests=True)  # fmt: skip
    return build_sequence(spec, source)


def test_a_view_is_a_sequence_of_the_chosen_steps_whose_last_is_its_final_step(source):
    sequence = _tested_sequence(source)
    view = sequence.view("0-2", [0, 1, 2])
    assert view.num_steps == 3 and view.key == f"{sequence.key}~0-2"
    for position in range(3):
        for name, array in sequence.step(position).arrays.items():
            assert np.array_equal(view.step(position).arrays[name], array)
    assert view.step(-1).name == sequence.step(2).name
    assert view.content_hash != sequence.content_hash
    assert view.content_hash == sequence.view("0-2", [0, 1, 2]).content_hash
    with pytest.raises(Seq2FinalError, match=r"names steps \[0, 7\]; valid: 0..3"):
        sequence.view("bad", [0, 7])


def test_a_mixed_view_draws_training_images_from_every_step_and_keeps_the_test_splits(source):
    sequence = _tested_sequence(source)
    mixed = sequence.view("mixed-0-1", [0, 1], mixed_seed=5)
    every = {
        (x.tobytes(), int(y))
        for step in sequence.steps()
        for x, y in zip(*step.split("train"), strict=True)
    }
    drawn = [
        (x.tobytes(), int(y))
        for t in range(2)
        for x, y in zip(*mixed.step(t).split("train"), strict=True)
    ]
    assert set(drawn) <= every and len(set(drawn)) == len(drawn)  # no image twice in the view
    # drawn from later steps too: some images carry the rotation or corruption of steps 2 and 3
    later = {
        (x.tobytes(), int(y))
        for t in (2, 3)
        for x, y in zip(*sequence.step(t).split("train"), strict=True)
    }
    assert set(drawn) & later
    for t in range(2):
        assert len(mixed.step(t).split("train")[1]) == len(sequence.step(t).split("train")[1])
        assert len(mixed.step(t).split("valid")[1]) == len(sequence.step(t).split("valid")[1])
        assert np.array_equal(mixed.step(t).split("test")[0], sequence.step(t).split("test")[0])
    again = sequence.view("mixed-0-1", [0, 1], mixed_seed=5)
    assert again.content_hash == mixed.content_hash
    assert sequence.view("mixed-0-1", [0, 1], mixed_seed=6).content_hash != mixed.content_hash


DIALLED = [name for name, block in SHIFTS.items() if block.dial is not None]


def _arrays(sequence):
    return {(i, k): v for i, step in enumerate(sequence.steps()) for k, v in step.arrays.items()}


@pytest.mark.parametrize("block", DIALLED)
def test_a_block_at_its_default_intensity_draws_the_bare_blocks_bytes(block, source_factory):
    """``rotation@30`` is ``rotation``: the dial's default is the paper's step, so a spec without
    ``@`` keeps its data, and one that writes the default out draws the same bytes."""
    source = source_factory(per_class=400, per_class_test=160, classes=4, subclasses=5)
    default = SHIFTS[block].dial.default
    sizes = {"dataset": "digits", "test_size": 20, "oracle_size": 60}
    bare = resolve_spec(f"source40:{block}40:{block}40", **sizes)
    dialled = resolve_spec(f"source40:{block}@{default:g}/40:{block}@{default:g}/40", **sizes)
    assert shift_states(bare, source) == shift_states(dialled, source)
    a, b = _arrays(build_sequence(bare, source)), _arrays(build_sequence(dialled, source))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert bare.key != dialled.key  # the spec as written names the stored sequence


@pytest.mark.parametrize("block", DIALLED)
def test_intensity_zero_is_the_identity(block, source_factory):
    source = source_factory(per_class=400, per_class_test=160, classes=4, subclasses=5)
    spec = resolve_spec(
        f"source40:{block}@0/40:{block}@0/40", dataset="digits", test_size=20, oracle_size=60
    )
    states = shift_states(spec, source)

    def drawn(state):  # what the sampler and the effects read (a sampling effect's step count
        return {  # only limits how many steps may follow)
            name: value.weights if isinstance(value, Weights) else value
            for name, value in state.values
        }

    assert drawn(states[-1]) == drawn(states[1]) == drawn(states[0])
    sequence = build_sequence(spec, source)
    for step in sequence.steps():
        original = source.y_train[step.arrays["idx_train"]]
        assert np.array_equal(step.arrays["y_train"], original)
        assert np.array_equal(step.arrays["x_train"], source.x_train[step.arrays["idx_train"]])


def test_intensities_scale_each_block(source_factory):
    source = source_factory(per_class=100, per_class_test=40, classes=4, subclasses=5)
    spec = resolve_spec(
        "source40:rotation@-5+recolor@7+corruption@2+label_shift@0.1/40:rotation_cond@15/40",
        dataset="digits",
    )
    final = shift_states(spec, source)[-1]
    assert final["rotation"] == (10.0, -20.0, 10.0, -20.0)
    assert final["tint"] == ((7, 0, 0),) * 4
    assert final["noise"] == 2
    assert final["class_weights"].weights == pytest.approx((0.225, 0.275, 0.225, 0.275))


def test_a_partial_label_flip_moves_that_share_of_every_class(source_factory):
    source = source_factory(per_class=200, per_class_test=40, classes=4)
    spec = resolve_spec(
        "source40:label_flip@0.25/80", dataset="digits", test_size=40, oracle_size=120
    )
    final = build_sequence(spec, source).step(-1)
    for split in ("train", "test"):
        original = source.y_train if split == "train" else source.y_test
        before = original[final.arrays[f"idx_{split}"]]
        after = final.arrays[f"y_{split}"]
        for c in range(4):
            members = before == c
            flipped = after[members] != c
            assert flipped.sum() == int(np.floor(0.25 * members.sum() + 0.5))
            assert set(after[members][flipped]) == {3 - c}


def test_partial_subpop_moves_part_of_the_way_to_the_next_window():
    state = ShiftState.source(2, with_subpopulations=True)
    half = SHIFTS["subpop"](state, 0.5)
    assert half["subpopulations"].weights == pytest.approx((5 / 12, 5 / 12, 1 / 6, 0, 0))
    half = SHIFTS["subpop"](half, 0.5)  # towards {1, 2, 3}
    assert half["subpopulations"].weights == pytest.approx((5 / 24, 9 / 24, 6 / 24, 4 / 24, 0))


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "label_flip@1.5",
            r"intensity 1.5 of shift block 'label_flip' .*valid: values from 0 to 1",
        ),
        ("corruption@1.5", r"'corruption' .*valid: whole values from 0 to 20"),
        ("rotation@200", r"valid: values from -180 to 180"),
        ("rotation@15300", r"follows '/': 'rotation@15/300'"),
        ("source:rotation@15//300", r"malformed sequence .*'source600:rotation@15/300"),
        ("source:label_flip@0.2300", r"not a number written the shortest way"),
        ("source:rotation@15.0", r"not a number written the shortest way"),
        ("source:rotation@-0", r"not a number written the shortest way"),
        ("rotation@", r"the intensity after .@. is not a number"),
        ("source:rotation@x", r"malformed sequence"),
    ],
)
def test_bad_intensities_are_one_line_before_any_work(text, needle):
    with pytest.raises(Seq2FinalError, match=needle) as caught:
        resolve_spec(text, dataset="digits")
    assert "\n" not in str(caught.value)
    if "@200" in text:  # out of range, but no size hides in it: no hint about sizes
        assert "follows '/'" not in str(caught.value)


def test_any_step_may_write_its_size_after_a_slash():
    steps = resolve_spec("source600:rotation/300:rotation@15+corruption/200", dataset="digits")
    assert [(s.blocks, s.size) for s in steps.steps[1:]] == [
        (("rotation",), 300),
        (("rotation@15", "corruption"), 200),
    ]


def test_an_intensity_on_a_block_without_a_dial_is_refused():
    """The test session's plugin block ``invert`` (tests/lab_extras.py) registers no dial."""
    with pytest.raises(Seq2FinalError, match="'invert' has no intensity .*valid: 'invert' alone"):
        resolve_spec("source:invert@2", dataset="digits")
    assert resolve_spec("source:invert", dataset="digits").steps[1].names == ("invert",)
