"""What job runs and the summary run share when they talk to MLflow."""

from __future__ import annotations

import functools
import json
import logging
import re
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import sqlalchemy
import torch
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from filelock import FileLock, Timeout
from mlflow import MlflowClient
from mlflow.entities import Experiment, ViewType
from mlflow.exceptions import MlflowException
from mlflow.store.db.base_sql_model import Base
from mlflow.store.db.utils import (
    _all_tables_exist,
    _get_alembic_config,
    _get_schema_version,
    _initialize_tables,
    create_sqlalchemy_engine,
)
from mlflow.store.model_registry.sqlalchemy_store import (
    SqlAlchemyStore as SqlAlchemyRegistryStore,
)
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

from seq2final import __version__
from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import PARTIAL, atomic_write
from seq2final.tracking.display import (
    COMPARISON_VIEW,
    SHARED_VIEW,
    VIEW_ADDED,
    comparison_view,
)
from seq2final.tracking.names import environment

log = logging.getLogger(__name__)


_SQLITE_PREFIX = "sqlite:///"


def sqlite_file(uri: str) -> Path | None:
    """The file of a ``sqlite:///`` URI (relative to the working directory, as SQLAlchemy opens
    it), or None for any other store and for an in-memory database."""
    if not uri.startswith(_SQLITE_PREFIX):
        return None
    path = uri.removeprefix(_SQLITE_PREFIX).split("?", 1)[0]
    return None if not path or path == ":memory:" else Path(path)


@contextmanager
def store_setup_lock(uri: str) -> Iterator[None]:
    """Held while a process opens a SQLite tracking store, which it finds whole
    (:func:`prepare_sqlite_store` runs first): two runs started together on a fresh
    ``mlflow.db`` would both create its schema, the loser failing on its ``alembic_version`` row.
    A lock file beside the database (a relative path is opened from the working directory, as
    SQLAlchemy opens it) makes the second wait for the first; servers and other stores need
    none, and a database in a folder that does not exist is left to MLflow's own error."""
    path = sqlite_file(uri)
    if path is None or not path.resolve().parent.is_dir():
        yield
        return
    lock = FileLock(f"{path.resolve()}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("waiting for another run to finish setting up the tracking store %s", path)
        lock.acquire()
    try:
        prepare_sqlite_store(path)
        yield
    finally:
        lock.release()


def prepare_sqlite_store(path: Path) -> None:
    """Make sure the SQLite file ``path`` is a whole MLflow database before MLflow opens it
    (under :func:`store_setup_lock`, which calls it).

    MLflow creates the schema of a new file in place, table by table and then migration by
    migration, so a run killed in its first seconds left a half-made ``mlflow.db`` on which every
    later run failed ("table spans already exists"). Here a new database is built under a
    temporary name beside it and renamed into place when whole (:func:`atomic_write`), so a kill
    at any moment leaves no database or a whole one. A file that is not whole is made anew only
    when it holds nothing to lose: MLflow's tables alone, with no row but those MLflow writes
    when it makes them. Anything else (rows, tables of another program, a schema of a newer
    MLflow, a file that is no database) stops the run with one line saying what to do. Other
    stores (servers, PostgreSQL) are left to MLflow.
    """
    path = path.resolve()
    partial = re.compile(
        re.escape(PARTIAL) + r"[0-9a-f]{12}-" + re.escape(path.name) + r"(-journal)?"
    )
    for stale in path.parent.iterdir():
        if partial.fullmatch(stale.name):
            stale.unlink(missing_ok=True)  # an earlier build cut short (the lock is ours)
    if path.exists():
        try:
            problem = _unfinished_schema(path)
            held = _held(path) if problem else None
        except (sqlalchemy.exc.DatabaseError, sqlite3.DatabaseError) as error:
            cause = getattr(error, "orig", error)
            if getattr(cause, "sqlite_errorcode", None) != _SQLITE_NOTADB:
                raise  # locked, unreadable, ...: MLflow's own words, in the hook's one line
            raise Seq2FinalError(
                f"'{path}' is not a SQLite database ({str(cause).strip()}): move it away to "
                "start a new one, or point mlflow.yml's mlflow_tracking_uri at another file"
            ) from None
        if problem is None:
            return
        if held:
            raise Seq2FinalError(
                f"the MLflow database '{path}' holds {held} but {problem}: back it up, then run "
                f"'mlflow db upgrade sqlite:///{path}' (or move it away to start a new one)"
            )
        log.warning("the MLflow database %s %s and holds nothing: making it anew", path, problem)
        _forget_engines(path)
        path.unlink()

    atomic_write(path, _build_empty_database)


_EMPTY_DATABASES: dict[str, bytes] = {}
"""The bytes of a new database, per MLflow version: made once per process, then copied."""


def _build_empty_database(partial: Path) -> None:
    """A new, empty MLflow database at ``partial``. MLflow's migrations take about 2 s of CPU,
    and what they leave holds no row that depends on when or where it was made (the schema
    revision and the default workspace), so a process that starts many projects (a test run, a
    notebook) makes the first one and copies its bytes for the next."""
    made = _EMPTY_DATABASES.get(mlflow.__version__)
    if made is not None:
        partial.write_bytes(made)
        return
    engine = create_sqlalchemy_engine(f"{_SQLITE_PREFIX}{partial}")
    try:
        _initialize_tables(engine)
    finally:
        engine.dispose()
    _EMPTY_DATABASES[mlflow.__version__] = partial.read_bytes()


_SQLITE_NOTADB = 26
"""SQLite's result code for a file that is not a database."""

_WRITTEN_WITH_THE_SCHEMA = {"alembic_version", "workspaces"}
"""Tables in which MLflow writes rows when it makes a new database."""


def _forget_engines(path: Path) -> None:
    """Close the connections MLflow's stores keep open to ``path`` (one engine per URI for the
    process's life), so that what this process opens next is the new file, not the removed one."""
    for store in (SqlAlchemyStore, SqlAlchemyRegistryStore):
        for engine in store._engine_map.values():
            database = engine.url.database
            if database and Path(database).resolve() == path:
                engine.dispose()


def _unfinished_schema(path: Path) -> str | None:
    """None when ``path`` is a database with every table and the schema revision this MLflow
    makes, else what is wrong with it (in words that follow "the database ..."); a revision this
    MLflow does not know (a newer MLflow's) stops the run, since an upgrade cannot help. Every
    tracked run starts here, so MLflow's migrations are read once and a whole database answers
    first."""
    migrations = ScriptDirectory.from_config(_get_alembic_config(""))
    head = migrations.get_current_head()
    engine = create_sqlalchemy_engine(f"{_SQLITE_PREFIX}{path}")
    try:
        found = _get_schema_version(engine)
        tables_exist = _all_tables_exist(engine)
    finally:
        engine.dispose()
    if found == head and tables_exist:
        return None
    try:
        known = found is None or migrations.get_revision(found) is not None
    except CommandError:
        known = False
    if not known:
        raise Seq2FinalError(
            f"the MLflow database '{path}' has schema revision {found}, which MLflow "
            f"{mlflow.__version__} does not know (a newer MLflow made it): open it with that "
            "MLflow, or move it away to start a new one"
        )
    if not tables_exist:
        return "lacks some of MLflow's tables (a set-up that was cut short)"
    return f"is at schema revision {found}, where MLflow {mlflow.__version__} needs {head}"


def _held(path: Path) -> str | None:
    """What remaking ``path`` would lose ("3 rows of runs", "tables MLflow does not make: x"),
    or None when it holds MLflow's tables alone with only the rows MLflow writes when it makes
    them (and its default experiment)."""
    ours = set(Base.metadata.tables)
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
        tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        foreign = sorted(tables - ours - _WRITTEN_WITH_THE_SCHEMA)
        if foreign:
            return f"tables MLflow does not make ({', '.join(foreign)})"
        held = []
        for table in sorted((tables & ours) - _WRITTEN_WITH_THE_SCHEMA):
            where = (
                " WHERE experiment_id != 0" if table in ("experiments", "experiment_tags") else ""
            )
            (rows,) = db.execute(f'SELECT COUNT(*) FROM "{table}"{where}').fetchone()
            if rows:
                held.append(f"{rows} row{'s' if rows != 1 else ''} of {table}")
    return ", ".join(held) or None


EXPERIMENT_DESCRIPTION = """\
seq2final runs of one sequence: the saved view Compare methods (top right) shows one row per job.

Every run has the tag `kind`:

- `job`: one adapted job (a method on an architecture, seed and budget): its metrics, learning
  curves, result record and registered model;
- `trial`: an Optuna trial of a job's tuning, nested under the job (the `+` before its name);
- `summary`: the sequence's tables and figures from `evaluate` and `visualize`.

What each run holds: `docs/tracking.md`.
"""
"""The description (``mlflow.note.content``) of every experiment seq2final creates: the UI shows it
above the runs, where a user who opens the experiment first looks for what the rows are. Its first
line, all the experiment list and a folded description show, is plain text and says how to
compare methods."""

NOTE = "mlflow.note.content"
"""The tag MLflow's UI shows and edits as an experiment's or a run's description."""


def experiment_id(
    client: MlflowClient, name: str, description: str = EXPERIMENT_DESCRIPTION
) -> str:
    """The experiment called ``name``, created (or restored from deletion) when needed.

    It gets ``description`` unless it has one (a user's own edit in the UI stays), and, in a
    store of the project's own, artifact paths that survive moving the project
    (:func:`relative_artifacts`).
    """
    experiment = client.get_experiment_by_name(name)
    view = f"{SHARED_VIEW}{COMPARISON_VIEW}"
    if experiment is None:
        try:  # the kind MLflow 3's own experiment-type selector records for training runs
            client.create_experiment(name, tags={
                "mlflow.experimentKind": "custom_model_development", NOTE: description,
                view: comparison_view(int(time.time() * 1000)), VIEW_ADDED: COMPARISON_VIEW,
            })  # fmt: skip
        except MlflowException as error:  # another worker created it first: use that one
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        experiment = client.get_experiment_by_name(name)
        assert experiment is not None
    if experiment.lifecycle_stage == "deleted":
        client.restore_experiment(experiment.experiment_id)
    if NOTE not in experiment.tags:  # made before experiments had descriptions
        client.set_experiment_tag(experiment.experiment_id, NOTE, description)
    if VIEW_ADDED not in experiment.tags:  # made before the saved view; once only, so a user's
        if view not in experiment.tags:  # edit stays and a view they deleted stays deleted
            client.set_experiment_tag(
                experiment.experiment_id, view, comparison_view(int(time.time() * 1000))
            )
        client.set_experiment_tag(experiment.experiment_id, VIEW_ADDED, COMPARISON_VIEW)
    database = project_database(client.tracking_uri)
    if database is not None:
        relative_artifacts(database, experiment)
    return experiment.experiment_id


def project_database(tracking_uri: str) -> Path | None:
    """The SQLite file of ``tracking_uri`` when it lies in the working directory, else None.

    Kedro runs in the project's root, so that directory is the project: a database inside it moves
    with it (``sqlite:///mlflow.db``, the committed URI, always does). A database elsewhere, or a
    tracking server, is a store shared beyond the project, which this module leaves as MLflow
    made it.
    """
    path = sqlite_file(tracking_uri)
    if path is None:
        return None
    database = path.resolve()
    return (
        database if database.is_file() and database.is_relative_to(Path.cwd().resolve()) else None
    )


def relative_artifacts(database: Path, experiment: Experiment) -> None:
    """Store the artifact paths of ``experiment`` relative to the project, so a moved or copied
    project reads its own artifacts.

    MLflow 3.17 resolves a local artifact location to an absolute path when it creates an
    experiment (relative ones included), and each run copies its experiment's location when it
    starts. After a move, the UI and ``models:/`` loads would read the old folder, or another
    copy's. MLflow's location-free alternative, ``mlflow-artifacts:``, works only through a
    tracking server, which ``kedro run`` and ``mlflow.pyfunc.load_model`` on ``sqlite:///``
    do not use. A relative path MLflow keeps as it is (in a run's, a logged model's and a
    registered version's location alike), and resolves, as it does the relative
    ``sqlite:///mlflow.db``, against the working directory: the project root for ``kedro run``,
    ``make mlflow`` and the notebooks. MLflow has no call that changes a location, so the
    experiment's row and its runs', logged models' and registered versions' rows are rewritten
    in the database: only paths inside the project, which name the same files afterwards, so
    the rewrite moves nothing and can run again.
    A failure leaves the absolute paths, which work as long as the project is not moved.
    """
    root = Path.cwd().resolve().as_posix()
    location = experiment.artifact_location
    local = location.removeprefix("file://")
    relative = local[len(root) + 1 :] if local.startswith(f"{root}/") else None
    try:
        with closing(sqlite3.connect(database, timeout=60)) as db, db:
            if relative:
                db.execute(
                    "UPDATE experiments SET artifact_location = ? "
                    "WHERE experiment_id = ? AND artifact_location = ?",
                    (relative, int(experiment.experiment_id), location),
                )
            for prefix in (f"{root}/", f"file://{root}/"):  # runs made before, or by a server
                db.execute(
                    "UPDATE runs SET artifact_uri = substr(artifact_uri, ?) "
                    "WHERE experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
                    (len(prefix) + 1, int(experiment.experiment_id), len(prefix), prefix),
                )
                db.execute(  # its logged models, and the registered versions they hold
                    "UPDATE logged_models SET artifact_location = substr(artifact_location, ?) "
                    "WHERE experiment_id = ? AND substr(artifact_location, 1, ?) = ?",
                    (len(prefix) + 1, int(experiment.experiment_id), len(prefix), prefix),
                )
                db.execute(
                    "UPDATE model_versions SET storage_location = substr(storage_location, ?) "
                    "WHERE substr(storage_location, 1, ?) = ?",
                    (len(prefix) + 1, len(prefix), prefix),
                )
    except sqlite3.Error as error:
        log.warning(
            "could not make the artifact paths of MLflow experiment '%s' relative to the project "
            "(they stay absolute, and break if the project is moved): %s",
            experiment.name, error,
        )  # fmt: skip


def trash_empty_default_experiment(client: MlflowClient) -> None:
    """Move MLflow's own ``Default`` experiment to the trash while it holds no run.

    MLflow creates it in every new store; seq2final never logs to it, so beside the project's
    experiments it is an empty row that looks like a run went missing. Only in a store of the
    project's own (:func:`project_database`); one with runs, or a description, is left alone, and
    ``mlflow experiments restore --experiment-id 0`` brings it back.
    """
    if project_database(client.tracking_uri) is None:
        return
    try:
        default = client.get_experiment("0")
    except MlflowException:
        return
    if default.lifecycle_stage != "active" or NOTE in default.tags:
        return
    if client.search_runs(["0"], run_view_type=ViewType.ALL, max_results=1):
        return
    client.delete_experiment("0")


def ensure_registered_model(client: MlflowClient, name: str) -> None:
    """The registered model ``name``, created unless it exists."""
    try:
        client.create_registered_model(name)
    except MlflowException as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise


@contextmanager
def quiet_model_logging() -> Iterator[None]:
    """Silence what MLflow prints per model: the CloudPickle advice (the class is our own,
    importable code) and artifact download bars; its warnings and errors otherwise still show."""
    pyfunc_log = logging.getLogger("mlflow.pyfunc")
    level = pyfunc_log.level
    pyfunc_log.setLevel(logging.ERROR)
    try:
        with environment(MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false"):
            yield
    finally:
        pyfunc_log.setLevel(level)


def param_value(value: Any) -> str:
    """A parameter as MLflow stores it: text, JSON for anything else, cut to MLflow's limit."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:6000]


def requirements() -> list[str]:
    """Pinned from this environment: MLflow must not infer them (no network here)."""
    return [
        f"mlflow=={mlflow.__version__}",
        f"torch=={torch.__version__.split('+')[0]}",
        f"numpy=={np.__version__}",
    ]


@functools.cache
def code_version() -> str:
    """The package version plus the git commit when run from a checkout (``-dirty`` if edited)."""
    root = Path(__file__).resolve().parents[3]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+{commit}" if commit else __version__
