"""Keys that cannot go stale: they change with the data a sequence was drawn from."""

import numpy as np
import pytest

from seq2final.core.errors import MissingPrerequisiteError
from seq2final.runs import keys
from seq2final.runs.planner import plan_run

TINY = {
    "sequence": "source100:rotation60",
    "dataset": "npz",
    "build_sequences": {"test_size": 40, "oracle_size": 60},
    "budget": "smoke",
    "method": "ft",
    "arch": "convnet_1",
    "mlflow": {"enabled": False},
}


def _write_npz(path, seed):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(10), 30)
    images = rng.integers(0, 256, size=(len(labels), 32, 32, 3), dtype=np.uint8)
    np.savez(path, x_train=images, y_train=labels, x_test=images[::2], y_test=labels[::2])


def test_replacing_the_npz_at_the_same_path_changes_every_key(project, run_kedro, stores_of):
    data = project / "my.npz"
    _write_npz(data, seed=0)
    run = {**TINY, "data_path": str(data)}
    pipelines = ["build_sequences", "pretrain_historical", "adapt_final"]
    run_kedro(pipelines, **run)
    stores = stores_of(project)
    [first_job], first_states = list(stores.results), set(stores.states)

    _write_npz(data, seed=1)  # same path, same shapes, other pixels
    with pytest.raises(MissingPrerequisiteError, match="drawn from other npz data .* rebuild it"):
        run_kedro(["adapt_final"], **run)
    run_kedro(pipelines, **run)
    jobs, states = set(stores.results), set(stores.states)
    assert len(jobs) == 2 and first_job in jobs
    assert len(states) == 2 * len(first_states) and first_states < states
    assert {stores.results[k].sequence_key for k in jobs} == {
        stores.results[first_job].sequence_key
    }  # the same spec, so the same sequence folder: only its content and the keys changed


def test_a_new_training_semantics_version_gives_every_state_and_job_a_new_key(
    checked_run, monkeypatch
):
    run = checked_run(sequence="digits_clr", method="sft", arch="convnet_1", budget="smoke")

    def plan():
        return plan_run(run, "content-hash")

    before = plan()
    monkeypatch.setattr(keys, "TRAINING_SEMANTICS", keys.TRAINING_SEMANTICS + 1)
    after = plan()
    old = {s.key for s in before.states} | {j.key for j in before.jobs}
    new = {s.key for s in after.states} | {j.key for j in after.jobs}
    assert len(old) == len(new) == 3 and not old & new  # step 0, the SFT chain and the job
