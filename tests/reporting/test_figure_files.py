"""The figure dataset: every format of every figure, in one folder per save."""

from matplotlib.figure import Figure

from seq2final.reporting.figure_files import FigureFilesDataset


def _figures() -> dict[str, Figure]:
    figures = {}
    for key in ("one", "group/two"):
        figure = Figure()
        figure.add_subplot().plot([0, 1], [1, 0])
        figures[key] = figure
    return figures


def _files(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_each_figure_is_written_in_every_format(tmp_path):
    FigureFilesDataset(filepath=str(tmp_path / "f"), save_args={"dpi": 50}).save(_figures())
    assert _files(tmp_path / "f") == ["group/two.pdf", "group/two.png", "one.pdf", "one.png"]
    assert (tmp_path / "f/one.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "f/one.pdf").read_bytes().startswith(b"%PDF")


def test_a_versioned_save_puts_every_format_in_one_version_and_overwrite_keeps_them(tmp_path):
    from kedro.io import Version

    versioned = FigureFilesDataset(filepath=str(tmp_path / "v"), version=Version(None, None))
    versioned.save(_figures())
    (version,) = (tmp_path / "v").iterdir()
    assert len(_files(version)) == 4
    fresh = FigureFilesDataset(filepath=str(tmp_path / "o"), overwrite=True)
    (tmp_path / "o").mkdir()
    (tmp_path / "o/stale.png").write_bytes(b"old")
    fresh.save(_figures())
    assert _files(tmp_path / "o") == ["group/two.pdf", "group/two.png", "one.pdf", "one.png"]
