"""The foundation every layer builds on: errors, registries, validated settings, seeds, plugins."""
