import pytest
from click.testing import CliRunner
from kedro.framework.startup import bootstrap_project

from seq2final.cli import _user_error, cli, parse_params
from seq2final.errors import Seq2FinalError


def test_parse_params_accepts_both_syntaxes_and_keeps_later_separators():
    assert parse_params("method:st_b") == {"method": "st_b"}
    assert parse_params("method=st_b,seed:3") == {"method": "st_b", "seed": 3}
    assert parse_params("sequence:rotation:corruption4000,data_path=/d/a=b:c.npz") == {
        "sequence": "rotation:corruption4000",
        "data_path": "/d/a=b:c.npz",
    }
    assert parse_params("quantify_shift.workers:1") == {"quantify_shift": {"workers": 1}}
    assert parse_params("") == {}
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
