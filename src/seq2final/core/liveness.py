"""Who is working on something, and whether that process still lives.

Leases and tuning trials record the process that holds them as a token (host, process id and the
process's start time, so a recycled id is not mistaken for the old process). On the same host a
token can be checked at once, which is how a ``kill -9`` is noticed without waiting for a lease to
time out; on another host only the holder's heartbeat can tell.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessToken:
    """A process, named so that it can be recognised (and checked) from another process."""

    host: str
    pid: int
    started: str

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.started}"

    @classmethod
    def parse(cls, text: str) -> ProcessToken | None:
        host, _, rest = text.rpartition(":")
        host, _, pid = host.rpartition(":")
        try:
            return cls(host, int(pid), rest)
        except ValueError:
            return None

    def alive(self) -> bool | None:
        """True or False on this host; None (cannot tell) for a process on another host."""
        if self.host != socket.gethostname():
            return None
        return _start_time(self.pid) == self.started


def current_process() -> ProcessToken:
    """This process's token."""
    return ProcessToken(socket.gethostname(), os.getpid(), _start_time(os.getpid()) or "?")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or "?" where unknown; None
    when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rpartition(")")[2].split()
        return fields[19]  # field 22 of proc(5), counted after the command name
    except FileNotFoundError:
        return None
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return "?"
