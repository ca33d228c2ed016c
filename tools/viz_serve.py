"""Serve kedro-viz and open it where a person can read it (``make viz-serve``).

``kedro viz run`` opens the whole ``__default__`` fitted to the window: at 1600×1000 that is
30 % zoom, and kedro-viz has no project setting for the view it opens (README, Development).
This serves it the same way and, once it answers, opens the view the README gives first, the
six pipelines' steps alone (``?pid=__default__&types=task``), printing each registered
pipeline's own link (``?pid=<name>``).

    .venv/bin/python tools/viz_serve.py [--port 4141] [--no-browser]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import webbrowser
from pathlib import Path

HOST = "127.0.0.1"
START_SECONDS = 300  # kedro-viz reads the whole project before it answers


def overview(port: int) -> str:
    """The link kedro-viz opens on: the full pipeline's nodes alone (kedro-viz's ``types``)."""
    return f"http://{HOST}:{port}/?pid=__default__&types=task"


def pipeline_link(port: int, name: str) -> str:
    """One registered pipeline's view (kedro-viz 12.5 reads ``?pid=``, not ``?pipeline_id=``)."""
    return f"http://{HOST}:{port}/?pid={name}"


def _pipelines(port: int) -> list[str] | None:
    """The registered pipelines kedro-viz serves, ``__default__`` aside; ``None`` until it
    answers (it reads the whole project first: tens of seconds on two cores)."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/api/main", timeout=5) as response:
            listed = json.load(response).get("pipelines", [])
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None
    return [entry["id"] for entry in listed if entry.get("id") not in (None, "__default__")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve kedro-viz, opened on the six steps.")
    parser.add_argument("--port", type=int, default=4141)
    parser.add_argument("--no-browser", action="store_true")
    options = parser.parse_args(argv)
    with socket.socket() as probe:  # kedro-viz would move to the next free port unsaid
        if probe.connect_ex((HOST, options.port)) == 0:
            sys.stderr.write(f"port {options.port} is in use; give another: --port N "
                             "(make viz-serve VIZ_PORT=N)\n")  # fmt: skip
            return 2
    kedro = Path(sys.executable).with_name("kedro")
    command = [str(kedro), "viz", "run", "--no-browser", "--host", HOST,
               "--port", str(options.port)]  # fmt: skip
    # a session of its own: kedro-viz serves from a child process, which stopping the kedro
    # process alone would leave holding the port; the whole group is stopped below
    server = subprocess.Popen(command, start_new_session=True)
    try:
        deadline = time.monotonic() + START_SECONDS
        while (names := _pipelines(options.port)) is None:
            if server.poll() is not None:
                return server.returncode
            if time.monotonic() > deadline:
                sys.stderr.write(f"kedro-viz did not answer on port {options.port} in "
                                 f"{START_SECONDS} s\n")  # fmt: skip
                return 1
            time.sleep(0.5)
        sys.stdout.write(f"kedro-viz, the six pipelines' steps: {overview(options.port)}\n")
        for name in names:
            sys.stdout.write(f"  {name}: {pipeline_link(options.port, name)}\n")
        sys.stdout.flush()
        if not options.no_browser:
            webbrowser.open_new(overview(options.port))
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        _stop(server)


def _stop(server: subprocess.Popen[bytes]) -> None:
    """kedro-viz and the process it serves from, whatever ended this one."""
    if server.poll() is not None:
        return
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
