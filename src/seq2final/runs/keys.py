"""The keys that name stored states and finished jobs.

A historical state is keyed by everything that determines it, and *not* by the final mode, so
FT, LP-FT, ST-1 and ST-B share one ERM model and every sequential mode shares one step-0 model.
Keys hash the full configuration (search spaces, budget, engine options), the content of the
sequence's data and :data:`TRAINING_SEMANTICS`, so a change anywhere (a replaced ``npz``, a fix
in the training code) never reuses a stale model, and a readable prefix says what the file is. These strings are the
names of files users already have: any change here orphans their finished work.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from seq2final.data.spec import SequenceSpec
from seq2final.runs.plans import STEP0

TRAINING_SEMANTICS = 3
"""The version of what a fit computes from its inputs. Bump it in the same commit as any change
that alters a trained model or a result for unchanged parameters and data (a new default inside a
loop, a fixed bug in an objective), so no stored state or result of the old code is reused.
Version 2: CORAL-T's cross-entropy pooled over the batch's images, as Wild-Time's (docs/methods.md).
Version 3: fits seeded by their key under any budget (``seed_key``), not by their own key."""


def digest(payload: Any) -> str:
    """Ten hex digits of the SHA-256 of ``payload`` as sorted JSON."""
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def key_base(
    spec: SequenceSpec,
    arch: str,
    budget: Mapping[str, Any],
    engine_key: Mapping[str, Any],
    data: str,
) -> dict[str, Any]:
    """What every state and job of one run shares: the sequence (its spec and ``data``, the
    content hash of its stored arrays), architecture, seed, budget, the engine options that change
    what a fit computes and the version of the training code's semantics."""
    return {
        "sequence": spec.key,
        "data": data,
        "semantics": TRAINING_SEMANTICS,
        "arch": arch,
        "seed": spec.seed,
        "budget": dict(budget),
        "engine": dict(engine_key),
    }


def step0_key(base: Mapping[str, Any], budget_name: str, space: Mapping[str, Any]) -> str:
    """The shared step-0 model's key."""
    return f"{STEP0}-{base['arch']}-{budget_name}-{digest({**base, 'space': dict(space)})}"


def state_key(
    base: Mapping[str, Any],
    budget_name: str,
    mode: str,
    config: Mapping[str, Any],
    step0: str | None,
) -> str:
    """A historical state's key: its mode, its YAML block and the step-0 model it starts from."""
    payload = {**base, "mode": mode, "config": dict(config), "step0": step0}
    return f"{mode}-{base['arch']}-{budget_name}-{digest(payload)}"


def grown_state_key(
    base: Mapping[str, Any],
    budget_name: str,
    mode: str,
    config: Mapping[str, Any],
    start: str | None,
    last_step: int,
) -> str:
    """A growing chain's state of steps 0..``last_step`` under a temporal protocol, keyed by the
    whole sequence (``base``) and the steps it saw, not by a view: every view, protocol and
    method that continues the chain at that time shares it. ``start`` is the key of what it
    continues: the previous time's state, or the step-0 model at step 0."""
    payload = {**base, "mode": mode, "config": dict(config), "start": start, "steps": last_step}
    return f"{mode}-{base['arch']}-{budget_name}-0-{last_step}-{digest(payload)}"


def job_key(
    spec: SequenceSpec,
    base: Mapping[str, Any],
    budget_name: str,
    historical: str,
    final: str,
    state: str | None,
    config: Mapping[str, Any],
    warm_start: str | None = None,
) -> str:
    """A job's key: the sequence's readable name, the modes, the budget and a digest of the rest
    (with the key of the job whose model it starts from, if it is warm-started)."""
    slug = spec.key.split("-seed")[0]
    payload = {**base, "state": state, "final": final, "config": dict(config)}
    if warm_start is not None:
        payload["warm_start"] = warm_start
    return f"{slug}.{base['arch']}.{historical}+{final}.{budget_name}.{digest(payload)}"
