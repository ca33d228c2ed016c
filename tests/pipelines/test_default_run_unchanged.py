"""Today's default run gives the records it gave before the package was split into layers.

``tests/golden/default_run_smoke.json`` holds the sequence hash and every result record (keys,
metrics, chosen hyper-parameters, every fit and trial; not wall time) of the project's default
parameters with ``budget: smoke``, as produced by the code before the move. Same seed, same code
paths: the same bytes. A deliberate change of results regenerates it (see
``benchmarks/golden_records.py``) and says why in its commit.
"""

import json
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "default_run_smoke.json"


def test_the_default_run_gives_the_recorded_sequence_and_records(run_kedro, project):
    golden = json.loads(GOLDEN.read_text())
    run_kedro(
        ["build_sequences", "pretrain_historical", "adapt_final"],
        budget="smoke",
        mlflow={"enabled": False},
    )
    manifests = sorted((project / "data/03_primary/sequences").glob("*/manifest.json"))
    hashes = {m["key"]: m["content_hash"] for m in map(json.loads, map(Path.read_text, manifests))}
    assert hashes == golden["sequences"]
    records = {}
    for path in (project / "data/07_model_output/results").glob("*.json"):
        record = json.loads(path.read_text())
        record.pop("wall_seconds")
        records[record["job_key"]] = record
    assert set(golden["records"]) <= set(records)  # plugins registered by tests may add jobs
    for key, expected in golden["records"].items():
        assert records[key] == expected, key
