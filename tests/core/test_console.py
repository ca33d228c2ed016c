"""Log records on one line each when the output is not a terminal."""

import io
import logging
import sys

from kedro.logging import RichHandler

from seq2final.core.console import plain_when_piped


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _with_root_handlers(handlers):
    root = logging.getLogger()
    saved, hook = root.handlers[:], sys.excepthook
    root.handlers[:] = handlers
    return root, saved, hook


def test_piped_output_gets_one_unwrapped_line_per_record():
    out = io.StringIO()
    rich = RichHandler(level=logging.INFO)
    root, saved, hook = _with_root_handlers([rich])
    try:
        plain_when_piped(out)
        assert rich not in root.handlers
        key = "digits-clr-digits.convnet_4.erm+st_b.quick.0123456789/" + "x" * 80
        logging.getLogger("seq2final.test").warning("job %s: done", key)
        assert sys.excepthook is sys.__excepthook__
    finally:
        root.handlers[:], sys.excepthook = saved, hook
    [line] = out.getvalue().splitlines()
    assert line.endswith(f"WARNING seq2final.test: job {key}: done")


def test_a_terminal_keeps_rich():
    rich = RichHandler()
    root, saved, hook = _with_root_handlers([rich])
    try:
        plain_when_piped(_Terminal())
        assert root.handlers == [rich]
    finally:
        root.handlers[:], sys.excepthook = saved, hook
