"""Leases: one process per key, a dead holder's lease broken, a live one's never."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from seq2final.core.liveness import ProcessToken, current_process
from seq2final.runs.leases import Lease, claim


def test_a_lease_is_exclusive_until_released(tmp_path):
    first, second = Lease(tmp_path, "job"), Lease(tmp_path, "job")
    assert first.try_acquire()
    assert not second.try_acquire()  # this process is alive and the lease fresh
    first.release()
    assert not first.path.exists()
    assert second.try_acquire()
    second.release()


def test_a_killed_holder_on_this_host_loses_its_lease_at_once(tmp_path):
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from seq2final.runs.leases import Lease
        assert Lease(Path({str(tmp_path)!r}), "state", ttl=3600).try_acquire()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    assert subprocess.run([sys.executable, "-c", script]).returncode == -signal.SIGKILL
    lease = Lease(tmp_path, "state", ttl=3600)
    holder, age = lease.holder()
    assert ProcessToken.parse(holder).alive() is False and age < 3600
    assert lease.try_acquire()  # broken although far from expiring
    assert json.loads(lease.path.read_text())["holder"] == str(current_process())
    lease.release()


def test_a_remote_holder_keeps_its_lease_while_it_beats_and_loses_it_after_the_ttl(tmp_path):
    lease = Lease(tmp_path, "job", ttl=60)
    lease.path.parent.mkdir(parents=True)
    lease.path.write_text(json.dumps({"holder": "elsewhere:123:456", "key": "job"}))
    assert not lease.try_acquire()  # another host: only its heartbeat can tell
    stale = time.time() - 61
    os.utime(lease.path, (stale, stale))
    assert lease.try_acquire()
    lease.release()


def test_the_holder_beats_and_a_waiter_reuses_what_it_stored(tmp_path):
    holder = Lease(tmp_path, "k", ttl=1.0, heartbeat=0.1)
    assert holder.try_acquire()
    os.utime(holder.path, (0, 0))  # as if old; the heartbeat must renew it
    time.sleep(0.4)
    assert holder.holder()[1] < 1.0
    assert not Lease(tmp_path, "k", ttl=1.0).try_acquire()

    stored = threading.Event()
    threading.Timer(0.2, stored.set).start()  # the holder stores its result, still holding
    with claim(tmp_path, "k", done=stored.is_set, poll=0.01) as claimed:
        assert not claimed  # the waiter reuses the stored result and trains nothing
    assert holder.path.exists()

    threading.Timer(0.2, holder.release).start()  # the holder leaves without storing (it failed)
    with claim(tmp_path, "k", done=lambda: False, poll=0.01) as claimed:
        assert claimed  # the waiter takes over
        assert json.loads(holder.path.read_text())["holder"] == str(current_process())
    assert not holder.path.exists()


def test_an_unreadable_lease_is_respected_while_fresh_and_broken_once_old(tmp_path):
    lease = Lease(tmp_path, "job", ttl=60)
    lease.path.parent.mkdir(parents=True)
    lease.path.write_text("")  # as a crash in the middle of writing one would leave it
    assert lease.holder()[0] == "unreadable"
    assert not lease.try_acquire()
    old = time.time() - 61
    os.utime(lease.path, (old, old))
    assert lease.try_acquire()
    assert json.loads(lease.path.read_text())["holder"] == str(current_process())
    lease.release()
    assert list(lease.path.parent.iterdir()) == []  # no temporary file left either
