"""Log records a person can read at a terminal and ``grep`` in a file.

Kedro's ``RichHandler`` (``conf/logging.yml``) lays records out for a terminal: a time column,
the message wrapped to the width, the source file on the right. Piped to a file (a cluster job's
log, CI) that width is 80 columns, so every long record is split over lines and a path or a job
key in it can no longer be searched. :func:`plain_when_piped` keeps rich for a person at a
terminal and writes each record on one line otherwise. It swaps the handler after Kedro has
configured logging (the project's settings call it; Kedro loads them for every command), because Kedro 1.7 accepts logging
classes only from ``logging`` and ``kedro.logging`` in ``logging.yml``.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from rich.logging import RichHandler

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def plain_when_piped(stream: TextIO | None = None) -> None:
    """When ``stream`` (standard output) is not a terminal, replace the root logger's rich
    handlers by one plain handler writing one unwrapped line per record to it, at their level,
    and print uncaught tracebacks as Python does."""
    stream = stream or sys.stdout
    if stream.isatty():
        return
    root = logging.getLogger()
    rich = [h for h in root.handlers if isinstance(h, RichHandler)]
    if not rich:
        return
    plain = logging.StreamHandler(stream)
    plain.setLevel(min(h.level for h in rich))
    plain.setFormatter(logging.Formatter(PLAIN_FORMAT))
    for handler in rich:
        root.removeHandler(handler)
    root.addHandler(plain)
    sys.excepthook = sys.__excepthook__  # Kedro's rich tracebacks are boxes 80 columns wide
