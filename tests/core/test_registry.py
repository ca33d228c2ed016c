import pytest

from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry


def test_registry_refuses_duplicates_and_lists_valid_names():
    registry: Registry[int] = Registry("widget")

    @registry.register("a")
    def a():
        return 1

    registry.add("b", 2)
    with pytest.raises(ValueError, match="widget 'a' is already registered"):
        registry.add("a", 3)
    with pytest.raises(Seq2FinalError, match="unknown widget 'c'; valid: a, b"):
        registry["c"]
    assert list(registry) == ["a", "b"] and registry["a"] is a and "b" in registry
