"""Seeds derived from names, so every draw depends only on what it is for.

A run, a resumed run and a run that trains its jobs in another order draw the same numbers,
because a seed is a digest of the parts that name the draw (the run seed, the study, the stage),
never a position in a shared random stream.
"""

from __future__ import annotations

import hashlib


def derived_seed(*parts: object) -> int:
    """A seed that depends on nothing but ``parts``: runs and resumed runs draw the same numbers."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
    return int(digest[:8], 16) % (2**31 - 1)
