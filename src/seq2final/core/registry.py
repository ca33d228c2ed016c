"""Named registries for the project's building blocks (sources, shifts, presets, models, ...).

Each concept keeps an explicit :class:`Registry` filled with a decorator, as DomainBed does, but
without global name lookups: code asks the registry object for a name and gets a clear error listing
the valid names when the name is unknown. Registering a name twice is refused, because a silent
override would make results depend on import order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from seq2final.core.errors import UnknownNameError

T = TypeVar("T")


class NameClash(ValueError):
    """A second object under a name a registry holds: which registry, and which name, so a
    plugin's clash with a built-in (or another plugin's) name can be said as such."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"{kind} '{name}' is already registered")
        self.kind = kind
        self.name = name


class Registry(Mapping[str, T], Generic[T]):
    """A read-only mapping from public names to objects, filled by :meth:`register`."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator adding ``obj`` under ``name``; a second object under the same name is refused."""

        def add(obj: T) -> T:
            self.add(name, obj)
            return obj

        return add

    def add(self, name: str, obj: T) -> None:
        """Add ``obj`` under ``name`` (for objects built in a loop rather than defined)."""
        if name in self._entries:
            raise NameClash(self.kind, name)
        self._entries[name] = obj

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.kind} '{name}'; valid: {', '.join(self._entries)}"
            ) from None

    def validate(self, name: str | None) -> str | None:
        """``name`` if registered (``None`` passes through); otherwise the unknown-name error.

        The one check every parameter naming a registry entry goes through (pydantic validators
        call it), so an unknown name always reads the same and lists the same valid names.
        """
        if name is not None:
            self[name]
        return name

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries
