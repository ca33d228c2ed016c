"""Shared fixtures: tiny sources made in memory and a throw-away copy of the Kedro project."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from filelock import FileLock
from kedro.config import OmegaConfigLoader

from seq2final.config.checks import CheckedRun, validate_parameters
from seq2final.core.plugins import load_plugins
from seq2final.data.sources import SourceData
from seq2final.data.sources.portraits import write_synthetic_portraits
from seq2final.runs.result_store import ResultStore
from seq2final.runs.sequence_store import SequenceStore
from seq2final.runs.state_store import HistoricalStore
from seq2final.training.tensors import TensorSplit

PROJECT = Path(__file__).resolve().parents[1]

# pytest-xdist runs one worker per core; more threads per worker only oversubscribe the cores,
# and so would the Kedro runs and sweep workers the tests start as processes of their own.
torch.set_num_threads(1)
os.environ["OMP_NUM_THREADS"] = "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``waits`` first. They spend most of their time waiting on processes of their
    own (SLURM jobs, sweep workers, a killed driver); run first, their waits overlap with the
    other workers' computing instead of making the suite's tail (``make test`` runs three
    workers on two cores for them)."""
    items.sort(key=lambda item: item.get_closest_marker("waits") is None)


# One extra of every registry entry (tests/lab_extras.py), registered as a user's plugin would be:
# every test that loops over a registry covers it, and every run of all methods trains it.
load_plugins(["lab_extras"])


def make_source(
    per_class: int = 60,
    per_class_test: int = 20,
    classes: int = 10,
    subclasses: int | None = None,
    seed: int = 0,
) -> SourceData:
    """Random 32×32 images with every class (and sub-class) equally represented."""
    rng = np.random.default_rng(seed)

    def split(count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        labels = np.repeat(np.arange(classes), count)
        subs = (
            np.tile(np.arange(subclasses), len(labels) // subclasses + 1)[: len(labels)]
            if subclasses
            else None
        )
        images = rng.integers(0, 256, size=(len(labels), 3, 32, 32), dtype=np.uint8)
        return images, labels.astype(np.int64), subs

    x_train, y_train, sub_train = split(per_class)
    x_test, y_test, sub_test = split(per_class_test)
    return SourceData(
        name="synthetic",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        class_names=tuple(f"c{i}" for i in range(classes)),
        sub_train=sub_train,
        sub_test=sub_test,
        subclass_names=tuple(tuple(f"c{i}s{j}" for j in range(subclasses)) for i in range(classes))
        if subclasses
        else None,
        fingerprint=f"synthetic-{seed}",
    )


@pytest.fixture(scope="session")
def project_parameters() -> dict:
    """The project's parameters as a run in the ``test`` environment sees them (do not mutate)."""
    loader = OmegaConfigLoader(
        str(PROJECT / "conf"),
        base_env="base",
        default_run_env="test",
        merge_strategy={"parameters": "soft"},
    )
    return dict(loader["parameters"])


@pytest.fixture
def checked_run(project_parameters) -> Callable[..., CheckedRun]:
    """The project's parameters with some replaced, checked as a run checks them (the object a
    run plans from)."""

    def check(**replaced: object) -> CheckedRun:
        return validate_parameters({**project_parameters, **replaced})

    return check


@pytest.fixture
def source() -> SourceData:
    return make_source()


def end_mlflow_runs() -> None:
    import mlflow

    while mlflow.active_run():
        mlflow.end_run()


def set_tracking_uri(project: Path, uri: str) -> None:
    """Point the copied project's MLflow at ``uri``.

    kedro-mlflow takes the URI from ``mlflow.yml`` (over ``MLFLOW_TRACKING_URI``), and MLflow
    caches one database engine per URI string, so each test gets its own absolute URI.
    """
    (project / "conf" / "test" / "mlflow.yml").write_text(
        f"server:\n  mlflow_tracking_uri: {uri}\n"
    )


def copy_project(target: Path) -> Path:
    """A copy of the project's configuration in ``target``, with its own MLflow database.

    Pipelines run there write their data, and MLflow its database and artifacts, under ``target``.
    """
    shutil.copytree(PROJECT / "conf", target / "conf", ignore=shutil.ignore_patterns("local"))
    (target / "conf" / "local").mkdir()
    shutil.copy(PROJECT / "pyproject.toml", target / "pyproject.toml")
    (target / "data").mkdir()
    (target / "logs").mkdir()  # conf/logging.yml writes logs/info.log
    (target / "src").mkdir()  # the package itself is imported from the installed project
    set_tracking_uri(target, f"sqlite:///{target / 'mlflow.db'}")
    return target


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """:func:`copy_project` in a temporary folder, made the working directory."""
    copy_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KEDRO_DISABLE_TELEMETRY", "1")
    end_mlflow_runs()
    yield tmp_path
    end_mlflow_runs()  # a session that failed before its hooks ran may leave a run open


def shared_project(
    name: str,
    tmp_path_factory: pytest.TempPathFactory,
    worker_id: str,
    build: Callable[[Path], object],
) -> Path:
    """A project copy called ``name`` that ``build`` fills once for the whole test run: under
    xdist the workers share it through a lock in their common temporary folder (whoever comes
    second waits and reads it), because xdist's groups (``--dist loadgroup``) do not keep tests
    on one worker with this pytest. Tests only read it."""
    root = tmp_path_factory.getbasetemp()
    shared = root if worker_id == "master" else root.parent
    folder = shared / name
    with FileLock(str(shared / f"{name}.lock")):
        if not (folder / ".complete").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build interrupted earlier
            copy_project(folder)
            with pytest.MonkeyPatch.context() as patch:
                patch.chdir(folder)
                patch.setenv("KEDRO_DISABLE_TELEMETRY", "1")
                build(folder)
                end_mlflow_runs()
            (folder / ".complete").touch()
    return folder


# Every method of the registries (the plugins' too) trained once for the suite: on a tiny
# sequence, with MLflow tracking on, then evaluated and visualised. The golden test compares its
# records with the recorded ones, the end-to-end test of the methods checks what each job stored,
# and the visualize and notebook tests read its figures and runs. Its pipelines and parameters are
# the golden records' (benchmarks/golden_records.py runs the same file).
EVERY_METHOD_RUN = json.loads((PROJECT / "tests/golden/every_method_smoke/run.json").read_text())


@pytest.fixture(scope="session")
def every_method_params() -> dict:
    return EVERY_METHOD_RUN["params"]


@pytest.fixture(scope="session")
def every_method_run(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A project after every pipeline with every method, built once for the whole run."""
    return shared_project(
        "every_method_run",
        tmp_path_factory,
        worker_id,
        lambda folder: run_session(
            folder, EVERY_METHOD_RUN["pipelines"], EVERY_METHOD_RUN["params"]
        ),
    )


@dataclass(frozen=True)
class ProjectStores:
    """A project's stores, read where ``conf/base/catalog.yml`` puts them."""

    sequences: SequenceStore
    states: HistoricalStore
    results: ResultStore


def open_stores(project: Path) -> ProjectStores:
    return ProjectStores(
        SequenceStore(project / "data/03_primary/sequences"),
        HistoricalStore(project / "data/06_models/historical"),
        ResultStore(
            project / "data/07_model_output/results",
            project / "data/06_models/final",
            project / "data/07_model_output/curves",
        ),
    )


@pytest.fixture(scope="session")
def stores_of():
    """``open_stores`` as a fixture: ``stores_of(project).results`` and so on."""
    return open_stores


@pytest.fixture(scope="session")
def copy_project_to():
    """``copy_project`` as a fixture, for module-scoped fixtures that set up a project of their own."""
    return copy_project


@pytest.fixture
def point_mlflow_at():
    """``set_tracking_uri`` as a fixture, for tests that give the project another tracking URI."""
    return set_tracking_uri


@pytest.fixture(scope="session")
def write_yearbook():
    """Writes a synthetic Yearbook folder with the real layout (there is no Portraits data here)."""
    return write_synthetic_portraits


@pytest.fixture
def source_factory():
    """``make_source`` as a fixture, for tests that need a source of another shape."""
    return make_source


def run_session(project: Path, pipelines: list[str], runtime: dict) -> dict:
    """Run ``pipelines`` of the copied project in a fresh Kedro session (env ``test``)."""
    from kedro.framework.session import KedroSession

    from seq2final.core.startup import bootstrap_once

    end_mlflow_runs()  # a failed session may leave a run open; each test starts clean
    bootstrap_once(project)
    with KedroSession.create(project_path=project, env="test", runtime_params=runtime) as session:
        return session.run(pipeline_names=pipelines)


@pytest.fixture
def run_kedro(project: Path):
    """``run_session`` bound to the ``project`` fixture's copy."""
    return lambda pipelines, **runtime: run_session(project, pipelines, runtime)


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    """A real PostgreSQL server for the session, started here and stopped at the end (never
    skipped: CI installs Debian's postgresql when a machine lacks it, see .ci/run)."""
    from seq2final.sweep.services import start_postgres

    server = start_postgres(tmp_path_factory.mktemp("postgres"), databases=("optuna", "mlflow"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def run_kedro_in():
    """``run_session`` as a fixture, for a project copy other than the ``project`` fixture's."""
    return run_session


def learnable_split(images=120, seed=0, shuffled=False):
    """Learnable 16x16 images (each class its own brightness per channel, plus noise):
    predictions are far from ties, so float noise does not flip them. ``shuffled`` labels make
    accuracy wander, so that patience stops fits early."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(images) % 10
    levels = torch.stack([y * 25, (9 - y) * 25, (y * 7 % 10) * 25], 1).float()
    noise = torch.randint(-30, 30, (images, 3, 16, 16), generator=g).float()
    x = (levels[:, :, None, None] + noise).clamp(0, 255).to(torch.uint8)
    return TensorSplit(x, y[torch.randperm(images, generator=g)] if shuffled else y)


@pytest.fixture
def learnable():
    """:func:`learnable_split` as a fixture."""
    return learnable_split


@pytest.fixture
def float64() -> Iterator[None]:
    """One thread, float64. In float32 a parameter whose exact gradient is zero (a bias right
    before a BatchNorm) gets float-noise gradients of ~1e-9, which Adam normalises into steps of
    ±lr in a direction that depends on the summation order, so a stacked fit and a single one
    part ways there (their validation losses by ~1e-3) while computing the same thing. In
    float64 that noise is ~1e-17, far below Adam's eps, so the comparison can be tight."""
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_num_threads(threads)
    torch.set_default_dtype(dtype)
