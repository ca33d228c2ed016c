"""Files written by the stores: never half-visible, never listed while temporary, swapped whole."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from seq2final.core.files import _exchange, atomic_write, replace_folder, stored_files
from seq2final.runs.result_store import ResultStore


def test_a_write_killed_half_way_leaves_no_key_and_no_file_in_place(tmp_path):
    results = tmp_path / "results"
    # A real SIGKILL in the middle of writing a record: the temporary file stays behind.
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from seq2final.core.files import atomic_write

        def half(path):
            path.write_text('{{"job_key": "half')
            os.kill(os.getpid(), signal.SIGKILL)

        atomic_write(Path({str(results / "job-a.json")!r}), half)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], check=False)
    assert done.returncode == -signal.SIGKILL
    left = [p.name for p in results.iterdir()]
    assert len(left) == 1 and left[0].startswith(".partial-") and left[0].endswith("job-a.json")
    store = ResultStore(results, tmp_path / "models", tmp_path / "curves")
    assert list(store) == [] and "job-a" not in store and len(store) == 0
    atomic_write(results / "job-b.json", lambda p: p.write_text(json.dumps({"job_key": "b"})))
    assert list(store) == ["job-b"]


def test_a_failing_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "record.json"
    target.write_text("old")

    def fail(path):
        path.write_text("new, half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, fail)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_stored_files_skip_hidden_names(tmp_path):
    for name in ("a.json", ".partial-1234-b.json", "c.csv", "d.json"):
        (tmp_path / name).write_text("{}")
    assert [p.name for p in stored_files(tmp_path, ".json")] == ["a.json", "d.json"]
    assert list(stored_files(tmp_path / "missing", ".json")) == []


def test_replacing_a_folder_swaps_it_whole(tmp_path):
    final = tmp_path / "sequence"
    final.mkdir()
    (final / "old.txt").write_text("old")
    held = os.open(final, os.O_RDONLY)  # a reader that opened the old folder keeps seeing it
    try:
        new = tmp_path / ".partial-x-sequence"
        new.mkdir()
        (new / "new.txt").write_text("new")
        replace_folder(new, final)
        assert sorted(p.name for p in final.iterdir()) == ["new.txt"]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["sequence"]
        assert os.listdir(held) == []  # the old folder was removed after the swap, not before
    finally:
        os.close(held)
    first = tmp_path / ".partial-y-other"
    first.mkdir()
    (first / "a").write_text("a")
    replace_folder(first, tmp_path / "other")
    assert (tmp_path / "other" / "a").read_text() == "a"


def test_a_torch_file_written_atomically_loads(tmp_path):
    path = tmp_path / "m" / "model.pt"
    atomic_write(path, lambda p: torch.save({"w": torch.ones(2)}, p))
    assert torch.load(path)["w"].sum() == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_on_linux_the_two_folders_are_exchanged_in_one_call(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "one").write_text("1")
    (second / "two").write_text("2")
    assert _exchange(first, second)  # no moment without a folder at either name
    assert [p.name for p in first.iterdir()] == ["two"]
    assert [p.name for p in second.iterdir()] == ["one"]
