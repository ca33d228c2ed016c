"""The SQLite tracking store survives a run killed while it is being made, and a store that
cannot be used stops a run in one line before any work."""

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.store.db.utils import _get_alembic_config, create_sqlalchemy_engine
from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase

from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import PARTIAL
from seq2final.core.startup import bootstrap_once
from seq2final.tracking import mlflow_io
from seq2final.tracking.mlflow_io import _unfinished_schema, store_setup_lock

TINY = {
    "sequence": "source100:rotation60",
    "build_sequences": {"test_size": 50, "oracle_size": 120},
    "budget": "smoke",
}

# A `kedro run` whose MLflow set-up stops for good half-way through its migrations, right
# after one made the spans table and before its revision is recorded: where a kill left
# "table spans already exists" on every later run.
STALLED_RUN = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from alembic.ddl.impl import DefaultImpl

    create_table = DefaultImpl.create_table

    def stall_after_spans(self, table, **kw):
        create_table(self, table, **kw)
        if table.name == "spans":
            Path(sys.argv[2]).touch()
            time.sleep(600)

    DefaultImpl.create_table = stall_after_spans
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    project = Path(sys.argv[1])
    bootstrap_project(project)
    runtime = {"sequence": "source100:rotation60", "budget": "smoke"}
    with KedroSession.create(project_path=project, env="test", runtime_params=runtime) as session:
        session.run(pipeline_names=["build_sequences"])
    """
)


def _database(project: Path) -> Path:
    return project / "mlflow.db"


def _opens(database: Path) -> bool:
    """Whether MLflow opens ``database`` and finds it whole (its every table, its revision)."""
    MlflowClient(f"sqlite:///{database}").search_experiments(max_results=1)
    return _unfinished_schema(database) is None


def test_a_run_killed_while_the_database_is_made_leaves_none_and_the_next_run_works(
    project, run_kedro
):
    marker = project / "stalled"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-c", STALLED_RUN, str(project), str(marker)], cwd=project, env=env
    )
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert process.poll() is None, "the run ended before making the database"
            assert time.monotonic() < deadline, "the run never reached the database's set-up"
            time.sleep(0.2)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=60)
    assert not _database(project).exists()  # half-made, it lies under a temporary name
    assert list(project.glob(f"{PARTIAL}*-mlflow.db*"))
    run_kedro(["build_sequences"], **TINY)
    assert _opens(_database(project))
    assert not list(project.glob(f"{PARTIAL}*"))  # the stale build is cleared


# MLflow 3.17's migration that adds the spans table, and the one before it.
SPANS, BEFORE_SPANS = "a1b2c3d4e5f6", "770bee3ae1dd"


def _half_made(database: Path) -> None:
    """What MLflow's own in-place set-up left when killed mid-migration: the spans table made,
    its revision not yet recorded."""
    from alembic import command

    engine = create_sqlalchemy_engine(f"sqlite:///{database}")
    InitialBase.metadata.create_all(engine)
    config = _get_alembic_config(str(engine.url))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, SPANS)
        connection.exec_driver_sql(f"UPDATE alembic_version SET version_num = '{BEFORE_SPANS}'")
    engine.dispose()


def test_a_half_made_database_that_holds_no_runs_is_made_anew(project, run_kedro, caplog):
    _half_made(_database(project))
    with pytest.raises(Exception, match="table spans already exists"):  # MLflow alone
        MlflowClient(f"sqlite:///{_database(project)}").search_experiments()
    # The first session of a process configures logging, which drops the capture's handler
    # from the root logger (pytest adds it again for the next test).
    bootstrap_once(project)
    if caplog.handler not in logging.getLogger().handlers:
        logging.getLogger().addHandler(caplog.handler)
    run_kedro(["build_sequences"], **TINY)
    assert "holds nothing: making it anew" in caplog.text
    assert _opens(_database(project))


def _with_a_run(database: Path) -> None:
    with store_setup_lock(f"sqlite:///{database}"):
        client = MlflowClient(f"sqlite:///{database}")
        client.create_run(client.create_experiment("mine"))


def test_a_database_with_runs_at_another_schema_stops_the_run_in_one_line(project, run_kedro):
    database = _database(project)
    _with_a_run(database)
    with sqlite3.connect(database) as db:
        db.execute(f"UPDATE alembic_version SET version_num = '{BEFORE_SPANS}'")
    with pytest.raises(
        Seq2FinalError, match="holds .*1 row of runs.* but is at schema revision"
    ) as error:
        run_kedro(["build_sequences"], **TINY)
    assert "\n" not in str(error.value) and "mlflow db upgrade" in str(error.value)
    assert not (project / "data/03_primary").exists()  # before any work
    with sqlite3.connect(database) as db:  # the user's runs are kept
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone() == (1,)


def test_a_file_that_is_no_database_stops_the_run_in_one_line(project, run_kedro):
    _database(project).write_bytes(b"not a database" * 100)
    with pytest.raises(Seq2FinalError, match="is not a SQLite database") as error:
        run_kedro(["build_sequences"], **TINY)
    assert "\n" not in str(error.value)
    assert _database(project).read_bytes() == b"not a database" * 100


def test_a_whole_database_is_opened_as_it_is(tmp_path):
    database = tmp_path / "mlflow.db"
    _with_a_run(database)
    before = database.stat().st_mtime_ns, database.stat().st_ino
    with store_setup_lock(f"sqlite:///{database}"):
        pass
    assert (database.stat().st_mtime_ns, database.stat().st_ino) == before


def test_another_programs_database_is_never_remade(tmp_path):
    database = tmp_path / "mine.db"
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE notes (text TEXT)")  # no row: its tables alone are worth keeping
    refused = pytest.raises(Seq2FinalError, match=r"holds tables MLflow does not make \(notes\)")
    with refused, store_setup_lock(f"sqlite:///{database}"):
        pass
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]


def test_a_database_of_a_newer_mlflow_is_never_remade(tmp_path):
    database = tmp_path / "mlflow.db"
    _with_a_run(database)
    with sqlite3.connect(database) as db:
        db.execute("DELETE FROM runs")  # nothing to lose, and still not remade: not ours to judge
        db.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")
    with (
        pytest.raises(Seq2FinalError, match="ffffffffffff, which MLflow .* does not know") as error,
        store_setup_lock(f"sqlite:///{database}"),
    ):
        pass
    assert "\n" not in str(error.value)
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone() == ("ffffffffffff",)


def test_a_process_migrates_its_first_new_database_and_copies_it_for_the_next(
    tmp_path, monkeypatch
):
    """The second new database is made without MLflow's migrations, and is as whole: its schema
    is at MLflow's revision with every table, and runs go into it as into a migrated one."""
    monkeypatch.setattr(mlflow_io, "_EMPTY_DATABASES", {})
    migrations = []
    migrate = mlflow_io._initialize_tables
    monkeypatch.setattr(mlflow_io, "_initialize_tables", lambda e: migrations.append(migrate(e)))
    first, second = tmp_path / "a" / "mlflow.db", tmp_path / "b" / "mlflow.db"
    for database in (first, second):
        database.parent.mkdir()
        with store_setup_lock(f"sqlite:///{database}"):
            pass
    assert len(migrations) == 1
    assert _unfinished_schema(second) is None
    _with_a_run(second)
    with sqlite3.connect(second) as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone() == (1,)
