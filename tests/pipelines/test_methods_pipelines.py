"""``pretrain_historical`` and ``adapt_final`` end to end on a tiny digits sequence (budget smoke)."""

import json
import shutil

import mlflow
import optuna
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from kedro.framework.session import KedroSession

from seq2final.cli import cli
from seq2final.core.errors import MissingPrerequisiteError, Seq2FinalError
from seq2final.core.startup import bootstrap_once
from seq2final.methods import HISTORICAL_MODES, METHODS, requested_jobs
from seq2final.models import forward_macs
from seq2final.training import TensorSplit, predict_logits
from seq2final.training.records import SharedFlops
from seq2final.training.tuner import open_storage

TINY = {
    "sequence": "source100:rotation60:corruption100:label_flip60",
    "build_sequences": {"test_size": 50, "oracle_size": 120},
    "budget": "smoke",
}
FIELDS = {
    "sequence", "sequence_key", "dataset", "arch", "method", "historical", "final", "seed",
    "budget", "test_accuracy", "worst_class_accuracy", "test_nll", "ece", "valid_accuracy",
    "epochs", "trials", "wall_seconds", "device", "parameters",
}  # fmt: skip


def _run(project, pipelines, **params):
    while mlflow.active_run():  # kedro-mlflow keeps its run open across sessions of one process
        mlflow.end_run()
    bootstrap_once(project)
    runtime = {**TINY, **params}
    with KedroSession.create(project_path=project, env="test", runtime_params=runtime) as session:
        return session.run(pipeline_names=pipelines)


def _frozen_equal(module_a, module_b):
    pairs = zip(module_a.named_parameters(), module_b.named_parameters(), strict=True)
    return all(torch.equal(a, b) for (_, a), (_, b) in pairs)


def test_all_methods_end_to_end(every_method_run, every_method_params, stores_of):
    """Every method of the registries (the plugins' too) on a tiny sequence, trained once for the
    suite (``every_method_run``); what each job stored is what its model computes."""
    arch = every_method_params["arch"]
    assert arch.startswith("convnet_")  # the ConvNet-specific checks below
    stores = stores_of(every_method_run)
    states, results = stores.states, stores.results
    records = [results[key] for key in results]
    by_method = {r.method: r for r in records}
    # One job per pair of modes actually trained: on a ConvNet a block is one conv + BN, so the
    # 1-layer variants are their block versions, trained once and reported under both names.
    jobs = requested_jobs(None, None, None, arch)
    assert len(records) == len({(j.historical, j.final) for j in jobs})
    for job in jobs:
        assert job.requested in {by_method[job.method].method, *by_method[job.method].aliases}
    for one, block in (("st_1", "st_b"), ("sst_1", "sst_b"), ("jst_1", "jst_b")):
        assert one not in by_method and by_method[block].aliases == [one]
    (sequence_key,) = list(stores.sequences)
    sequence = stores.sequences[sequence_key]
    test = TensorSplit.from_arrays(*sequence.step(-1).split("test"))
    for record in records:
        assert json.loads(results.record_path(record.job_key).read_text()).keys() >= FIELDS
        # the record's metrics are its stored model's, recomputed here on the final test split
        model, engine = results.model(record.job_key), record.engine
        logits = predict_logits(model, test, engine, record.eval_step)
        assert float((logits.argmax(1) == test.y).float().mean()) == record.test_accuracy
        assert float(F.cross_entropy(logits, test.y)) == pytest.approx(record.test_nll)
        assert record.budget == "smoke" and record.arch == arch
        curves = results.learning_curves(record.job_key)
        if record.final == "ncm":  # a head set from class means: no trial, no curve
            assert record.trials == 0 and curves.empty
        else:
            assert record.trials >= 1 and list(curves["epoch"][:3]) == [0, 1, 2]
        # compute: the job's own fits, every trial; the states it continues, shown as shared
        assert record.train_flops == sum(f.train_flops for f in record.fits) > 0
        assert record.eval_flops == sum(f.eval_flops for f in record.fits) > 0
        if record.historical_state is not None:
            state = states[record.historical_state]
            shared = {record.historical_state: sum(f.train_flops for f in state.fits)}
            if state.info.step0 is not None:  # a chain: the step-0 model it starts from
                step0 = states[state.info.step0]
                shared[state.info.step0] = sum(f.train_flops for f in step0.fits)
                assert shared[state.info.step0] > 0
            assert record.historical_flops == SharedFlops(shared=True, states=shared)
        if record.eval_step is None:  # a plain model: the zoo's count of its forward pass
            assert record.inference_flops_per_image == 2 * forward_macs(model)

    # FT, LP-FT, ST-1 and ST-B share one ERM model; SFT, EWC and SST-* share one step-0 model.
    prefixes = sorted(key.split("-")[0] for key in states)
    trained = {j.historical for j in jobs} - {"none"}
    step0 = ["step0"] if any(HISTORICAL_MODES[h].uses_step0 for h in trained) else []
    assert prefixes == sorted([*trained, *step0])
    assert {"erm", "irm", "dro", "sequential", "sequential_ewc", "sequential_side_b"} <= trained
    assert "sequential_side_1" not in trained  # a ConvNet's 1-layer chain is its block chain
    studies = optuna.get_all_study_names(
        open_storage(None, every_method_run / "data/06_models/optuna")
    )
    assert sum(name.endswith("/erm") for name in studies) == 1

    # SFT: the schedule fixes each step's learning rate (smoke runs exponential 2e-4 x 0.5^t).
    sft = by_method["sft"]
    schedule = "exponential_2e-4_0.5"
    assert sft.chosen.chain == schedule
    assert sft.hyperparameters[f"{schedule}/final"]["lr"] == pytest.approx(2e-4 * 0.5**3)
    chain_fits = states[sft.historical_state].fits
    assert {f.stage: f.params["lr"] for f in chain_fits} == pytest.approx(
        {f"{schedule}/step1": 1e-4, f"{schedule}/step2": 5e-5}
    )

    # ST freezes the ERM model: its modules come back bitwise unchanged (parameters; BN
    # statistics keep moving as in the original unless freeze_bn_stats is set).
    erm = states[by_method["ft"].historical_state].chains["main"].last
    st = results.model(by_method["st_b"].job_key)
    for name in st.layer_names:
        assert _frozen_equal(st.layers[name][0], getattr(erm, name)), name
    # SST: every module of the step-2 chain model is unchanged in the final joint model.
    chain = states[by_method["sst_b"].historical_state].chains["main"].last
    sst = results.model(by_method["sst_b"].job_key)
    assert sst.num_steps == chain.num_steps + 1 == 4
    for name in sst.layer_names:
        for index, module in enumerate(chain.layers[name]):
            assert _frozen_equal(sst.layers[name][index], module), (name, index)


SIDE_TUNING = ["st_1", "st_b", "sst_1", "sst_b", "jst_1", "jst_b"]


def test_on_a_resnet_every_side_tuning_method_trains_its_own_modules(project, stores_of):
    """A ResNet block is two BasicBlocks, so 1-layer side modules exist there: each side-tuning
    method trains as itself (on a ConvNet, the 1-layer variants are their block versions), with
    the historical modules frozen. The other methods do not depend on the family."""
    # resnet_3, the cheapest ResNet, on three small steps: two to chain, one to adapt to
    one = {"sampler": "random", "trials": 1, "max_epochs": 1}  # what is trained, not how well
    _run(project, ["build_sequences", "pretrain_historical", "adapt_final"], arch="resnet_3",
         method=SIDE_TUNING, mlflow={"enabled": False}, sequence="source60:rotation40:label_flip40",
         build_sequences={"test_size": 30, "oracle_size": 60}, budget="one",
         budgets={"one": one})  # fmt: skip
    stores = stores_of(project)
    states, results = stores.states, stores.results
    by_method = {r.method: r for r in (results[k] for k in results)}
    assert set(by_method) == set(SIDE_TUNING)
    assert all(not record.aliases for record in by_method.values())
    (sequence,) = [stores.sequences[k] for k in stores.sequences]
    test = TensorSplit.from_arrays(*sequence.step(-1).split("test"))
    for record in by_method.values():
        model, engine = results.model(record.job_key), record.engine
        logits = predict_logits(model, test, engine, record.eval_step)
        assert float((logits.argmax(1) == test.y).float().mean()) == record.test_accuracy
    assert {states[r.historical_state].mode for r in by_method.values() if r.historical_state} == {
        "erm", "sequential_side_1", "sequential_side_b"
    }  # fmt: skip
    for method in ("st_1", "st_b"):  # the ERM model's modules come back unchanged
        erm = states[by_method[method].historical_state].chains["main"].last
        st = results.model(by_method[method].job_key)
        for name in st.layer_names:
            assert _frozen_equal(st.layers[name][0], getattr(erm, name)), (method, name)
    one, block = (results.model(by_method[m].job_key) for m in ("st_1", "st_b"))
    assert sum(p.numel() for p in one.parameters()) < sum(p.numel() for p in block.parameters())


def test_finished_jobs_are_reused_and_force_recomputes_them_identically(project, stores_of, caplog):
    _run(project, ["build_sequences", "pretrain_historical", "adapt_final"], method="lp_ft")
    stores = stores_of(project)
    results = stores.results
    [key] = list(results)
    first = results[key]
    caplog.clear()
    _run(project, ["adapt_final"], method="lp_ft")
    assert "finished earlier; reusing it" in caplog.text and results[key] == first
    _run(project, ["adapt_final"], method="lp_ft", force=True)
    again = results[key]
    assert again.wall_seconds != first.wall_seconds  # it really ran again ...
    assert again.test_accuracy == first.test_accuracy  # ... and the same seed gave the same
    assert again.hyperparameters == first.hyperparameters


def test_sft_reports_every_schedule_and_keeps_the_best_on_validation(project, stores_of):
    """The paper's SFT column is the best schedule on test; the record lets both be read."""
    schedules = ["exponential_2e-4_0.5", "linear_1e-3"]
    two = {"sequential": {"budget_schedules": {"smoke": schedules}}}
    _run(project, ["build_sequences", "pretrain_historical", "adapt_final"], method="sft",
         historical_modes=two)  # fmt: skip
    stores = stores_of(project)
    results = stores.results
    [record] = [results[k] for k in results]
    chains = record.chains
    assert list(chains) == schedules
    fits = {f.stage: f.valid_accuracy for f in record.fits}
    assert {n: c["valid_accuracy"] for n, c in chains.items()} == {
        n: fits[f"{n}/final"] for n in schedules
    }
    best = max(schedules, key=lambda n: (chains[n]["valid_accuracy"], -schedules.index(n)))
    assert record.chosen.chain == best
    assert chains[best]["test_accuracy"] == record.test_accuracy
    assert record.valid_accuracy == chains[best]["valid_accuracy"]
    for chain in chains.values():  # each counted on the whole test set
        correct = chain["test_accuracy"] * record.test_size
        assert abs(correct - round(correct)) < 1e-5, chains  # float32 mean


def test_under_keep_known_each_sft_step_is_told_the_previous_steps_winner(
    project, stores_of, monkeypatch
):
    """A ``keep_known`` halving budget: step 2 of a chain is tuned knowing step 1's selection,
    and the final fit (a job, on the stored state) knowing the chain's last step's."""
    from seq2final.training.tuner import Tuner

    told, real_tune = {}, Tuner.tune

    def watched(self, name, *args, known=None, **kwargs):
        told[name.split("/", 1)[1]] = known  # a study is <owner key>/<stage>
        return real_tune(self, name, *args, known=known, **kwargs)

    monkeypatch.setattr(Tuner, "tune", watched)
    budget = {"sampler": "grid", "pruner": "halving", "min_epochs": 1, "reduction_factor": 2,
              "max_epochs": 2, "keep_known": True}  # fmt: skip
    schedules = {"sequential": {"budget_schedules": {"known": ["linear_1e-3"]}}}
    _run(project, ["build_sequences", "pretrain_historical", "adapt_final"], method="sft",
         budget="known", budgets={"known": budget}, historical_modes=schedules,
         mlflow={"enabled": False})  # fmt: skip
    stores = stores_of(project)
    fits = {f.stage: f.params for key in stores.states for f in stores.states[key].fits}
    assert told["linear_1e-3/step1"] is None  # a chain's first step knows nothing
    assert told["linear_1e-3/step2"] == fits["linear_1e-3/step1"]
    assert told["linear_1e-3/final"] == fits["linear_1e-3/step2"]


def test_modes_combine_freely_where_they_fit(project, stores_of):
    _run(
        project,
        ["build_sequences", "pretrain_historical", "adapt_final"],
        historical="irm",
        final="lp_ft",
    )
    stores = stores_of(project)
    results = stores.results
    [record] = [results[k] for k in results]
    assert (record.method, record.historical, record.final) == (
        "irm+lp_ft",
        "irm",
        "lp_ft",
    )
    assert set(record.hyperparameters) == {"head", "all"}


def test_adapt_without_its_historical_state_names_the_command(project):
    _run(project, ["build_sequences"])
    with pytest.raises(
        MissingPrerequisiteError,
        match="kedro run --pipeline pretrain_historical --params .*method:st_b",
    ):
        _run(project, ["adapt_final"], method="st_b")
    assert not (project / "data/07_model_output").exists()


def test_a_corrupt_or_foreign_historical_state_stops_before_training(project, stores_of):
    _run(project, ["build_sequences", "pretrain_historical"], method="ft", arch="convnet_1")
    stores = stores_of(project)
    states = stores.states
    [key] = list(states)
    # The same state file under the key another architecture's ERM state would have.
    bootstrap_once(project)
    with KedroSession.create(
        project_path=project,
        env="test",
        runtime_params={**TINY, "method": "ft", "arch": "convnet_2"},
    ) as session:
        run = session.load_context().catalog.load("checked_run")  # as the hook checked it
    from seq2final.pipelines.pretrain_historical.nodes import plan_jobs

    plan = plan_jobs(run, stores_of(project).sequences[run.spec.key])
    foreign = states.root / plan.states[0].key
    shutil.copytree(states.root / key, foreign)
    with pytest.raises(
        Seq2FinalError, match="holds a erm state for convnet_1, not erm for convnet_2"
    ):
        _run(project, ["adapt_final"], method="ft", arch="convnet_2")
    (foreign / "state.pt").write_bytes(b"not a torch file")
    with pytest.raises(Seq2FinalError, match="is corrupt"):
        _run(project, ["adapt_final"], method="ft", arch="convnet_2")
    assert not (project / "data/07_model_output").exists()


def test_old_and_new_cli_syntax_run_the_same_job(project, stores_of):
    bootstrap_once(project)
    tiny = "sequence=source100:rotation60:corruption100:label_flip60,build_sequences.test_size=50,build_sequences.oracle_size=120,budget=smoke"
    runner = CliRunner()
    new = runner.invoke(
        cli,
        [
            "run",
            "--env",
            "test",
            "--pipelines",
            "build_sequences,pretrain_historical,adapt_final",
            "--params",
            f"{tiny},method=baseline",
        ],
    )
    assert new.exit_code == 0, new.output
    stores = stores_of(project)
    results = stores.results
    [key] = list(results)
    first = results[key]
    old = runner.invoke(
        cli,
        [
            "run",
            "--env",
            "test",
            "--pipeline",
            "adapt_final",
            "--params",
            f"{tiny.replace('=', ':')},method:baseline",
        ],
    )
    assert old.exit_code == 0, old.output
    assert list(results) == [key] and results[key] == first  # the same job key, reused


def test_a_method_contradicting_its_modes_is_refused_in_one_line(project):
    bootstrap_once(project)
    result = CliRunner().invoke(cli, ["run", "--env", "test", "--params", "method:st_b,final:ft"])
    assert result.exit_code != 0
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(
        "Error: parameter 'method': method 'st_b' is historical 'erm' + final 'side_b'"
    )
    assert not (project / "data/03_primary").exists()


def test_every_method_trains_its_trials_fused_when_asked(project, stores_of, monkeypatch):
    """``training.fuse: 2`` on the CPU: every tuned fit of every method (plain, side modules,
    joint models, IRM/DRO/EWC objectives, frozen layers) trains its two trials as one stack."""
    from seq2final.methods import context

    stacks = []
    real_fit_fused = context.fit_fused

    def counted(models, *args):
        stacks.append(len(models))
        return real_fit_fused(models, *args)

    monkeypatch.setattr(context, "fit_fused", counted)
    # CORAL's moments, IRMv1's scalar dummy (IRM-T's default), the mixing modes' draws, SI's
    # path, A-GEM's projection and the gates' phases are not written for vmap: those methods
    # train one trial at a time (tests/training); every other one here.
    alone = {"all_coral_t", "all_irm_t", "all_mixup", "all_lisa", "sequential_si",
             "sequential_agem", "agem", "sft_gated", "ft_gated"}  # fmt: skip
    fusing = [name for name, r in METHODS.items() if not {r.historical, r.final} & alone]
    pair = {"sampler": "random", "trials": 2, "max_epochs": 1}
    _run(project, ["build_sequences", "pretrain_historical", "adapt_final"], arch="convnet_1",
         method=fusing, budget="pair", budgets={"pair": pair}, training={"fuse": 2},
         mlflow={"enabled": False},
         sequence="source60:rotation40:corruption40:label_flip40",
         build_sequences={"test_size": 30, "oracle_size": 60})  # fmt: skip
    stores = stores_of(project)
    records = [stores.results[key] for key in stores.results]
    assert {name for r in records for name in (r.method, *r.aliases)} == set(fusing)
    fits = [fit for r in records for fit in r.fits]
    fits += [fit for key in stores.states for fit in stores.states[key].fits]
    closed = [fit for fit in fits if fit.stage in ("ncm", "prototypes")]  # NED's heads
    assert len(closed) == 2 and all(fit.trials == 0 for fit in closed)
    tuned = [fit for fit in fits if fit not in closed]
    assert all(fit.trials == 2 for fit in tuned)
    assert stacks and set(stacks) == {2} and len(stacks) == len(tuned)


def test_training_runs_inside_the_nodes_named_for_it(project, monkeypatch):
    """Kedro's node timings and a breakpoint land on the training nodes: every state and job is
    trained from inside ``train_historical_states`` and ``train_final_jobs``, never from a
    dataset's save, and a rerun finds every key stored and trains nothing."""
    import inspect

    from seq2final.runs import execution

    callers: list[tuple[str, set[str]]] = []
    for name in ("train_state", "fit_job"):
        real = getattr(execution, name)

        def recording(*args, _real=real, _name=name):
            callers.append((_name, {frame.function for frame in inspect.stack()}))
            return _real(*args)

        monkeypatch.setattr(execution, name, recording)
    _run(project, ["build_sequences", "pretrain_historical", "adapt_final"], method="ft",
         mlflow={"enabled": False})  # fmt: skip
    assert [name for name, _ in callers] == ["train_state", "fit_job"]  # ERM's state, FT's job
    (_, state_stack), (_, job_stack) = callers
    assert "train_historical_states" in state_stack and "train_final_jobs" in job_stack
    assert "save" not in state_stack | job_stack
    callers.clear()
    _run(project, ["pretrain_historical", "adapt_final"], method="ft", mlflow={"enabled": False})
    assert callers == []


def test_as_is_scores_the_historical_model_without_a_final_fit(project, stores_of):
    """Control+Shift's model that never sees the shifted step (docs/intensity.md): the job's
    model is the ERM state's, byte for byte, and trains nothing on the final step."""
    _run(project, ["build_sequences", "pretrain_historical", "adapt_final", "evaluate",
                   "visualize"], historical="erm", final="as_is")  # fmt: skip
    stores = stores_of(project)
    [record] = [stores.results[k] for k in stores.results]
    assert (record.method, record.historical, record.final) == ("erm+as_is", "erm", "as_is")
    assert [f.stage for f in record.fits] == []
    erm = stores.states[record.historical_state].chains["main"].last
    assert _frozen_equal(stores.results.model(record.job_key), erm)
