"""Kedro's project start-up, once per process, and the process's end."""

import atexit
import gc

import pytest
from kedro.framework import project as kedro_project
from kedro.framework import startup

from seq2final.core.startup import bootstrap_once, exit_without_collecting


def test_a_package_is_configured_once_per_process_and_a_sessions_pipelines_cleared(
    project, copy_project_to, tmp_path, monkeypatch
):
    """Configuring reads the settings through dynaconf, about a second each time
    (src/seq2final/core/startup.py)."""
    bootstrap_once(project)  # whatever ran before in this process, configured now
    configured = []
    monkeypatch.setattr(startup, "configure_project", configured.append)
    kedro_project.pipelines.set_requested(["build_sequences"])  # as a finished session leaves it
    bootstrap_once(copy_project_to(tmp_path / "other"))  # another folder of the same package
    assert configured == []
    assert "visualize" in set(kedro_project.pipelines)  # every pipeline again, as configuring does
    monkeypatch.setattr(kedro_project, "PACKAGE_NAME", None)  # a process that configured none
    bootstrap_once(project)
    assert configured == ["seq2final"]


def test_a_folder_that_is_no_project_gets_kedros_message(tmp_path):
    with pytest.raises(RuntimeError, match="Could not find the project configuration file"):
        bootstrap_once(tmp_path)


def test_at_exit_the_heap_is_frozen_out_of_the_collectors_reach(monkeypatch):
    at_exit = []
    monkeypatch.setattr(atexit, "register", at_exit.append)
    exit_without_collecting()
    [handler] = at_exit
    assert gc.get_freeze_count() == 0
    try:
        handler()
        assert gc.get_freeze_count() > 1000  # every object this process holds
    finally:
        gc.unfreeze()
