import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from kedro.framework.startup import bootstrap_project

from seq2final.cli import _FailureReport, _user_error, cli, parse_params
from seq2final.core.errors import Seq2FinalError


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
    bootstrap_project(project)
    result = CliRunner().invoke(cli, ["run", "--env", "test", *args])
    assert result.exit_code == 0, result.output
    [folder] = list((project / "data/03_primary/sequences").iterdir())
    assert folder.name.startswith("digits-ttt-digits-seed4-")
    assert not (project / "data/04_feature/shift_distances").exists()  # only build_sequences ran


def test_run_reports_bad_input_in_one_line(project):
    bootstrap_project(project)
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
