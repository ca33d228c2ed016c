"""SLURM's own word on a sweep's batch jobs, and a one-node SLURM started on this machine.

The one-node SLURM is the batch system the suite sweeps on (``tests/sweep/test_slurm.py``) and a
user can try ``kedro sweep --env slurm`` against before a real cluster (docs/scale.md): Debian's
``slurmctld slurmd slurm-client munge`` run as plain processes under one folder, on free ports,
with a munge daemon and key of their own, so they disturb no SLURM or munge already on the host.
Client commands reach it through ``SLURM_CONF``, which the sweep's ``sbatch`` calls and its batch
jobs inherit.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from seq2final.core.errors import Seq2FinalError
from seq2final.sweep.services import free_port, stop_process

PACKAGES = "slurmctld slurmd slurm-client munge"
"""Debian's packages of a one-node SLURM (``apt-get install --no-install-recommends``)."""

PROGRAMS = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "munged", "mungekey")
"""What starting, using and stopping it runs."""

NODE = "seq2final"
"""The one node's SLURM name (its daemon is started as that node, whatever the host's name)."""


def missing_programs() -> list[str]:
    """The programs of a one-node SLURM this machine lacks (none: it can start one)."""
    return [name for name in PROGRAMS if not _program(name)]


def _program(name: str) -> str | None:
    """``name`` on the PATH or in the system folders daemons live in (not on a user's PATH)."""
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/sbin") / name) if p.exists()), None
    )


@dataclass(frozen=True)
class LocalSlurm:
    """A one-node SLURM this process started: its folder, configuration and daemons."""

    folder: Path
    processes: tuple[subprocess.Popen, ...]  # munged, slurmctld, slurmd
    temporary: bool = False  # the folder was made for it, and goes with it

    @property
    def conf(self) -> Path:
        """Its ``slurm.conf``, which every client command reads through ``SLURM_CONF``."""
        return self.folder / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a client command (``sbatch``, ``squeue``) needs in its environment."""
        return {"SLURM_CONF": str(self.conf)}

    def queue(self, columns: str) -> list[str]:
        """Every job it knows, finished ones included (for ``MinJobAge``), one line each in
        ``squeue``'s ``--format`` of ``columns`` (``"%i %T %r"``: id, state, reason)."""
        found = _run([_need("squeue"), "-h", "--states=all", "-o", columns], self.env)
        return [line.strip() for line in found.stdout.splitlines() if line.strip()]

    def stop(self) -> None:
        """Cancel every job and wait until none is left (with ``proctrack/linuxproc`` a job's
        processes would outlive ``slurmd``), then stop the daemons, last started first, each
        by its process id."""
        _run([_need("scancel"), "--full", "--user", "root"], self.env)
        deadline = time.monotonic() + 30
        while _run([_need("squeue"), "-h"], self.env).stdout.strip():
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for process in reversed(self.processes):
            stop_process(process)
        if self.temporary:
            shutil.rmtree(self.folder, ignore_errors=True)


def start_slurm(folder: Path | None = None, cpus: int | None = None) -> LocalSlurm:
    """Start munge, ``slurmctld`` and ``slurmd`` under ``folder`` (a new temporary one when
    None) as one node of ``cpus`` CPUs (the machine's) and 80 % of its memory, in partition
    ``debug``; return once ``sinfo`` shows the node idle.

    Configured as docs/scale.md's recipe says: no cgroups or systemd (``proctrack/linuxproc``,
    ``task/none``), no accounting database (``scontrol show job`` keeps a finished job's state
    for ``MinJobAge`` seconds instead of ``sacct``), cores and memory as consumable resources.
    """
    missing = missing_programs()
    if missing:
        raise Seq2FinalError(
            f"a local SLURM needs {', '.join(missing)}: install Debian's packages "
            f"(apt-get install --no-install-recommends {PACKAGES})"
        )
    if os.geteuid() != 0:
        raise Seq2FinalError("a local SLURM runs its daemons as root (SlurmUser=root)")
    # munged refuses a socket in a folder not everyone may enter, and a key others may read
    temporary = folder is None
    folder = Path(folder or tempfile.mkdtemp(prefix="seq2final-slurm-")).resolve()
    started: list[subprocess.Popen] = []
    try:
        munge = folder / "munge"
        for path in (folder, munge, folder / "state", folder / "spool"):
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o755)
        shutil.chown(munge, "munge", "munge")
        started.append(_start_munge(munge))
        _write_conf(folder, munge / "munge.socket", cpus or os.cpu_count() or 1)
        env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
        for daemon in (["slurmctld", "-D", "-i"], ["slurmd", "-D", "-N", NODE]):
            with (folder / f"{daemon[0]}.out").open("ab") as output:
                command = [_need(daemon[0]), *daemon[1:], "-f", str(folder / "slurm.conf")]
                started.append(
                    subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
                )
        slurm = LocalSlurm(folder, tuple(started), temporary)
        _wait_until_idle(slurm)
    except BaseException:  # nothing left running; the folder stays, for its logs
        for process in reversed(started):
            process.kill()
            process.wait()
        raise
    return slurm


def _start_munge(folder: Path) -> subprocess.Popen:
    key, socket_path = folder / "munge.key", folder / "munge.socket"
    if not key.exists():
        subprocess.run([_need("mungekey"), "--create", f"--keyfile={key}"], user="munge",
                       group="munge", check=True, capture_output=True)  # fmt: skip
    command = [
        _need("munged"), "--foreground", f"--socket={socket_path}", f"--key-file={key}",
        f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
        f"--seed-file={folder / 'munge.seed'}",
    ]  # fmt: skip
    with (folder.parent / "munged.out").open("ab") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, user="munge", group="munge"
        )
    deadline = time.monotonic() + 20
    while not socket_path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise Seq2FinalError(f"munged did not start; see {folder.parent / 'munged.out'}")
        time.sleep(0.1)
    return process


def _write_conf(folder: Path, munge_socket: Path, cpus: int) -> None:
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 * 8 // 10
    host = socket.gethostname().split(".")[0]  # `hostname -s`
    lines = {
        "ClusterName": "seq2final",
        "SlurmctldHost": f"{host}(127.0.0.1)",
        "SlurmctldPort": free_port(),
        "SlurmdPort": free_port(),
        "SlurmUser": "root",
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        "AuthInfo": f"socket={munge_socket}",
        "StateSaveLocation": folder / "state",
        "SlurmdSpoolDir": folder / "spool",
        "SlurmctldPidFile": folder / "slurmctld.pid",
        "SlurmdPidFile": folder / "slurmd.pid",
        "SlurmctldLogFile": folder / "slurmctld.log",
        "SlurmdLogFile": folder / "slurmd.log",
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "JobAcctGatherType": "jobacct_gather/none",
        "AccountingStorageType": "accounting_storage/none",
        "MpiDefault": "none",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core_Memory",
        "DefMemPerCPU": 1000,
        "ReturnToService": 2,
        "MinJobAge": 600,  # a finished job stays in `squeue --states=all` for 10 minutes
    }
    node = (
        f"NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={host} "
        f"CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN"
    )
    partition = "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    text = "".join(f"{k}={v}\n" for k, v in lines.items()) + f"{node}\n{partition}\n"
    (folder / "slurm.conf").write_text(text)


def _wait_until_idle(slurm: LocalSlurm, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, process in zip(("munged", "slurmctld", "slurmd"), slurm.processes, strict=True):
            if process.poll() is not None:
                raise Seq2FinalError(f"{name} exited at start; see {slurm.folder}")
        state = _run([_need("sinfo"), "-h", "-n", NODE, "-o", "%T"], slurm.env).stdout
        if state.strip() == "idle":
            return
        time.sleep(0.5)
    raise Seq2FinalError(f"the SLURM node was not idle within {timeout:.0f} s; see {slurm.folder}")


def job_holding(pattern: str) -> str | None:
    """The SLURM job of a process on this machine that holds open a file matching the glob
    ``pattern`` (a sweep's ``logs/sweep/*/job-*.log``: a worker mid-task), from ``/proc``."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = Path(f"/proc/{pid}/fd")
            if any(fnmatch.fnmatch(os.readlink(fd), pattern) for fd in fds.iterdir()):
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                for entry in environ:
                    if entry.startswith(b"SLURM_JOB_ID="):
                        return entry.split(b"=", 1)[1].decode()
        except OSError:  # a process that ended meanwhile, or one not ours to read
            continue
    return None


def jobs_word(job_ids: list[str], env: dict[str, str] | None = None) -> str:
    """What SLURM says of ``job_ids`` now, on one line: each job's state and, for one that
    waits, why (``squeue``'s reason: ``Resources``, ``Priority``, ``BeginTime``,
    ``PartitionDown``, ...)."""
    if not job_ids:
        return "no batch job of the sweep is in SLURM's queue"
    found = _run(
        [_need("squeue"), "-h", "--states=all", "-j", ",".join(job_ids), "-o", "%i %T %r"], env
    )
    if found.returncode:
        return f"squeue failed: {(found.stderr.strip().splitlines() or ['?'])[-1]}"
    rows = [line.split(maxsplit=2) for line in found.stdout.splitlines() if line.strip()]
    if not rows:
        return f"SLURM no longer lists the sweep's jobs {', '.join(job_ids)}"
    return "; ".join(
        f"job {row[0]} {row[1]}" + (f" ({row[2]})" if len(row) > 2 and row[2] != "None" else "")
        for row in rows
    )


def _need(name: str) -> str:
    found = _program(name)
    if found is None:
        raise Seq2FinalError(f"SLURM's {name} is not installed ({PACKAGES})")
    return found


def _run(command: list[str], env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
    """A client command's outcome (its failure is the caller's to judge)."""
    return subprocess.run(
        command, env={**os.environ, **(env or {})}, capture_output=True, text=True, check=False
    )
