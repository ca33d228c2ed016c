"""kedro-viz builds offline, every pipeline shows, every dataset sits in a layer, nodes are named."""

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from seq2final.core.startup import bootstrap_once


def test_kedro_viz_build_shows_every_pipeline_with_layers_and_named_nodes(project):
    kedro = Path(sys.executable).with_name("kedro")
    environment = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"}
    result = subprocess.run(
        [str(kedro), "viz", "build"], cwd=project, env=environment, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    api = project / "build" / "api"
    bootstrap_once(project)
    from kedro.framework.project import pipelines

    assert {p.name for p in (api / "pipelines").iterdir()} == set(pipelines)
    graph = json.loads((api / "main").read_text())
    data = [n for n in graph["nodes"] if n["type"] == "data"]
    assert data and not [n["name"] for n in data if not n.get("layer")]
    tasks = [n["name"] for n in graph["nodes"] if n["type"] == "task"]
    assert tasks and not [t for t in tasks if "(" in t or "->" in t]  # named, not func([..])


def test_the_readme_links_every_registered_pipeline_as_kedro_viz_opens_one():
    """kedro-viz 12.5 opens a pipeline from ``?pid=`` (it ignores ``?pipeline_id=``): the README
    links each registered pipeline so, and none that is not registered."""
    from kedro.framework.project import pipelines

    bootstrap_once(Path(__file__).resolve().parents[1])
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    linked = set(re.findall(r"http://127\.0\.0\.1:4141/\?pid=(\w+)\)", readme))
    assert linked == set(pipelines) - {"__default__"}
    # the overview first: the full pipeline's nodes alone (kedro-viz's `types` filter)
    assert "http://127.0.0.1:4141/?pid=__default__&types=task)" in readme
    assert "4141/?pipeline_id=" not in readme


def _free_port() -> int:
    """A free port below 49152 (kedro-viz refuses the ephemeral range above it)."""
    for port in random.Random().sample(range(20000, 49000), 50):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise AssertionError("no free port")


def test_make_viz_serve_opens_kedro_viz_on_the_six_steps_and_lists_every_pipeline(
    project, tmp_path
):
    """``kedro viz run`` opens all of ``__default__`` at 30 %, and kedro-viz has no setting for
    the view it opens: ``make viz-serve`` serves it and, once it answers, opens the browser on
    the six pipelines' steps alone and prints each registered pipeline's link."""
    from kedro.framework.project import pipelines

    bootstrap_once(Path(__file__).resolve().parents[1])
    opened = tmp_path / "opened"
    browser = tmp_path / "browser.py"  # what $BROWSER runs: records the address it is given
    browser.write_text(
        f"import pathlib, sys\npathlib.Path({str(opened)!r}).write_text(sys.argv[1])\n"
    )
    port = _free_port()
    tool = Path(__file__).resolve().parents[1] / "tools" / "viz_serve.py"
    environment = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1",
                   "BROWSER": f"{sys.executable} {browser} %s"}  # fmt: skip
    serving = subprocess.Popen(
        [sys.executable, str(tool), "--port", str(port)], cwd=project, env=environment,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not opened.exists() and serving.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(0.5)  # the browser stand-in's write, done
    finally:
        if serving.poll() is None:
            os.killpg(serving.pid, signal.SIGINT)  # Ctrl-C: the tool stops kedro-viz with it
        try:
            output = serving.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            os.killpg(serving.pid, signal.SIGKILL)
            raise
    assert opened.exists(), output
    with socket.socket() as probe:  # kedro-viz stopped with the tool, its port free again
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    assert opened.read_text() == f"http://127.0.0.1:{port}/?pid=__default__&types=task"
    lines = {line.strip() for line in output.splitlines()}
    assert {f"{name}: http://127.0.0.1:{port}/?pid={name}" for name in pipelines
            if name != "__default__"} <= lines, output  # fmt: skip


def test_viz_serve_on_a_port_in_use_stops_in_one_line_before_starting_kedro_viz():
    """kedro-viz would move to the next free port without saying so, and the browser open on
    the other server."""
    tool = Path(__file__).resolve().parents[1] / "tools" / "viz_serve.py"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", _free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, str(tool), "--port", str(port)],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and not done.stdout
    assert (
        done.stderr
        == f"port {port} is in use; give another: --port N (make viz-serve VIZ_PORT=N)\n"
    )
