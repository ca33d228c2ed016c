"""``kedro bench``: the project's speed and search-efficiency measurements, as ratios in one run.

Each section measures one claim of ``docs/benchmarks.md`` on this machine and returns figures
with the machine beside them; :mod:`~.command` runs the sections and writes the page and a JSON.
"""
