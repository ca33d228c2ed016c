"""A user's own images by time (``folder``, ``manifest``): both layouts read as one table, periods
ordered by value, the scarce final period, the decode cache, and every bad input in one line with
nothing written."""

import logging

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from seq2final.core.errors import Seq2FinalError
from seq2final.data.sampler import build_sequence
from seq2final.data.sources import load_source
from seq2final.data.sources import temporal as temporal_module
from seq2final.data.spec import resolve_spec
from tests.temporal_images import CLASSES, manifest_of, write_images


def test_a_folder_reads_periods_by_value_one_vocabulary_and_converts_with_one_warning(
    tmp_path, caplog
):
    write_images(tmp_path / "photos")
    with caplog.at_level(logging.WARNING):
        data = load_source("folder", tmp_path / "photos", tmp_path / "raw")
    assert data.time_names == ("95", "1003", "2000")
    assert data.class_names == CLASSES and data.x_train.shape == (24, 3, 32, 32)
    assert np.bincount(data.time_train).tolist() == [8, 8, 8]
    warnings = [r.getMessage() for r in caplog.records if "converted" in r.getMessage()]
    assert len(warnings) == 1
    assert "24 resized to 32×32 (from 24×24, 40×30)" in warnings[0]
    assert "12 from mode L to RGB" in warnings[0]


@pytest.mark.parametrize("form", ["csv", "parquet", "imagefolder"])
def test_a_manifest_in_each_form_is_the_same_table_as_the_folder(tmp_path, form):
    paths = sorted(write_images(tmp_path / "photos", suffix=".jpg"), key=lambda r: str(r[0]))
    folder = load_source("folder", tmp_path / "photos", tmp_path / "raw")
    if form == "imagefolder":  # Hugging Face's metadata.csv, file_name, given as its folder
        target = manifest_of(tmp_path / "photos", paths, "metadata.csv")
        table = pd.read_csv(target).rename(columns={"path": "file_name"})
        table.to_csv(target, index=False)
        target = target.parent
    else:
        target = manifest_of(tmp_path / "photos", paths, f"manifest.{form}")
    manifest = load_source("manifest", target, tmp_path / "raw")
    assert manifest.fingerprint == folder.fingerprint
    assert manifest.time_names == folder.time_names


def test_dates_bin_by_year_month_quantiles_or_edges(tmp_path):
    write_images(tmp_path / "photos", periods=("2001-01-05", "2001-02-20", "2002-07-01"),
                 per_class=1)  # fmt: skip
    raw = tmp_path / "raw"

    def names(**options):
        return load_source("folder", tmp_path / "photos", raw, options).time_names

    assert names() == ("2001-01-05", "2001-02-20", "2002-07-01")
    assert names(periods="year") == ("2001", "2002")
    assert names(periods="month") == ("2001-01", "2001-02", "2002-07")
    assert names(periods="edges", edges=["2001-01-01", "2001-02-01", "2003-01-01"]) == (
        "2001-01-01–2001-02-01", "2001-02-01–2003-01-01")  # fmt: skip
    assert len(names(periods="quantiles", bins=3)) == 3
    assert names(final_period="2001-02-20") == ("2001-01-05", "2001-02-20")
    with pytest.raises(Seq2FinalError, match=r"has 1 period\(s\) \(2001\)"):
        names(periods="year", final_period=2001)  # a year typed as a number is found


def test_the_final_period_gives_adaptation_as_many_labelled_images_as_asked(tmp_path):
    write_images(tmp_path / "photos", per_class=10)
    spec = resolve_spec("natural", "folder", str(tmp_path / "photos"),
                        data_options={"final_labelled": 5})  # fmt: skip
    assert spec.data_options == {"final_labelled": 5}
    data = load_source("folder", spec.data_path, tmp_path / "raw", spec.data_options)
    final = build_sequence(spec, data).step(-1)
    sizes = {split: len(final.arrays[f"y_{split}"]) for split in ("train", "valid", "test")}
    assert sizes == {"train": 4, "valid": 1, "test": 15}
    default = resolve_spec("natural", "folder", str(tmp_path / "photos"))
    assert default.data_options is None and default.key != spec.key


def test_a_split_column_sends_its_images_where_it_says(tmp_path):
    paths = write_images(tmp_path / "photos", per_class=5)
    split = ["test" if i % 5 == 0 else "" for i in range(len(paths))]
    target = manifest_of(tmp_path / "photos", paths, split=split)
    spec = resolve_spec("natural", "manifest", str(target))
    data = load_source("manifest", target, tmp_path / "raw")
    sequence = build_sequence(spec, data)
    for position in range(3):
        rows = np.flatnonzero(data.time_train == position)
        told = {int(r) for r in rows if split[r] == "test"}
        assert told <= set(sequence.step(position).arrays["idx_test"].tolist())
        assert told.isdisjoint(sequence.step(position).arrays["idx_train"].tolist())


@pytest.mark.parametrize("protocol_tests", [False, True])
def test_a_group_column_keeps_each_group_within_one_split_of_its_period(tmp_path, protocol_tests):
    """A patient's (a camera's) images never straddle train, valid and test."""
    paths = write_images(tmp_path / "photos", per_class=12)
    groups = [f"{period}-{i % 5}" if i % 7 else "" for i, (_, _, period) in enumerate(paths)]
    target = manifest_of(tmp_path / "photos", paths, group=groups)
    spec = resolve_spec("natural", "manifest", str(target), step_tests=protocol_tests)
    data = load_source("manifest", target, tmp_path / "raw")
    sequence = build_sequence(spec, data)
    for position in range(3):
        step = sequence.step(position)
        owner = {}
        for split in step.splits:
            for row in step.arrays[f"idx_{split}"].tolist():
                if groups[row]:  # an ungrouped image is a group of its own
                    assert owner.setdefault(groups[row], split) == split, (position, groups[row])
        assert sum(len(step.arrays[f"idx_{split}"]) > 0 for split in step.splits) >= 2


def test_groups_never_take_the_final_period_over_the_labelled_images_asked(tmp_path):
    """Groups of 3: a cut at 7 labelled images moves back to 6, never on to 9, and the train
    cut leaves a group to validate; one group alone cannot be split, and says so."""
    paths = write_images(tmp_path / "photos", per_class=9)
    groups = [f"{period}-{i // 3}" for i, (_, _, period) in enumerate(paths)]
    target = manifest_of(tmp_path / "photos", paths, group=groups)
    data = load_source("manifest", target, tmp_path / "raw", {"final_labelled": 7})
    spec = resolve_spec("natural", "manifest", str(target), data_options={"final_labelled": 7})
    final = build_sequence(spec, data).step(-1)
    train, valid = final.arrays["idx_train"].tolist(), final.arrays["idx_valid"].tolist()
    assert (len(train), len(valid), len(final.arrays["idx_test"])) == (3, 3, 12)
    assert {groups[r] for r in train}.isdisjoint({groups[r] for r in valid})
    for labelled, message in ((5, r"period 2000 has no valid images once split \(18 to split, "
                                  r"in whole groups\)"),
                              (2, r"the final period 2000's first group \(seeded order\) holds "
                                  r"3 images, more than data_options.final_labelled 2")):  # fmt: skip
        data = load_source("manifest", target, tmp_path / "raw", {"final_labelled": labelled})
        spec = resolve_spec("natural", "manifest", str(target),
                            data_options={"final_labelled": labelled})  # fmt: skip
        with pytest.raises(Seq2FinalError, match=message):
            build_sequence(spec, data)


def test_a_second_read_takes_the_decoded_cache_and_a_changed_image_is_decoded_again(
    tmp_path, monkeypatch
):
    paths = write_images(tmp_path / "photos")
    first = load_source("folder", tmp_path / "photos", tmp_path / "raw")
    real = temporal_module.decode_images
    decoded = []
    monkeypatch.setattr(temporal_module, "decode_images",
                        lambda *args: decoded.append(1) or real(*args))  # fmt: skip
    again = load_source("folder", tmp_path / "photos", tmp_path / "raw")
    assert decoded == [] and again.fingerprint == first.fingerprint
    Image.fromarray(np.full((32, 32, 3), 255, np.uint8)).save(paths[0][0])
    changed = load_source("folder", tmp_path / "photos", tmp_path / "raw")
    assert decoded == [1] and changed.fingerprint != first.fingerprint


def _refused(tmp_path, dataset, data_path, match, **options):
    raw = tmp_path / "raw"
    with pytest.raises(Seq2FinalError, match=match) as refused:
        load_source(dataset, data_path, raw, options or None)
    assert "\n" not in str(refused.value)  # one line
    assert not (raw / temporal_module.CACHE_FOLDER).exists()  # nothing written
    return str(refused.value)


def test_bad_folders_are_refused_in_one_line_before_anything_is_written(tmp_path):
    root = tmp_path / "photos"
    write_images(root, periods=("95", "1003"))
    (root / "95" / "cat" / "deep").mkdir()
    Image.fromarray(np.zeros((9, 9), np.uint8)).save(root / "95" / "cat" / "deep" / "x.png")
    _refused(tmp_path, "folder", root, r"images at mixed depths \(95/cat/deep/x.png\)")
    (root / "95" / "cat" / "deep" / "x.png").unlink()
    (root / "95" / "cat" / "deep").rmdir()
    (root / "1003" / "bird").mkdir()
    _refused(tmp_path, "folder", root, r"empty class folder\(s\) 1003/bird")
    (root / "1003" / "bird").rmdir()
    (root / "last week" / "cat").mkdir(parents=True)
    Image.fromarray(np.zeros((9, 9), np.uint8)).save(root / "last week" / "cat" / "y.png")
    _refused(tmp_path, "folder", root, r"period folder name\(s\) last week do not parse")
    one = tmp_path / "one"
    write_images(one, periods=("2001",))
    _refused(tmp_path, "folder", one, r"has 1 period\(s\) \(2001\); valid: at least 2")
    (root / "1003" / "cat" / "0.png").write_bytes(b"not an image")
    import shutil

    shutil.rmtree(root / "last week")
    _refused(tmp_path, "folder", root, r"unreadable image\(s\) .*1003/cat/0.png")


def test_bad_manifests_are_refused_in_one_line_naming_rows_before_anything_is_written(tmp_path):
    root = tmp_path / "photos"
    paths = write_images(root, per_class=2)
    table = pd.read_csv(manifest_of(root, paths))

    def with_table(changed, name="bad.csv"):
        changed.to_csv(root / name, index=False)
        return root / name

    _refused(tmp_path, "manifest", with_table(table.drop(columns=["time"])),
             r"missing column\(s\) time; found: path, label")  # fmt: skip
    moved = table.copy()
    moved.loc[1, "path"] = "../elsewhere.png"
    _refused(tmp_path, "manifest", with_table(moved), r"outside its folder \(row 3: \.\./")
    twice = pd.concat([table, table.iloc[[0]]])
    _refused(tmp_path, "manifest", with_table(twice), r"duplicate path\(s\) \(95/cat/0.png\)")
    spelled = twice.copy()
    spelled.iloc[-1, spelled.columns.get_loc("path")] = "./95/../95/cat/0.png"  # the same file
    _refused(tmp_path, "manifest", with_table(spelled), r"duplicate path\(s\) \(95/cat/0.png\)")
    relabelled = twice.copy()
    relabelled.iloc[-1, relabelled.columns.get_loc("label")] = "dog"
    _refused(tmp_path, "manifest", with_table(relabelled), r"path\(s\) with two labels")
    for value, match in (("soon", "unparseable"), ("", "missing or unparseable")):
        timed = table.copy().astype({"time": str})
        timed.loc[2, "time"] = value
        _refused(tmp_path, "manifest", with_table(timed), rf"{match} time\(s\) \(row 4")
    mixed = table.copy().astype({"time": str})
    mixed.loc[0, "time"] = "2001-05-01"
    _refused(tmp_path, "manifest", with_table(mixed), r"mixed-type times \(row 3: '95' is a "
             r"number, row 2: '2001-05-01' a date\)")  # fmt: skip
    split = table.assign(split=["train"] * len(table))
    split.loc[5, "split"] = "holdout"
    _refused(tmp_path, "manifest", with_table(split), r"bad split value\(s\) \(row 7: 'holdout'\)")
    gone = table.copy()
    gone.loc[0, "path"] = "95/cat/missing.png"
    _refused(
        tmp_path, "manifest", with_table(gone), r"missing image\(s\) row 2: 95/cat/missing.png"
    )
    _refused(tmp_path, "manifest", root / "none.csv", r"manifest '.*none.csv' does not exist")
    _refused(tmp_path, "manifest", with_table(table), r"final_labelled 20 leaves none to test on; "
             r"valid: at most 3", final_labelled=20)  # fmt: skip
    _refused(tmp_path, "manifest", with_table(table), r"final_period '1999' is no period of "
             r"manifest .*; valid: 95, 1003, 2000", final_period="1999")  # fmt: skip
    _refused(tmp_path, "manifest", with_table(table), r"data_options.bogus: Extra inputs are not "
             r"permitted", bogus=1)  # fmt: skip


def test_missing_images_are_skipped_only_when_asked_and_counted_in_the_log(tmp_path, caplog):
    root = tmp_path / "photos"
    paths = write_images(root)
    table = pd.read_csv(manifest_of(root, paths))
    table.loc[0, "path"] = "95/cat/missing.png"
    table.to_csv(root / "gone.csv", index=False)
    with caplog.at_level(logging.WARNING):
        data = load_source("manifest", root / "gone.csv", tmp_path / "raw",
                           {"on_missing": "skip"})  # fmt: skip
    assert len(data.y_train) == len(paths) - 1
    assert any("1 missing image(s) skipped" in r.getMessage() for r in caplog.records)
    table = table.astype({"time": str})
    table.loc[3, "time"] = "soon"  # row 5 of the file, the fourth of the images kept
    table.to_csv(root / "gone.csv", index=False)
    with pytest.raises(Seq2FinalError, match=r"unparseable time\(s\) \(row 5: 'soon'\)"):
        load_source("manifest", root / "gone.csv", tmp_path / "raw", {"on_missing": "skip"})


def test_linked_folders_and_images_are_read_where_the_links_lie(tmp_path):
    """A period folder linked in from elsewhere is walked (once, even with a link back up), and
    a manifest's image that is a link inside its folder is no path outside it."""
    write_images(tmp_path / "store", periods=("2003",))
    root = tmp_path / "photos"
    write_images(root, periods=("2001", "2002"))
    (root / "2003").symlink_to(tmp_path / "store" / "2003", target_is_directory=True)
    (root / "2001" / "cat" / "up").symlink_to(root, target_is_directory=True)  # never walked
    data = load_source("folder", root, tmp_path / "raw")
    assert data.time_names == ("2001", "2002", "2003") and len(data.y_train) == 24
    linked = tmp_path / "linked"
    paths = write_images(linked, periods=("2001", "2002"))
    (linked / "2002" / "cat" / "0.png").unlink()
    (linked / "2002" / "cat" / "0.png").symlink_to(tmp_path / "store" / "2003" / "cat" / "0.png")
    manifest = load_source("manifest", manifest_of(linked, paths), tmp_path / "raw")
    assert len(manifest.y_train) == 16


def test_options_are_checked_when_the_spec_is_made_and_only_for_datasets_that_take_them(
    tmp_path,
):
    with pytest.raises(Seq2FinalError, match=r"^data_options.periods: Input should be"):
        resolve_spec("natural", "folder", str(tmp_path), data_options={"periods": "weekly"})
    with pytest.raises(Seq2FinalError, match=r"^data_options: Value error, periods quantiles "
                                             r"needs bins"):  # fmt: skip
        resolve_spec("natural", "folder", str(tmp_path), data_options={"periods": "quantiles"})
    write_images(tmp_path / "photos", per_class=1)
    with pytest.raises(Seq2FinalError, match=r"edges \['a', 'b', 'c'\]: valid: numbers"):
        load_source("folder", tmp_path / "photos", tmp_path / "raw",
                    {"periods": "edges", "edges": ["a", "b", "c"]})  # fmt: skip
    with pytest.raises(Seq2FinalError, match=r"^data_options.final_labelled under a temporal "
                                             r"protocol: valid only under protocol final"):  # fmt: skip
        resolve_spec("natural", "folder", str(tmp_path / "photos"), step_tests=True,
                     data_options={"final_labelled": 4})  # fmt: skip
    with pytest.raises(Seq2FinalError, match="dataset 'digits' takes no data_options"):
        resolve_spec("source100:rotation60", "digits", data_options={"periods": "year"})


def test_blank_cells_are_refused_or_empty_as_their_column_means(tmp_path):
    """A Parquet null or an empty field: no path or label is one line; no split is the seeded
    hold-out; an infinite time names no period."""
    root = tmp_path / "photos"
    paths = write_images(root)
    table = pd.read_csv(manifest_of(root, paths)).astype({"time": str})

    def parquet(changed):
        changed.to_parquet(root / "blank.parquet")
        return root / "blank.parquet"

    for column in ("path", "label"):
        blank = table.copy().astype({column: object})
        blank.loc[1, column] = None
        _refused(tmp_path, "manifest", parquet(blank),
                 rf"^manifest '.*blank.parquet': missing {column}\(s\) \(row 3\); valid: a "
                 rf"{column} for every image$")  # fmt: skip
    endless = table.copy()
    endless.loc[0, "time"] = "inf"
    _refused(tmp_path, "manifest", parquet(endless), r"unparseable time\(s\) \(row 2: 'inf'\)")
    split = table.assign(split=[None if i % 2 else "train" for i in range(len(table))])
    data = load_source("manifest", parquet(split), tmp_path / "raw")
    assert data.split_train.tolist() == [0 if i % 2 else 1 for i in range(len(table))]


def test_two_periods_may_link_one_folder_and_each_reads_it(tmp_path):
    write_images(tmp_path / "store", periods=("x",))
    root = tmp_path / "photos"
    write_images(root, periods=("2001",))
    for period in ("2002", "2003"):
        (root / period).symlink_to(tmp_path / "store" / "x", target_is_directory=True)
    data = load_source("folder", root, tmp_path / "raw")
    assert data.time_names == ("2001", "2002", "2003") and len(data.y_train) == 24


def test_a_split_column_cannot_take_the_final_period_past_its_labels_or_its_test(tmp_path):
    paths = write_images(tmp_path / "photos", per_class=5)
    final = [i for i, (_, _, period) in enumerate(paths) if period == "2000"]
    for told, options, message in (
        (final[:6], {"final_labelled": 5}, r"its split column sends 6 images of the final "
                                           r"period 2000 to train or valid, more than "
                                           r"data_options.final_labelled 5; valid: at most"),
        (final, None, r"the final period 2000 has no image left to test on"),
    ):  # fmt: skip
        split = ["train" if i in told else "" for i in range(len(paths))]
        target = manifest_of(tmp_path / "photos", paths, f"split{len(told)}.csv", split=split)
        spec = resolve_spec("natural", "manifest", str(target), data_options=options)
        data = load_source("manifest", target, tmp_path / "raw", options)
        with pytest.raises(Seq2FinalError, match=message):
            build_sequence(spec, data)


def test_two_folders_naming_one_time_are_refused_not_merged(tmp_path):
    for periods, named in ((("01", "1", "2"), "01 and 1"),
                           (("2004-06", "2004-06-01", "2005"), "2004-06 and 2004-06-01")):  # fmt: skip
        root = tmp_path / periods[0]
        write_images(root, periods=periods, per_class=1)
        _refused(tmp_path, "folder", root, rf"period folders {named} name the same time; valid: "
                                           r"one folder per period$")  # fmt: skip
