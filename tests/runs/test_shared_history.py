"""``pretrain_historical.shared_history``: sequences whose histories are the same bytes share
their historical states (a family's members, docs/intensity.md)."""

import pytest

RUN = {
    "dataset": "digits",
    "build_sequences": {"test_size": 40, "oracle_size": 60},
    "budget": "smoke",
    "method": ["ft", "sft"],
    "arch": "convnet_1",
    "mlflow": {"enabled": False},
}
PIPELINES = ["build_sequences", "pretrain_historical", "adapt_final"]
MEMBERS = ("source100:rotation@0/60", "source100:rotation@45/60")  # one history, two finals


def _run_members(run_kedro, shared):
    for sequence in MEMBERS:
        run_kedro(PIPELINES, **RUN, sequence=sequence,
                  pretrain_historical={"shared_history": shared})  # fmt: skip


def test_members_with_one_history_share_their_states_and_keep_their_own_jobs(
    run_kedro, stores_of, project
):
    _run_members(run_kedro, shared=True)
    stores = stores_of(project)
    records = [stores.results[key] for key in stores.results]
    assert len({r.sequence_key for r in records}) == 2 and len(records) == 4  # jobs per member
    # ERM's model and SFT's step-0 model and chain: trained once for both members
    assert sorted(key.split("-")[0] for key in stores.states) == ["erm", "sequential", "step0"]
    by_method = {}
    for record in records:
        by_method.setdefault(record.method, set()).add(record.historical_state)
    assert all(len(states) == 1 for states in by_method.values())


def test_without_it_each_member_trains_its_own(run_kedro, stores_of, project):
    _run_members(run_kedro, shared=False)
    stores = stores_of(project)
    assert len(list(stores.states)) == 2 * 3


def test_other_histories_do_not_share(run_kedro, stores_of, project):
    for sequence in ("source100:rotation@0/60", "source90:rotation@0/60"):
        run_kedro(PIPELINES, **{**RUN, "method": "ft"}, sequence=sequence,
                  pretrain_historical={"shared_history": True})  # fmt: skip
    assert len(list(stores_of(project).states)) == 2


def test_shared_history_under_a_temporal_protocol_is_one_line_before_any_training(
    run_kedro, project
):
    with pytest.raises(Exception, match=r"shared_history under protocol 'eval_stream': valid only "
                       r"under protocol final") as raised:  # fmt: skip
        run_kedro(PIPELINES, **RUN, sequence="source60:rotation40:rotation40:rotation40",
                  protocol="eval_stream", pretrain_historical={"shared_history": True})  # fmt: skip
    assert "\n" not in str(raised.value)
    assert not (project / "data/06_models/historical").exists()
