"""Configuration: the run parameters' schemas and every check done before any work.

A plugin testing its own mode outside a run needs only the names exported here."""

from seq2final.config.checks import mode_block

__all__ = ["mode_block"]
