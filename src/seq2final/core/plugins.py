"""Plugins: a user's own methods, modes, shifts, architectures and sources, outside seq2final.

A plugin is any importable module that registers things in the registries when imported (the
decorators ``method``, ``final_mode``, ``historical_mode``, ``shift_block``, ``effect``,
``architecture`` and ``source``). Two ways in, both loaded before any parameter is checked:

* ``--params plugins:my_lab.methods`` (or ``plugins: [...]`` in the user's ``conf/``): import
  paths, for modules on ``sys.path`` (a project folder, ``PYTHONPATH``);
* installed packages that declare an entry point in the group ``seq2final.plugins``.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from importlib.metadata import entry_points

from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import NameClash

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "seq2final.plugins"


def plugin_paths(value: object) -> list[str]:
    """The ``plugins`` parameter as a list of import paths: one path typed alone
    (``plugins:my_lab``) is a list of one; anything else but strings is one line."""
    paths = [value] if isinstance(value, str) else (value or [])
    if not isinstance(paths, list | tuple) or not all(isinstance(p, str) for p in paths):
        raise Seq2FinalError(
            f"parameter 'plugins' = {value!r}: valid: an import path or a list of them"
        )
    return list(paths)


def load_plugins(import_paths: Iterable[str] = ()) -> list[str]:
    """Import every installed plugin (entry points) and every module of ``import_paths``.

    Importing is idempotent (Python keeps imported modules), so calling this once per check is
    cheap. Returns what was asked for; a plugin that does not import is one line naming it and
    the error, before any work.
    """
    loaded = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            entry.load()
        except NameClash as clash:
            raise _clash(f"plugin entry point '{entry.name}' ({entry.value})", clash) from None
        except Exception as error:  # a broken plugin is the user's to fix, named in one line
            raise Seq2FinalError(
                f"plugin entry point '{entry.name}' ({entry.value}) failed to load: "
                f"{type(error).__name__}: {error}"
            ) from None
        loaded.append(entry.value)
    for path in import_paths:
        try:
            importlib.import_module(path)
        except NameClash as clash:
            raise _clash(f"parameter 'plugins': '{path}'", clash) from None
        except Exception as error:
            raise Seq2FinalError(
                f"parameter 'plugins': cannot import '{path}' ({type(error).__name__}: {error}); "
                "valid: import paths of modules on sys.path (e.g. a folder of the project)"
            ) from None
        loaded.append(path)
    if loaded:
        log.debug("plugins loaded: %s", ", ".join(loaded))
    return loaded


def _clash(plugin: str, clash: NameClash) -> Seq2FinalError:
    """A plugin that registers a name its registry holds already, as one line naming both."""
    return Seq2FinalError(
        f"{plugin} registers {clash.kind} '{clash.name}', which is already registered (built in "
        f"or by a plugin loaded before it); valid: a {clash.kind} name not registered yet"
    )
