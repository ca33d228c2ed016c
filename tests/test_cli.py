import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from seq2final.cli import _FailureReport, _user_error, cli, parse_params
from seq2final.core.errors import Seq2FinalError
from seq2final.core.startup import bootstrap_once
from seq2final.methods import paper_columns


def test_parse_params_accepts_both_syntaxes_and_keeps_later_separators():
    assert parse_params("method:st_b") == {"method": "st_b"}
    assert parse_params("method=st_b,seed:3") == {"method": "st_b", "seed": 3}
    assert parse_params("sequence:rotation:corruption4000,data_path=/d/a=b:c.npz") == {
        "sequence": "rotation:corruption4000",
        "data_path": "/d/a=b:c.npz",
    }
    assert parse_params("quantify_shift.workers:1") == {"quantify_shift": {"workers": 1}}
    assert parse_params("") == {}
    # Values stay the text typed unless they are a number, a boolean, null or a written list.
    assert parse_params("sequence=rotation:::,lr:1e-3,force:true,name:on,budget:null") == {
        "sequence": "rotation:::", "lr": 0.001, "force": True, "name": "on", "budget": None,
    }  # fmt: skip
    assert parse_params("evaluate.pairs=[[sft, ft]]") == {"evaluate": {"pairs": [["sft", "ft"]]}}
    # Not YAML 1.1's octal, sexagesimal or comments: those stay text.
    assert parse_params("a=010,b=2:30,c=#x,d=.5,e=-2") == {
        "a": "010", "b": "2:30", "c": "#x", "d": 0.5, "e": -2,
    }  # fmt: skip
    with pytest.raises(Seq2FinalError, match="no key"):
        parse_params(":x")


@pytest.mark.parametrize(
    "args",
    [
        ["--pipeline", "build_sequences", "--params", "sequence:digits_ttt,seed:4"],
        ["--pipelines", "build_sequences", "--params", "sequence=digits_ttt,seed=4"],
    ],
)
def test_run_accepts_old_and_new_syntax(project, args):
    bootstrap_once(project)
    result = CliRunner().invoke(cli, ["run", "--env", "test", *args])
    assert result.exit_code == 0, result.output
    [folder] = list((project / "data/03_primary/sequences").iterdir())
    assert folder.name.startswith("digits-ttt-digits-seed4-")
    assert not (project / "data/04_feature/shift_distances").exists()  # only build_sequences ran


def test_run_reports_bad_input_in_one_line(project):
    bootstrap_once(project)
    result = CliRunner().invoke(cli, ["run", "--env", "test", "--params", "dataset:cifar11"])
    assert result.exit_code != 0
    assert (
        result.output.strip()
        .splitlines()[-1]
        .startswith("Error: parameter 'dataset': unknown dataset 'cifar11'; valid:")
    )
    assert not (project / "data/03_primary").exists()


def test_user_errors_wrapped_by_kedro_are_still_reported_in_one_line():
    from kedro.io import DatasetError

    try:
        try:
            raise Seq2FinalError("stored sequence step x is corrupt")
        except Seq2FinalError as inner:
            raise DatasetError("Failed while loading data") from inner
    except DatasetError as outer:
        assert str(_user_error(outer)) == "stored sequence step x is corrupt"
    assert _user_error(RuntimeError("bug")) is None


def test_a_user_error_inside_a_node_ends_the_run_with_one_line(project):
    """No node-failure block, resume hint or "run closed" lines: just our Error line."""
    environment = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "COLUMNS": "200"}
    kedro = Path(sys.executable).with_name("kedro")
    result = subprocess.run(
        [str(kedro), "run", "--env", "test", "--pipeline", "evaluate", "--params", "sequence=digits_rcl"],
        cwd=project, env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 1
    errors = [line for line in output.splitlines() if "Error" in line or "error" in line]
    assert errors == [
        "Error: no results for sequence 'digits_rcl' (digits); make them with: "
        "kedro run --params sequence:digits_rcl,dataset:digits"
    ]
    assert "have not run" not in output and "WARNING" not in output


def test_failure_logs_are_shown_when_the_failure_is_a_bug():
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        report = _FailureReport()
        with report.attached():
            logging.getLogger("kedro.pipeline.node").error("Node x failed with error: boom")
            logging.getLogger("kedro.other").error("unrelated")
            assert seen == ["unrelated"]  # held back while the cause is unknown
            report.release()
        assert seen == ["unrelated", "Node x failed with error: boom"]
    finally:
        root.removeHandler(handler)


def test_a_run_keeps_dataset_records_off_the_terminal_and_ends_with_a_results_table(project):
    """Piped to a file, the run writes one plain line per record (none per dataset: the log file
    keeps them), each fit and job named, and ends with one table row per method at the
    terminal's width, its numbers those of the stored records, then the folders."""
    environment = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "COLUMNS": "72"}
    params = (
        "sequence:source100:rotation60,build_sequences.test_size:50,build_sequences.oracle_size:"
        "120,arch:convnet_1,budget:smoke,method:[ft,baseline],mlflow.enabled:false"
    )
    result = subprocess.run(
        [str(Path(sys.executable).with_name("kedro")), "run", "--env", "test", "--pipelines",
         "build_sequences,pretrain_historical,adapt_final", "--params", params],
        cwd=project, env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert not [line for line in lines if "Loading data from" in line or "Saving data to" in line]
    logged = (project / "logs" / "info.log").read_text()
    assert "Saving data to adapt_results" in logged and "Loading data from job_plan" in logged
    records = {}
    for path in (project / "data/07_model_output/results").glob("*.json"):
        record = json.loads(path.read_text())
        records[record["method"]] = record
    title = lines.index("source100:rotation60 (digits) · convnet_1 · budget smoke")
    logs, table = lines[:title], lines[title:]
    stamp = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING) [\w.]+: ")
    assert all(stamp.match(line) for line in logs), [x for x in logs if not stamp.match(x)]
    for name, record in records.items():  # grep finds each job's start, fit and end, key included
        job = [
            line.split(": ", 1)[1] for line in logs if f" {name}: " in line or f" {name} · " in line
        ]
        assert job[0].startswith("job ") and job[0].endswith(f" {name}: started"), job
        assert job[1].startswith(f"{name} · final: valid {record['valid_accuracy']:.3f}"), job
        assert f" {name}: done in " in job[2] and record["job_key"] in job[2], job
    assert max(len(line) for line in table) <= 72
    header = [cell.strip() for cell in table[2].split("┃")[1:-1]]
    assert header == ["method", "test", "valid", "epochs", "seconds", ""]
    rows = [[cell.strip() for cell in row.split("│")[1:-1]] for row in table[4:6]]
    order = paper_columns()
    best, second = sorted(
        records.values(), key=lambda r: (-r["test_accuracy"], order.index(r["method"]))
    )
    for row, record in zip(rows, (best, second), strict=True):
        assert row[:4] == [
            record["method"], f"{record['test_accuracy']:.3f}",
            f"{record['valid_accuracy']:.3f}", str(record["epochs"]),
        ]  # fmt: skip
    marks = {row[0]: row[5] for row in rows}
    assert marks[best["method"]].startswith("best")
    assert marks["baseline"].endswith("reference")
    assert table[7:] == [
        "Results: data/07_model_output/results/ (one JSON record per job)",
        "Log of every step: logs/info.log",
    ]


def test_a_family_runs_each_member_without_robustness_then_robustness_once(monkeypatch):
    """``--pipelines build_sequences,robustness`` on a family: the members run what reads one
    sequence, the family's ``robustness`` runs last (docs/intensity.md)."""
    import seq2final.cli as command
    from seq2final.data.family import members

    calls = []
    monkeypatch.setattr(command, "_family", lambda kwargs: members("rotation@*", [0, 30]))
    monkeypatch.setattr(command.kedro_run, "callback", lambda **kw: calls.append(kw))
    for asked, last in (
        (["build_sequences", "robustness"], ["robustness"]),
        (["adapt_final"], None),
    ):
        calls.clear()
        command._run_members({"pipelines": asked, "params": {"budget": "smoke"}})
        runs = [(c["params"].get("sequence"), c["pipelines"]) for c in calls]
        each = [p for p in asked if p != "robustness"]
        assert runs[:2] == [("rotation@0", each), ("rotation@30", each)]
        assert [c["pipelines"] for c in calls[2:]] == ([last] if last else [])
