"""``kedro bench`` as a user types it, in a copy of the project."""

import json
import sys
from pathlib import Path

from click.testing import CliRunner

from seq2final.bench.command import (
    PAGE,
    QUICK_OUTPUT,
    RESULTS,
    BenchOptions,
    destinations,
    render,
)
from seq2final.bench.search import SearchRun, summarize
from seq2final.cli import cli


def test_bench_quick_runs_without_data_prints_each_ratio_and_writes_its_own_json_and_page(
    project, monkeypatch
):
    """As on a fresh clone: no CIFAR-10 npz, no --sections; the committed page stays as it is.
    (In this process: the command line's own start is tested in tests/test_cli.py.)"""
    committed = "# Benchmarks\n\nThe measured page.\n"
    (project / "docs").mkdir()
    (project / "docs/benchmarks.md").write_text(committed)
    assert not (project / "data/01_raw/cifar10.npz").exists()
    args = ["bench", "--quick", "--archs", "convnet_1", "--device", "cpu"]
    monkeypatch.setattr(sys, "argv", ["kedro", *args])  # the command line the page quotes
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, (done.output[-4000:], done.exception)
    assert (project / "docs/benchmarks.md").read_text() == committed
    assert not (project / "benchmarks/results/bench.json").exists()
    results = json.loads((project / "data/08_reporting/bench/bench.json").read_text())
    assert set(results) == {"fit", "fused"}
    entry = results["fit"]
    assert entry["machine"]["device"] == "cpu" and entry["machine"]["cores"] >= 1
    assert entry["command"].startswith("kedro bench --quick")
    rows = {row["arch"]: row for row in entry["figures"]}
    assert set(rows) == {"convnet_1"}
    ratio_lines = [line for line in done.output.splitlines() if "ratio" in line]
    for arch, row in rows.items():
        assert row["bare_images_per_s"] > 0 and row["fit_images_per_s"] > 0
        assert abs(row["ratio"] - row["fit_images_per_s"] / row["bare_images_per_s"]) < 0.01
        assert any(arch in line and f"{row['ratio']:.3f}" in line for line in ratio_lines)
    fused = results["fused"]["figures"]
    assert {(row["arch"], row["width"]) for row in fused} == {
        (arch, width) for arch in rows for width in (1, 8)
    }  # fmt: skip
    for row in fused:
        speeds = row["fused_model_images_per_s"], row["sequential_model_images_per_s"]
        assert min(speeds) > 0 and abs(row["ratio"] - speeds[0] / speeds[1]) < 0.01
        assert any(f"{row['arch']} K={row['width']}: {row['ratio']:.3f}" in line
                   for line in ratio_lines)  # fmt: skip
    page = (project / "data/08_reporting/bench/benchmarks.md").read_text()
    assert page.startswith("# Benchmarks (quick)")
    assert "`kedro bench --quick --archs convnet_1 --device cpu`" in page
    assert "Figures: data/08_reporting/bench/bench.json; page: data/08_reporting/bench/" in (
        done.output
    )
    assert all(f"| `{arch}` |" in page for arch in rows)
    assert all(f"| `{arch}` | 8 |" in page for arch in rows)


def test_bad_bench_input_stops_in_one_line_before_any_work(project):
    for args, expected in [
        (["--sections", "fit,nonsense"], "--sections 'fit,nonsense': unknown nonsense; valid: "),
        (["--sections", "search", "--data-path", "missing.npz"], "--data-path missing.npz: "),
        (["--sections", "search", "--budgets", "default,huge"], "unknown budget 'huge'; valid: "),
        (["--seeds", "0"], "--seeds 0: needs at least 1 seed"),
        (["--archs", "convnet_4,resnet_99"], "--archs 'convnet_4,resnet_99': unknown resnet_99; "),
        (["--device", "cuda:7"], "device 'cuda:7' requested but"),
        (["--quick", "--sections", "fit,search"], "--quick shortens only fit and fused; "),
        (["--quick", "--output", "docs"], "a quick run never writes docs/benchmarks.md"),
        (
            ["--quick", "--output", "benchmarks/results"],
            "a quick run never writes docs/benchmarks.md or benchmarks/results/bench.json",
        ),
    ]:
        if "--budgets" in args:  # the data path must exist for the budgets to be checked
            (project / "fake.npz").write_bytes(b"")
            args = [*args, "--data-path", "fake.npz"]
        done = CliRunner().invoke(cli, ["bench", *args])
        assert done.exit_code != 0
        errors = [line for line in done.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and expected in errors[0], done.output[-1500:]
        assert not (project / "benchmarks/results/bench.json").exists()


def test_a_full_run_writes_the_committed_page_a_quick_one_its_own_or_the_folder_named():
    def options(quick, output=None):
        return BenchOptions(None, quick, "convnet_4", "x.npz", "default", 1, "cpu", None, output)

    assert destinations(options(quick=False)) == (RESULTS, PAGE)
    assert destinations(options(quick=True)) == (
        QUICK_OUTPUT / "bench.json",
        QUICK_OUTPUT / "benchmarks.md",
    )
    assert PAGE.parent not in {path.parent for path in destinations(options(quick=True))}
    elsewhere = Path("elsewhere")
    for quick in (False, True):
        assert destinations(options(quick, "elsewhere")) == (
            elsewhere / "bench.json",
            elsewhere / "benchmarks.md",
        )


def test_the_search_page_shows_every_seed_beside_the_means():
    grids = [{"fit": "ft", "seed": seed, "epochs": 800, "best_valid": valid, "test_accuracy": 0.55,
              "params": {}} for seed, valid in ((0, 0.57), (1, 0.56))]  # fmt: skip
    runs = [SearchRun("default", "ft", 0, 440, 200, 0.565, 0.554, 8),
            SearchRun("default", "ft", 1, 500, None, 0.521, 0.511, 8)]  # fmt: skip
    figures = {"margin": 0.01, "grids": grids, "runs": [vars(r) for r in runs],
               "summary": summarize(runs, grids)}  # fmt: skip
    machine = {"cpu": "cpu", "cores": 2, "torch_threads": 2, "device": "cpu", "torch": "2"}
    page = render({"search": {"machine": machine, "command": "kedro bench", "measured": "today",
                              "seconds": 1.0, "figures": figures}})  # fmt: skip
    assert "| ft | 0 | paper grid |  | 800 | 0.570 | 0.550 |" in page
    assert "| ft | 0 | default | 200 | 440 | 0.565 | 0.554 |" in page
    assert "| ft | 1 | default | never | 500 | 0.521 | 0.511 |" in page
    # the mean row charges the miss the grid's 800 epochs: (200 + 800) / 2 / 800
    assert "| ft | default | 500 | 0.62 | 0.59 | 1/2 |" in page


def test_bench_replay_judges_a_policy_on_stored_grids_without_training(project, monkeypatch):
    """The stored grids are read, the policy named on the command line replayed on them, and its
    table written; a malformed policy is one line before any work."""
    store = project / "benchmarks/results/search_replay"
    store.mkdir(parents=True)
    fit = {"run": "r", "owner": "job", "stage": "final", "params": [{"lr": 0.1}, {"lr": 0.01}],
           "curves": [[0.1, 0.5, 0.5, 0.5], [0.1, 0.2, 0.6, 0.7]], "tests": [0.5, 0.6]}  # fmt: skip
    for name in ("dev", "heldout", "noise"):
        stored = {"runs": {"r": [fit]}, "cpu": "a CPU", "max_epochs": 3}
        (store / f"{name}.json").write_text(json.dumps(stored))
    (project / "benchmarks/notes").mkdir(parents=True)
    (project / "benchmarks/notes/replay.md").write_text("What the table says, by hand.\n")
    args = ["bench", "--sections", "replay", "--policy", "1,2", "--output", "out"]
    monkeypatch.setattr(sys, "argv", ["kedro", *args])
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, (done.output[-4000:], done.exception)
    assert "replay heldout: 0/1 within 0.01 on test, pooled spend 0.67" in done.output
    page = (project / "out/benchmarks.md").read_text()
    assert "halving from 1 epochs, 1/2 on" in page and "| 2 points | 1 | 0 | 0.000 |" in page
    assert "on 1 of 1 development fits" in page  # the noise floor: the same grid agrees
    assert page.index("What the table says, by hand.") > page.index("| 2 points |")  # kept
    bad = CliRunner().invoke(cli, ["bench", "--sections", "replay", "--policy", "3"])
    assert bad.exit_code != 0 and "--policy 3: valid: FIRST,ETA[,GUARD]" in bad.output
