"""One worker per key: leases on historical states and jobs, across processes and machines.

A sweep's workers and a hand-typed ``kedro run`` may ask for the same historical state (ERM is
shared by FT, LP-FT, ST-1 and ST-B) or the same job at once. Before training a key, a store takes
its lease: a file in the store's ``.leases`` folder, written whole and linked into place (the
link fails when the name exists, atomically on local file systems and NFS), naming its holder. The holder touches it every ``heartbeat`` seconds
while it works. Anyone else waits, and reuses the result once it is stored. A lease is broken (and
taken over) when its holder is gone: at once when the holder ran on this host and its process no
longer exists (a ``kill -9``), otherwise when it has not been touched for ``ttl`` seconds.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from seq2final.core.files import PARTIAL
from seq2final.core.liveness import ProcessToken, current_process

log = logging.getLogger(__name__)

LEASES = ".leases"
"""The folder of a store's leases (hidden, so no listing mistakes it for a key)."""


class Lease:
    """An exclusive, expiring claim on ``key`` among everyone who shares ``folder``."""

    def __init__(self, folder: Path, key: str, ttl: float = 120.0, heartbeat: float = 15.0) -> None:
        self.path = Path(folder) / LEASES / f"{key}.lease"
        self.key = key
        self.ttl = ttl
        self.heartbeat = heartbeat
        self.token = str(current_process())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def holder(self) -> tuple[str, float] | None:
        """The current holder's token and the age of its last heartbeat, or None when free."""
        found = self._read()
        return None if found is None else found[:2]

    def _read(self) -> tuple[str, float, int] | None:
        """Holder, heartbeat age and inode of the lease file; None when there is none."""
        try:
            stat = self.path.stat()
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        try:
            token = str(json.loads(text)["holder"])
        except (ValueError, KeyError, TypeError):  # never written by us: judged by its age only
            token = "unreadable"
        return token, time.time() - stat.st_mtime, stat.st_ino

    def try_acquire(self) -> bool:
        """Take the lease if it is free or its holder is gone; False while someone holds it.

        The lease is written whole under a temporary name and linked into place (``link`` fails
        when the name exists, atomically, as ``O_EXCL`` does), so no one ever sees it empty.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f"{PARTIAL}{uuid.uuid4().hex[:12]}-{self.path.name}")
        content = {"holder": self.token, "key": self.key, "since": time.time()}
        try:
            with partial.open("w") as handle:
                json.dump(content, handle)
                handle.flush()
                os.fsync(handle.fileno())
            for _ in range(2):  # a second try after breaking a dead holder's lease
                try:
                    os.link(partial, self.path)
                except FileExistsError:
                    if not self._break_if_dead():
                        return False
                    continue
                self._start_heartbeat()
                return True
            return False
        finally:
            partial.unlink(missing_ok=True)

    def _break_if_dead(self) -> bool:
        """Remove the lease when its holder is gone; True when it was (or is now) free."""
        found = self._read()
        if found is None:
            return True
        token, age, inode = found
        holder = ProcessToken.parse(token)
        alive = holder.alive() if holder else None
        if alive is not False and age <= self.ttl:
            return False
        # Rename it aside first: of several processes breaking the same lease, one wins.
        aside = self.path.with_name(f"{PARTIAL}{uuid.uuid4().hex[:12]}-{self.path.name}")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return True
        if aside.stat().st_ino != inode:  # a new holder's lease, taken in between: give it back
            try:
                os.link(aside, self.path)
            except FileExistsError:
                log.warning("lease %s changed hands while being broken", self.path)
            aside.unlink(missing_ok=True)
            return False
        log.warning(
            "lease on %s held by %s broken (%s)",
            self.key,
            token,
            "its process is gone" if alive is False else f"no heartbeat for {age:.0f} s",
        )
        aside.unlink(missing_ok=True)
        return True

    def _start_heartbeat(self) -> None:
        self._stop.clear()

        def beat() -> None:
            while not self._stop.wait(self.heartbeat):
                try:
                    os.utime(self.path)
                except OSError as error:
                    log.warning("could not renew lease %s: %s", self.path, error)

        self._thread = threading.Thread(target=beat, name=f"lease {self.key}", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop the heartbeat and remove the lease if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        found = self.holder()
        if found is not None and found[0] == self.token:
            self.path.unlink(missing_ok=True)


@contextmanager
def claim(
    folder: Path,
    key: str,
    done: Callable[[], bool],
    poll: float = 2.0,
    ttl: float = 120.0,
) -> Iterator[bool]:
    """Hold ``key``'s lease for the block, waiting while another process holds it.

    Yields True with the lease held (the caller checks ``done`` again and does the work), or
    False when ``done()`` became true while waiting (the other process stored it: reuse it).
    """
    lease = Lease(folder, key, ttl=ttl, heartbeat=min(15.0, ttl / 4))
    announced = False
    while not lease.try_acquire():
        if done():
            yield False
            return
        if not announced:
            found = lease.holder()
            log.info("waiting for %s to finish %s", found[0] if found else "another process", key)
            announced = True
        time.sleep(poll)
    try:
        yield True
    finally:
        lease.release()
