"""The shared services of a sweep, started locally: PostgreSQL and an MLflow server.

On a cluster these run on a host every worker reaches (``docs/scale.md``); on a laptop,
``make services`` (``kedro services start``) starts both here, and the tests start their own on
free ports.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from seq2final.core.errors import Seq2FinalError

SERVICES = Path(".services")
"""Where ``make services`` keeps the database cluster, logs and process ids (git-ignored)."""


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _postgres_binary(name: str) -> str:
    """A PostgreSQL program: on the PATH, or in Debian's versioned folder."""
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).exists():
            return str(folder / name)
    raise Seq2FinalError(
        f"PostgreSQL's {name} is not installed; install Debian's postgresql (apt-get install "
        "postgresql) or point tuning.storage and MLflow at an existing server"
    )


def _as_postgres_user(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root; run it as the system's postgres user then."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@dataclass(frozen=True)
class Postgres:
    """A PostgreSQL server this process started: its folder, port and database URL."""

    folder: Path
    port: int
    database: str = "seq2final"

    @property
    def url(self) -> str:
        """The SQLAlchemy URL Optuna and MLflow take (psycopg 3 driver)."""
        return self.url_of(self.database)

    def url_of(self, database: str) -> str:
        """The URL of another database of this server (``optuna``, ``mlflow``)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        subprocess.run(
            _as_postgres_user([_postgres_binary("pg_ctl"), "stop", "-D", str(self.folder / "data"),
                               "-m", "fast"]),
            capture_output=True, check=False,
        )  # fmt: skip


def start_postgres(
    folder: Path, port: int | None = None, databases: tuple[str, ...] = ()
) -> Postgres:
    """Initialise (once) and start a PostgreSQL cluster under ``folder``, trusting local TCP
    connections, with the ``seq2final`` database and any ``databases`` created."""
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        if not _reachable_by_postgres(folder):  # e.g. under a private (0700) temporary folder
            folder = Path(tempfile.mkdtemp(prefix="seq2final-postgres-"))
        shutil.chown(folder, "postgres", "postgres")
    data = folder / "data"
    if not (data / "PG_VERSION").exists():
        _run([_postgres_binary("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
              "-E", "UTF8"], "initdb")  # fmt: skip
    server = Postgres(folder, port or free_port())
    options = f"-p {server.port} -k {folder} -c listen_addresses=127.0.0.1"
    _run([_postgres_binary("pg_ctl"), "start", "-D", str(data), "-w", "-t", "60",
          "-l", str(folder / "postgres.log"), "-o", options], "pg_ctl start")  # fmt: skip
    for name in (server.database, *databases):
        done = subprocess.run(
            _as_postgres_user([_postgres_binary("createdb"), "-h", "127.0.0.1", "-p",
                               str(server.port), "-U", "postgres", name]),
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode and "already exists" not in done.stderr:
            raise Seq2FinalError(f"createdb {name} failed: {done.stderr.strip()}")
    return server


def _reachable_by_postgres(folder: Path) -> bool:
    """Whether the postgres user can enter ``folder`` (every parent must let it through)."""
    check = _as_postgres_user(["test", "-x", str(folder)])
    return subprocess.run(check, capture_output=True, check=False).returncode == 0


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(_as_postgres_user(command), capture_output=True, text=True, check=False)
    if done.returncode:
        reason = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:]
        raise Seq2FinalError(f"{what} failed: {' '.join(reason)}")


def start_mlflow_server(
    backend: str,
    artifacts: Path,
    port: int | None = None,
    host: str = "127.0.0.1",
    log_path: Path | None = None,
) -> tuple[subprocess.Popen, str]:
    """Start ``mlflow server`` on ``backend`` (SQLite or PostgreSQL URL), artifacts written by
    the clients under ``artifacts``; return the process and its URL once it answers."""
    port = port or free_port()
    command = [
        str(Path(sys.executable).with_name("mlflow")), "server",
        "--backend-store-uri", backend,
        "--default-artifact-root", str(artifacts.resolve()),
        "--no-serve-artifacts",
        "--host", host, "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log_path = log_path or artifacts.parent / "mlflow-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as output:
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    shown = "127.0.0.1" if host in ("0.0.0.0", "127.0.0.1") else host
    url = f"http://{shown if host != '0.0.0.0' else socket.getfqdn()}:{port}"
    _wait_until_up(f"http://127.0.0.1:{port}" if host == "0.0.0.0" else url, server, log_path)
    return server, url


def _wait_until_up(
    url: str, server: subprocess.Popen, log_path: Path, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise Seq2FinalError(f"the MLflow server exited at start; see {log_path}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise Seq2FinalError(f"the MLflow server did not answer within {timeout:.0f} s; see {log_path}")


def stop_process(process: subprocess.Popen) -> None:
    """Terminate a server we started, killing it if it does not stop."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def start_local_services() -> tuple[Postgres, str, str]:
    """PostgreSQL (port 5433) and an MLflow server on it (port 5001) under ``.services/``; the
    database, the Optuna storage URL and the MLflow tracking URI."""
    database = start_postgres(SERVICES / "postgres", port=5433, databases=("optuna", "mlflow"))
    server, url = start_mlflow_server(
        database.url_of("mlflow"), Path("mlruns"), port=5001,
        log_path=SERVICES / "mlflow.log",
    )  # fmt: skip
    (SERVICES / "mlflow.pid").write_text(str(server.pid))
    return database, database.url_of("optuna"), url


def stop_local_services() -> None:
    """Stop what :func:`start_local_services` started."""
    pid_file = SERVICES / "mlflow.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), 15)
        pid_file.unlink()
    if (SERVICES / "postgres" / "data").exists():
        Postgres(SERVICES / "postgres", 0).stop()
