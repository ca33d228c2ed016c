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
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import webbrowser
from pathlib import Path

HOST = "127.0.0.1"


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
            listed = json.load(response)["pipelines"]
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return [entry["id"] for entry in listed if entry["id"] != "__default__"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve kedro-viz, opened on the six steps.")
    parser.add_argument("--port", type=int, default=4141)
    parser.add_argument("--no-browser", action="store_true")
    options = parser.parse_args(argv)
    with socket.socket() as probe:  # kedro-viz would move to the next free port unsaid
        if probe.connect_ex((HOST, options.port)) == 0:
            sys.stderr.write(f"port {options.port} is in use; give another: --port N\n")
            return 2
    kedro = Path(sys.executable).with_name("kedro")
    command = [str(kedro), "viz", "run", "--no-browser", "--host", HOST,
               "--port", str(options.port)]  # fmt: skip
    server = subprocess.Popen(command)  # the project in the working directory, as kedro's own
    try:
        while (names := _pipelines(options.port)) is None:
            if server.poll() is not None:
                return server.returncode
            time.sleep(0.5)
        sys.stdout.write(f"kedro-viz, the six pipelines' steps: {overview(options.port)}\n")
        for name in names:
            sys.stdout.write(f"  {name}: {pipeline_link(options.port, name)}\n")
        sys.stdout.flush()
        if not options.no_browser:
            webbrowser.open_new(overview(options.port))
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        return server.wait()


if __name__ == "__main__":
    sys.exit(main())
