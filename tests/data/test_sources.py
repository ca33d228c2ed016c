import gzip
import pickle

import numpy as np
import pytest
from PIL import Image

from seq2final.core.errors import Seq2FinalError
from seq2final.data.sources import SOURCES, check_arrays, load_source, with_subpopulations


def test_digits_is_32x32_rgb_with_disjoint_pools():
    digits = load_source("digits", None, "unused")
    assert digits.x_train.shape[1:] == (3, 32, 32) and digits.x_train.dtype == np.uint8
    assert len(digits.x_train) + len(digits.x_test) == 1797
    assert digits.num_classes == 10
    assert np.array_equal(digits.x_train[:, 0], digits.x_train[:, 2])  # grey copied to 3 channels
    assert digits.x_train.max() == 255
    parity = with_subpopulations(digits)
    assert parity.class_names == ("even", "odd")
    assert np.array_equal(parity.y_train * 1 + parity.sub_train * 2, digits.y_train)


def _write_npz(path, **arrays):
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    "layout",
    [
        lambda x: x,  # NCHW
        lambda x: x.transpose(0, 2, 3, 1),  # NHWC
        lambda x: x[:, 0],  # grey N×H×W
        lambda x: x[:, :1].transpose(0, 2, 3, 1),  # grey NHWC
    ],
)
def test_npz_accepts_common_layouts(tmp_path, layout):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (6, 3, 32, 32), dtype=np.uint8)
    y = np.array([0, 1, 2, 0, 1, 2])
    path = _write_npz(tmp_path / "d.npz", x_train=layout(x), y_train=y, x_test=layout(x), y_test=y)
    source = load_source("npz", path, tmp_path)
    assert source.x_train.shape == (6, 3, 32, 32)
    assert source.num_classes == 3


@pytest.mark.parametrize(
    ("arrays", "needle"),
    [
        ({"x_train": np.zeros((4, 32, 32, 3), np.float32)}, "must be uint8"),
        ({"x_train": np.zeros((4, 5, 32, 32), np.uint8)}, "got shape (4, 5, 32, 32)"),
        ({"y_train": np.zeros(3, np.int64)}, "vector of length 4"),
        ({"y_train": np.array([0, 1, -1, 0])}, "non-negative integers"),
    ],
)
def test_npz_refuses_bad_arrays(tmp_path, arrays, needle):
    good = {
        "x_train": np.zeros((4, 32, 32, 3), np.uint8),
        "y_train": np.array([0, 1, 0, 1]),
        "x_test": np.zeros((2, 32, 32, 3), np.uint8),
        "y_test": np.array([0, 1]),
    }
    path = _write_npz(tmp_path / "d.npz", **{**good, **arrays})
    with pytest.raises(Seq2FinalError) as error:
        load_source("npz", path, tmp_path)
    assert needle in str(error.value)


def test_npz_missing_keys_and_missing_file(tmp_path):
    path = _write_npz(tmp_path / "d.npz", x_train=np.zeros((2, 8, 8), np.uint8))
    with pytest.raises(Seq2FinalError, match="lacks y_train, x_test, y_test"):
        load_source("npz", path, tmp_path)
    with pytest.raises(Seq2FinalError, match="does not exist"):
        load_source("npz", tmp_path / "nope.npz", tmp_path)
    with pytest.raises(Seq2FinalError, match="needs data_path"):
        load_source("npz", None, tmp_path)
    (tmp_path / "corrupt.npz").write_bytes(b"not a zip")
    with pytest.raises(Seq2FinalError, match="cannot read"):
        load_source("npz", tmp_path / "corrupt.npz", tmp_path)


def test_check_arrays_keeps_pixels():
    x = np.arange(2 * 8 * 8 * 3, dtype=np.uint8).reshape(2, 8, 8, 3)
    out, _ = check_arrays("t", x, np.array([0, 1]))
    assert np.array_equal(out.transpose(0, 2, 3, 1), x)


def _cifar_batch(n, labels_key, labels, rng):
    return {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), labels_key: labels}


def test_cifar10_reads_the_python_pickles(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for k in range(1, 6):
        (folder / f"data_batch_{k}").write_bytes(
            pickle.dumps(_cifar_batch(4, "labels", [k % 10, 1, 2, 3], rng))
        )
    (folder / "test_batch").write_bytes(pickle.dumps(_cifar_batch(3, "labels", [0, 1, 2], rng)))
    (folder / "batches.meta").write_bytes(pickle.dumps({}))
    source = load_source("cifar10", None, tmp_path)
    assert source.x_train.shape == (20, 3, 32, 32) and source.x_test.shape == (3, 3, 32, 32)
    assert source.y_train[:4].tolist() == [1, 1, 2, 3]
    first = pickle.loads((folder / "data_batch_1").read_bytes())["data"][0]
    assert np.array_equal(source.x_train[0].reshape(-1), first)


def test_cifar100_maps_fine_labels_to_coarse_and_subclass_columns(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "c100" / "cifar-100-python"
    folder.mkdir(parents=True)
    fine = [55, 72, 4, 30, 95, 0]  # otter, seal, beaver, dolphin, whale (aquatic mammals), apple
    (folder / "train").write_bytes(pickle.dumps(_cifar_batch(6, "fine_labels", fine, rng)))
    (folder / "test").write_bytes(pickle.dumps(_cifar_batch(6, "fine_labels", fine, rng)))
    (folder / "meta").write_bytes(pickle.dumps({}))
    source = load_source("cifar100", tmp_path / "c100", tmp_path)
    assert source.y_train.tolist() == [0, 0, 0, 0, 0, 4]
    assert source.sub_train.tolist() == [0, 1, 2, 3, 4, 0]
    assert source.num_classes == 20 and source.subclass_names[0][2] == "beaver"


def test_cifar_offline_and_missing_says_where_to_put_files(tmp_path, monkeypatch):
    import torchvision.datasets

    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", offline)
    with pytest.raises(
        Seq2FinalError, match=r"not in .*cifar-10-batches-py and could not be downloaded"
    ):
        load_source("cifar10", None, tmp_path)
    with pytest.raises(Seq2FinalError, match="holds no cifar-10-batches-py"):
        load_source("cifar10", tmp_path, tmp_path)


def _idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def test_fashion_mnist_reads_idx_gz_folder(tmp_path):
    rng = np.random.default_rng(0)
    files = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": np.array([0, 1, 2, 3, 9], np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (2, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": np.array([4, 5], np.uint8),
    }
    for name, array in files.items():
        (tmp_path / f"{name}.gz").write_bytes(gzip.compress(_idx(array)))
    source = load_source("fashion_mnist", tmp_path, tmp_path)
    assert source.x_train.shape == (5, 3, 32, 32)
    assert np.array_equal(source.x_train[0, 1, 2:30, 2:30], files["train-images-idx3-ubyte"][0])
    assert source.x_train[:, :, :2].max() == 0
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(_idx(np.array([4], np.uint8))[:-1])
    )
    with pytest.raises(Seq2FinalError, match="truncated"):
        load_source("fashion_mnist", tmp_path, tmp_path)


def test_portraits_groups_by_decade_and_labels_male_0(tmp_path):
    for sex, years in {"M": [1935, 1951, 2005], "F": [1939, 2010, 1899]}.items():
        (tmp_path / sex).mkdir()
        for i, year in enumerate(years):
            Image.fromarray(np.full((40, 30), 10 * i + (sex == "F") * 100, np.uint8)).save(
                tmp_path / sex / f"{year}_x{i}.png"
            )
    source = load_source("portraits", tmp_path, tmp_path)
    assert source.x_train.shape == (5, 3, 32, 32)  # the 1899 photo is outside 1930-2013
    assert source.y_train.tolist() == [0, 0, 0, 1, 1]
    assert source.time_train.tolist() == [0, 2, 7, 0, 7]
    assert source.x_train[3].min() == 100  # not normalised: stays on the 0-255 scale
    with pytest.raises(Seq2FinalError, match="has no M/ folder"):
        load_source("portraits", tmp_path / "F", tmp_path)


def test_the_yearbook_granularities_read_one_folder_and_their_blocks_sum_to_the_decades(
    tmp_path, write_yearbook
):
    write_yearbook(tmp_path)
    yearly = load_source("portraits_1y", tmp_path, tmp_path)
    blocks = load_source("portraits_5y", tmp_path, tmp_path)
    decades = load_source("portraits", tmp_path, tmp_path)
    assert yearly.time_names[0] == "1930" and yearly.time_names[-1] == "2013"
    assert len(yearly.time_names) == SOURCES["portraits_1y"].periods == 84
    assert blocks.time_names[:2] == ("1930-1934", "1935-1939")
    assert blocks.time_names[-1] == "2010-2013" and SOURCES["portraits_5y"].periods == 17
    # the same images, in the same order, at three granularities
    assert np.array_equal(yearly.x_train, decades.x_train)
    years = np.asarray([int(yearly.time_names[t]) for t in yearly.time_train])
    assert np.array_equal(blocks.time_train, np.minimum((years - 1930) // 5, 16))
    # every 5-year block falls inside one decade, and a decade's blocks hold exactly its images
    block_decade = [min((int(name[:4]) - 1930) // 10, 7) for name in blocks.time_names]
    for decade in range(8):
        inside = np.isin(blocks.time_train, [b for b, d in enumerate(block_decade) if d == decade])
        assert np.array_equal(inside, decades.time_train == decade)


def test_a_yearbook_folder_missing_years_is_one_line_before_any_photo_is_read(
    tmp_path, write_yearbook
):
    write_yearbook(tmp_path, [y for y in range(1930, 2014) if y not in (1944, 1971)])
    (tmp_path / "M" / "1950_broken.png").write_bytes(b"not a png")  # would fail if read
    for name in ("portraits_1y", "portraits_5y"):
        with pytest.raises(Seq2FinalError) as error:
            load_source(name, tmp_path, tmp_path)
        message = str(error.value)
        assert "no portraits of year(s) 1944, 1971" in message and "\n" not in message
        assert f"dataset '{name}' needs photos of every year 1930-2013" in message
    with pytest.raises(Seq2FinalError, match="cannot read portrait"):
        load_source("portraits", tmp_path, tmp_path)  # the paper's decades keep what exists


def test_unknown_source_lists_valid():
    with pytest.raises(
        Seq2FinalError,
        match="unknown dataset 'mnist'; valid: digits, cifar10, cifar100, fashion_mnist, portraits, portraits_5y, portraits_1y, npz",
    ):
        load_source("mnist", None, "x")
    assert "npz" in SOURCES


@pytest.mark.parametrize("name", list(SOURCES))
def test_every_source_loads_if_bundled_else_names_the_empty_data_path(name, tmp_path, monkeypatch):
    """Offline, with an empty data_path: a bundled source loads valid pools; any other refuses in
    one line that names the folder it looked in."""
    import torchvision.datasets

    def offline(*args, **kwargs):
        raise OSError("offline")

    for cls in ("CIFAR10", "CIFAR100", "FashionMNIST"):
        monkeypatch.setattr(torchvision.datasets, cls, offline)
    empty = tmp_path / "empty"
    empty.mkdir()
    if SOURCES[name].bundled:
        loaded = load_source(name, empty, tmp_path / "raw")
        assert loaded.x_train.dtype == np.uint8 and loaded.x_train.shape[1] == 3
        assert len(loaded.y_train) == len(loaded.x_train) > 0
        assert len(loaded.y_test) == len(loaded.x_test) > 0
        return
    with pytest.raises(Seq2FinalError) as refused:
        load_source(name, empty, tmp_path / "raw")
    assert "\n" not in str(refused.value) and str(empty) in str(refused.value)
