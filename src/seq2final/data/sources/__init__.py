"""Image sources by name (:data:`SOURCES`); importing this package registers the built-in ones."""

# Registration order is the order users see, the embedded default first.
# isort: off
from seq2final.data.sources import digits, cifar, fashion_mnist, portraits, npz, temporal  # noqa: F401

# isort: on
from seq2final.data.sources.source import (
    SOURCES,
    Source,
    SourceData,
    check_arrays,
    checked_options,
    load_source,
    source,
    sources_with_subpopulations,
    with_subpopulations,
)

__all__ = ["SOURCES", "Source", "SourceData", "check_arrays", "checked_options", "load_source", "source",
           "sources_with_subpopulations", "with_subpopulations"]  # fmt: skip
