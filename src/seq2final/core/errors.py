"""Errors a user can fix.

Every problem caused by input (a name, a spec string, a path, an array) is raised as a
:class:`Seq2FinalError` whose message is one line naming the bad value and what is valid. The CLI
prints that line instead of a traceback, so users see what to change rather than where we noticed.
"""

from __future__ import annotations


class Seq2FinalError(ValueError):
    """A problem with the user's input, reported as a single line."""


class MissingPrerequisiteError(Seq2FinalError):
    """An earlier pipeline's output is missing; the message names the command that makes it."""


class UnknownNameError(Seq2FinalError, KeyError):
    """A name missing from a registry; a ``KeyError`` too, so ``Mapping.get`` and ``in`` work."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
