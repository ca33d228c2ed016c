"""Progress through a run: item k of N, its fit, time left; lines when nobody watches."""

import io
import logging

import pytest
from rich.console import Console

from seq2final.core import progress as progress_module
from seq2final.core.progress import Progress, clock, current


@pytest.fixture
def lines(caplog):
    caplog.set_level(logging.INFO, logger="seq2final.core.progress")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "seq2final.core.progress"]


@pytest.fixture
def ticking(monkeypatch):
    """A clock that moves only when told."""
    now = [100.0]
    monkeypatch.setattr(progress_module.time, "perf_counter", lambda: now[0])

    def advance(seconds: float) -> None:
        now[0] += seconds

    return advance


def test_plain_lines_name_each_item_its_time_and_what_remains(lines, ticking):
    with Progress("job", ["erm", "ft", "st_1", "sft"], live=False) as progress:
        with progress.item("erm") as shown:
            ticking(30)
            shown.note = "test 0.812"
        progress.reused()  # ft finished in an earlier run: no time, not in the estimate
        with progress.item("st_1"):
            ticking(10)
    assert lines() == [
        "job 1/4 erm: started",
        "job 1/4 erm: done in 30.0 s (test 0.812); 0:30 elapsed, about 1:30 left",
        "job 3/4 st_1: started",
        "job 3/4 st_1: done in 10.0 s; 0:40 elapsed, about 0:20 left",
    ]


def test_a_slow_item_eats_only_into_its_own_share_of_the_estimate(ticking):
    with Progress("job", ["a", "b", "c", "d"], live=False) as progress:
        with progress.item("a"):
            ticking(10)
        with progress.item("b"):
            assert progress.remaining() == 30.0  # just started: b, c and d at 10 s each
            ticking(4)
            assert progress.remaining() == 26.0
            ticking(86)  # b runs far past the mean: c and d still take 10 s each
            assert progress.remaining() == 20.0


def test_no_estimate_before_an_item_is_trained(ticking):
    with Progress("job", ["a", "b"], live=False) as progress:
        assert progress.remaining() is None
        assert progress.times() == "0:00 elapsed"


def test_fits_report_to_the_current_progress_and_nowhere_outside_it():
    assert current().label == ""  # outside a run: a reporter that shows nothing
    with current().fit("final"):
        current().trials(0, 2)
        current().trial()
        current().epoch()
    with Progress("job", ["ft"], live=False) as progress, progress.item("ft"):
        assert current() is progress and current().label == "ft"
        with current().fit("final"):
            current().trials(1, 3)
            current().trial()
            current().epochs(8)
            current().epoch()
            current().epoch(2)
            assert progress._fits[-1].describe() == "final · trial 2/3 · epoch 3/8"
        assert not progress._fits
    assert current().label == ""


def test_the_live_display_shows_item_fit_and_times(ticking):
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    with Progress("job", ["erm", "ft"], live=True, console=console) as progress:
        with progress.item("erm"):
            ticking(5)
        with progress.item("ft"), current().fit("final"):
            ticking(2)
            current().trials(0, 2)
            current().trial()
            current().epochs(8)
            current().epoch()
            progress._display.refresh()
    shown = screen.getvalue()
    assert "ft · final · trial 1/2 · epoch 1/8" in shown
    assert "1/2" in shown and "0:07 elapsed, about 0:03 left" in shown


@pytest.mark.parametrize(("seconds", "text"), [(0, "0:00"), (59.6, "1:00"), (3725, "1:02:05")])
def test_clock(seconds, text):
    assert clock(seconds) == text
