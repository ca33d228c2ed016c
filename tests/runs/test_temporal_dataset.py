"""Your own images declared in the Kedro catalog load as the pipelines read them."""

import pytest
from kedro.io import DataCatalog, DatasetError

from seq2final.core.errors import Seq2FinalError
from seq2final.data.sources import load_source
from seq2final.runs.temporal_dataset import TemporalImagesDataset
from tests.temporal_images import manifest_of, write_images

KIND = "seq2final.runs.temporal_dataset.TemporalImagesDataset"


def test_a_declared_folder_or_manifest_loads_what_the_pipelines_read(tmp_path):
    root = tmp_path / "photos"
    paths = sorted(write_images(root), key=lambda row: str(row[0]))
    manifest = manifest_of(root, paths)
    raw = str(tmp_path / "raw")
    catalog = DataCatalog.from_config({
        "scans": {"type": KIND, "path": str(root), "options": {"periods": "as_given"},
                  "raw_dir": raw},
        "listed": {"type": KIND, "path": str(manifest), "layout": "manifest", "raw_dir": raw},
    })  # fmt: skip
    scans = catalog.load("scans")
    assert scans.fingerprint == load_source("folder", root, raw).fingerprint
    assert catalog.load("listed").fingerprint == scans.fingerprint
    assert scans.time_names == ("95", "1003", "2000")
    with pytest.raises(DatasetError, match="never written"):
        catalog.save("scans", scans)


def test_a_bad_declaration_is_refused_in_one_line_when_the_dataset_is_made(tmp_path):
    with pytest.raises(DatasetError, match="layout 'npz': valid: folder, manifest"):
        TemporalImagesDataset(str(tmp_path), layout="npz")
    with pytest.raises(Seq2FinalError, match=r"^data_options.periods: Input should be"):
        TemporalImagesDataset(str(tmp_path), options={"periods": "weekly"})
    catalog = DataCatalog.from_config({"x": {"type": KIND, "path": str(tmp_path),
                                             "options": {"bins": 1}}})  # fmt: skip
    with pytest.raises(DatasetError, match="data_options.bins"):  # Kedro wraps it on first use
        catalog.load("x")
