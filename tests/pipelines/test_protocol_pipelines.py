"""The temporal protocols end to end: views trained through the pipelines, scored per step."""

import mlflow
import pytest
import torch
from kedro.framework.session import KedroSession

from seq2final.core.errors import Seq2FinalError
from seq2final.core.startup import bootstrap_once
from seq2final.methods.context import Context
from seq2final.training import Engine, TensorSplit, predict_logits
from seq2final.training.records import StepView

TINY = {
    "sequence": "source100:rotation60:corruption100:label_flip60",  # steps 0..3
    "build_sequences": {"test_size": 50, "oracle_size": 120},
    "budget": "smoke",
    "mlflow": {"enabled": False},
}
PIPELINES = ["build_sequences", "pretrain_historical", "adapt_final"]


def _run(project, pipelines=PIPELINES, **params):
    while mlflow.active_run():
        mlflow.end_run()
    bootstrap_once(project)
    runtime = {**TINY, **params}
    with KedroSession.create(project_path=project, env="test", runtime_params=runtime) as session:
        return session.run(pipeline_names=pipelines)


@pytest.fixture
def fits_seen(monkeypatch):
    """Every tuned fit of the run: its owner, stage, the view it trains on and its training
    images (as bytes); :func:`steps_of` says which steps of the whole sequence they come from."""
    seen = []
    tuned = Context.tuned

    def spy(self, stage, space, make_model, task):
        view = self.sequence.manifest.view
        images = {x.tobytes() for domain in task.domains for x in domain.x.numpy()}
        seen.append({"owner": self.owner_key, "stage": stage,
                     "view": view.name if view else None, "images": images})  # fmt: skip
        return tuned(self, stage, space, make_model, task)

    monkeypatch.setattr(Context, "tuned", spy)
    return seen


def steps_of(images, sequence):
    """The steps of the whole sequence whose training images are among ``images``."""
    return [
        t for t in range(sequence.num_steps)
        if {x.tobytes() for x in sequence.step(t).split("train")[0]} & images
    ]  # fmt: skip


def test_eval_stream_trains_each_family_on_the_steps_it_should_see(project, fits_seen, stores_of):
    _run(project, method="erm", protocol="eval_stream", protocol_options={"window": 1})
    _run(project, ["pretrain_historical", "adapt_final"], method="sft", protocol="eval_stream",
         protocol_options={"window": 1})  # fmt: skip
    views = {"0-1": 1, "0-2": 2}  # window 1 on steps 0..3: times 1 and 2 (and 0, below)
    stores = stores_of(project)
    (key,) = list(stores.sequences)
    sequence = stores.sequences[key]
    for fit in fits_seen:
        fit["steps"] = steps_of(fit["images"], sequence)  # against the whole sequence
    erm = [f for f in fits_seen if "all_erm" in f["owner"]]
    # pooled: every step up to t, in one fit, and none after
    assert sorted((f["view"], f["steps"]) for f in erm) == [("0-1", [0, 1]), ("0-2", [0, 1, 2])]
    # time 0: one model of step 0 alone, for both methods (the second run reuses it)
    (first,) = [f for f in fits_seen if f["view"] == "0-0"]
    assert "none+scratch" in first["owner"] and first["steps"] == [0]
    # continual (SFT): each fit on one step, the last one on step t itself
    sft_final = [f for f in fits_seen if "sequential+ft" in f["owner"]]
    assert sorted((f["view"], f["steps"]) for f in sft_final) == [("0-1", [1]), ("0-2", [2])]
    chains = [f for f in fits_seen if f["owner"].startswith("sequential-")]
    assert chains and all(len(f["steps"]) == 1 for f in chains)
    # one step-0 model for both views: they start at step 0 as it is
    assert sum(key.startswith("step0") for key in stores.states) == 1
    records = [stores.results[k] for k in stores.results]
    assert {(r.method, r.view.name) for r in records} == {
        (m, v) for m in ("erm", "sft") for v in views
    } | {("baseline", "0-0")}
    for record in records:
        # every step's accuracy is the stored model's, recomputed here
        model, engine = stores.results.model(record.job_key), record.engine
        for step in range(4):
            for split in ("train", "test"):
                data = TensorSplit.from_arrays(*sequence.step(step).split(split))
                logits = predict_logits(model, data, engine, record.eval_step)
                accuracy = float((logits.argmax(1) == data.y).float().mean())
                assert getattr(record.step_accuracies[str(step)], split) == accuracy
        # the view's own test accuracy is its last step's
        last = record.view.steps[-1]
        assert record.test_accuracy == record.step_accuracies[str(last)].test


def test_a_chain_grows_with_the_stream_each_step_fitted_once_over_every_view(
    project, fits_seen, stores_of
):
    """Six steps, window 1: the stream's models of times 1..4. Each continual chain fits each
    history step once for all views (its state of steps 0..k extends that of 0..k−1), so a
    method's fits are linear in the stream's length: ≤ 2 per step."""
    six = "source100:rotation60:rotation60:rotation60:rotation60:rotation60"
    _run(project, method=["sft", "ewc", "erm"], protocol="eval_stream", sequence=six,
         protocol_options={"window": 1})  # fmt: skip
    stores = stores_of(project)
    (key,) = list(stores.sequences)
    sequence = stores.sequences[key]
    times = range(1, 5)
    for mode, owner in (("sequential", "sequential-"), ("sequential_ewc", "sequential_ewc-")):
        chain = [f for f in fits_seen if f["owner"].startswith(owner)]
        # steps 1..3 (the history of the last view, 0-4), each once
        assert sorted(steps_of(f["images"], sequence) for f in chain) == [[1], [2], [3]]
        final = [f for f in fits_seen if f"{mode}+ft" in f["owner"]]
        assert sorted(f["view"] for f in final) == [f"0-{t}" for t in times]
        step0 = [f for f in fits_seen if f["owner"].startswith("step0")]
        assert len(chain) + len(final) + len(step0) <= 2 * sequence.num_steps
        # the state of steps 0..k continues that of 0..k−1 as it is: its first models are those
        grown = [k for k in stores.states if k.startswith(owner)]
        extended = {stores.states[k].info.extends for k in grown}
        (last,) = [k for k in grown if k not in extended]  # steps 0..3, extended by none
        seen = [stores.states[last]]
        while seen[-1].info.extends:
            seen.append(stores.states[seen[-1].info.extends])
        assert len(seen) == 4  # steps 0..0, 0..1, 0..2 and 0..3
        for longer, shorter in zip(seen, seen[1:], strict=False):
            for name, chain_models in shorter.chains.items():
                kept = longer.chains[name].models[: len(chain_models.models)]
                assert [_bytes(m) for m in kept] == [_bytes(m) for m in chain_models.models]
    # the pooled method trains one model per time on steps 0..t
    erm = [f for f in fits_seen if "all_erm" in f["owner"]]
    assert sorted(f["view"] for f in erm) == [f"0-{t}" for t in times]
    # the protocol's cost charges each fit once, as NED: SFT's jobs (time 0's among them), its
    # chain's states and the step-0 model, each once however many views continue them
    from seq2final.protocols import ProtocolOptions
    from seq2final.reporting.protocols import protocol_scores

    records = [stores.results[k] for k in stores.results]
    (row,) = [r for r in protocol_scores(records, "eval_stream", ProtocolOptions(window=1))
              if r.method == "sft"]  # fmt: skip
    jobs = [r for r in records if r.historical == "sequential" or r.view.name == "0-0"]
    states = [k for k in stores.states if k.startswith(("sequential-", "step0-"))]
    flops = sum(r.train_flops for r in jobs) + sum(
        fit.train_flops for k in states for fit in stores.states.summary(k).fits
    )
    assert row.train_flops == flops and flops > 0


def test_a_warm_started_stream_starts_each_pooled_fit_from_the_previous_times_model(
    project, stores_of, monkeypatch
):
    starts = []
    tuned = Context.tuned

    def spy(self, stage, space, make_model, task):
        starts.append((self.sequence.manifest.view.name, _bytes(make_model())))
        return tuned(self, stage, space, make_model, task)

    monkeypatch.setattr(Context, "tuned", spy)
    _run(project, method="erm", protocol="eval_stream",
         protocol_options={"window": 1, "warm_start": True})  # fmt: skip
    stores = stores_of(project)
    views = {r.view.name: r for r in (stores.results[k] for k in stores.results)}
    assert sorted(views) == ["0-0", "0-1", "0-2"]
    for t in (1, 2):  # each time's first weights are the previous time's model, byte for byte
        (start,) = [weights for view, weights in starts if view == f"0-{t}"]
        assert start == _bytes(stores.results.model(views[f"0-{t - 1}"].job_key))
    # off, the same stream trains each time afresh, under other keys
    starts.clear()
    _run(project, ["adapt_final"], method="erm", protocol="eval_stream",
         protocol_options={"window": 1})  # fmt: skip
    (fresh,) = [weights for view, weights in starts if view == "0-1"]
    assert fresh != _bytes(stores.results.model(views["0-0"].job_key))


def _bytes(model):
    return [value.numpy().tobytes() for value in model.state_dict().values()]


WILD_TIME = {  # method -> its job's modes, as in the job's key
    "coral_t": "none+all_coral_t", "irm_t": "none+all_irm_t", "dro_t": "none+all_dro_t",
    "mixup": "none+all_mixup", "lisa": "none+all_lisa",
    "si": "sequential_si+ft", "agem": "sequential_agem+agem", "swa": "sequential_ft+swa",
}  # fmt: skip
CONTINUAL = ("si", "agem", "swa")


def test_wild_times_methods_run_and_are_scored_under_every_temporal_protocol(
    project, fits_seen, stores_of
):
    """Steps 0..2: every temporal protocol trains the view 0-1 (the mixed split its mixed
    version), so the protocols share its jobs and each scores them its own way."""
    three = {
        "sequence": "source100:rotation60:corruption100",
        "method": list(WILD_TIME),
        "protocol_options": {"window": 1},
    }
    tables = project / "data/08_reporting/result_tables"
    for protocol in ("eval_fix", "eval_stream", "test_then_train", "mixed_split"):
        _run(project, [*PIPELINES, "evaluate"], protocol=protocol, **three)
        csvs = list(tables.glob(f"*/{protocol}/smoke-*.csv"))
        assert csvs, protocol
        for path in csvs:
            table = __import__("pandas").read_csv(path)
            scored = table.dropna(subset=["mean"])
            assert set(scored["method"]) >= set(WILD_TIME), (protocol, path.name)
            # accuracies lie in [0, 1], and so does P_forget (a best minus one of its candidates)
            assert scored["mean"].between(0, 1).all(), path.name
    stores = stores_of(project)
    records = [stores.results[k] for k in stores.results]
    assert sorted((r.method, r.view.name) for r in records) == sorted(
        [(m, v) for m in WILD_TIME for v in ("0-1", "mixed-0-1")] + [("baseline", "0-0")]
    )
    (key,) = list(stores.sequences)
    sequence = stores.sequences[key]
    for method, modes in WILD_TIME.items():
        finals = [f for f in fits_seen
                  if modes in f["owner"] and f["view"] == "0-1" and "final" in f["stage"]]  # fmt: skip
        assert finals, method
        for fit in finals:  # continual: the last step alone; pooled: every step up to it
            expected = [1] if method in CONTINUAL else [0, 1]
            assert steps_of(fit["images"], sequence) == expected, (method, fit["stage"])


def test_eval_fix_and_the_stream_share_the_view_at_the_split_step(project, stores_of, caplog):
    _run(project, method="baseline", protocol="eval_fix", protocol_options={"split_step": 2})
    stores = stores_of(project)
    (first,) = [stores.results[k] for k in stores.results]
    assert first.view == StepView(name="0-2", steps=(0, 1, 2), mixed_seed=None)
    caplog.clear()
    _run(project, ["adapt_final"], method="baseline", protocol="eval_stream",
         protocol_options={"window": 1})  # fmt: skip
    assert "finished earlier; reusing it" in caplog.text  # the view 0-2 is eval_fix's
    assert {stores.results[k].view.name for k in stores.results} == {"0-0", "0-1", "0-2"}


def test_the_mixed_split_trains_on_images_of_later_steps(project, fits_seen, stores_of):
    _run(project, method="erm", protocol="mixed_split")
    (fit,) = fits_seen
    assert fit["view"] == "mixed-0-1"
    stores = stores_of(project)
    (sequence,) = [stores.sequences[k] for k in stores.sequences]
    # the fit's own images come from later steps too, each image once
    assert {2, 3} & set(steps_of(fit["images"], sequence))
    (record,) = [stores.results[k] for k in stores.results]
    assert record.view.mixed_seed is not None


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"method": "oracle", "protocol": "eval_fix"},
         "method 'oracle' cannot run under protocol 'eval_fix': it trains on the final step's "
         "oracle-size draw"),
        ({"protocol": "eval_fix", "protocol_options": {"split_step": 3}},
         r"split_step 3 is outside the sequence \(steps 0..3\); valid: 1..2"),
        ({"protocol": "eval_stream", "protocol_options": {"window": 0}}, "window 0: valid: 1..2"),
        ({"protocol": "eval_stream", "protocol_options": {"window": 3}},
         "window 3 is past the end"),
        ({"protocol": "eval_fixed"}, "unknown protocol 'eval_fixed'; valid: final, eval_fix"),
        ({"protocol": "eval_stream", "protocol_options": {"window": 1}, "protocol_view": "0-3"},
         "protocol_view '0-3' is not a view protocol 'eval_stream' trains here; valid: 0-0, 0-1, 0-2"),
        ({"protocol_options": {"warm_start": True}},
         "protocol_options.warm_start true under protocol 'final': valid only under eval_stream"),
        ({"protocol": "eval_fix", "protocol_options": {"warm_start": True}},
         "warm_start true under protocol 'eval_fix': valid only under eval_stream"),
        ({"sequence": "portraits", "protocol": "eval_fix"},
         "dataset 'portraits' \\(whose empty periods are dropped\\) does not fix; valid: the "
         "protocol final, or the datasets portraits_5y, portraits_1y"),
    ],
)  # fmt: skip
def test_bad_protocol_input_stops_before_any_work_in_one_line(project, params, message):
    with pytest.raises(Seq2FinalError, match=message) as error:
        _run(project, **params)
    assert "\n" not in str(error.value)
    assert not any((project / "data/03_primary/sequences").glob("*/manifest.json"))


def test_wild_times_yearbook_eval_fix_trains_on_1930_to_1970_and_tests_on_every_later_year(
    project, stores_of, write_yearbook, tmp_path
):
    folder = write_yearbook(tmp_path / "yearbook", per_year=10)
    _run(project, [*PIPELINES, "evaluate"], sequence="yearbook", data_path=str(folder),
         method="baseline", protocol="eval_fix")  # fmt: skip
    stores = stores_of(project)
    (record,) = [stores.results[k] for k in stores.results]
    assert record.view.name == "0-40"  # the preset's split: 1930..1970 in
    (key,) = list(stores.sequences)
    names = stores.sequences[key].step_names
    assert names[40] == "1970" and names[-1] == "2013" and len(names) == 84
    (table,) = (project / "data/08_reporting/result_tables").glob(
        "*/eval_fix/smoke-ood_average.csv"
    )
    frame = __import__("pandas").read_csv(table)
    cell = frame[frame["arch"] == "convnet_4"]
    later = [record.step_accuracies[str(t)].test for t in range(41, 84)]
    assert cell["mean"].item() == pytest.approx(sum(later) / len(later))  # 1971..2013, unweighted


def test_a_model_memorising_what_it_trained_on_scores_nothing_before_training_on_a_step(
    source,
):
    """Test-then-train predicts step t with the model of steps 0..t-1: a model that only knows
    the images it trained on scores zero, although it would score 1.0 on steps it has seen."""
    from seq2final.data.sampler import build_sequence
    from seq2final.data.spec import resolve_spec
    from seq2final.protocols import PROTOCOLS, ProtocolOptions
    from seq2final.runs.execution import step_accuracies

    spec = resolve_spec("source100:rotation100:corruption100:label_flip100", dataset="digits",
                        test_size=20, step_tests=True)  # fmt: skip
    sequence = build_sequence(spec, source)
    protocol = PROTOCOLS["test_then_train"]
    records = {}
    for view in protocol.views(sequence.num_steps, ProtocolOptions()):
        memory = {
            x.tobytes(): int(y)
            for t in view.steps
            for x, y in zip(*sequence.step(t).split("train"), strict=True)
        }
        model = _Memoriser(memory)
        records[view.name] = {
            int(step): row for step, row in step_accuracies(model, sequence, Engine(), None).items()
        }
        assert records[view.name][view.last].train == 1.0  # it knows what it trained on
    score = protocol.score(records, sequence.num_steps, ProtocolOptions())
    assert score["curve"] == {2: 0.0, 3: 0.0} and score["stream_accuracy"] == 0.0


class _Memoriser(torch.nn.Module):
    """Answers the label of an image it memorised, and an eleventh class, never a label, for
    any other image."""

    def __init__(self, memory):
        super().__init__()
        self.memory = memory
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        raw = (x * 255).round().to(torch.uint8).numpy()
        logits = torch.zeros(len(x), 11)
        for row, image in enumerate(raw):
            logits[row, self.memory.get(image.tobytes(), 10)] = 1.0
        return logits + 0 * self.anchor


def test_evaluate_and_visualize_report_the_protocol_beside_the_final_protocols_results(
    project, stores_of
):
    stream = {"protocol": "eval_stream", "protocol_options": {"window": 1}}
    _run(project, method="erm", **stream)
    _run(project, ["build_sequences", "adapt_final"], method="baseline")  # the paper's protocol
    _run(project, ["evaluate", "visualize"], **stream)
    _run(project, ["evaluate"])  # the final protocol's tables ignore the views' records
    reports = project / "data/08_reporting"
    stores = stores_of(project)
    records = [stores.results[k] for k in stores.results]
    views = {r.view.name: r for r in records if r.view is not None}
    assert set(views) == {"0-0", "0-1", "0-2"}
    assert views["0-0"].method == "baseline" and views["0-0"].aliases == ["erm"]  # time 0's
    # the table's number is the protocol's score of the three views, by hand
    expected = (views["0-0"].step_accuracies["1"].test
                + views["0-1"].step_accuracies["2"].test
                + views["0-2"].step_accuracies["3"].test) / 3  # fmt: skip
    (average,) = reports.glob("*_tables/*/eval_stream/smoke-average.csv")
    table = __import__("pandas").read_csv(average)
    cell = table[(table["arch"] == "convnet_4") & (table["method"] == "erm")]
    assert cell["mean"].item() == pytest.approx(expected)
    markdown = next(reports.glob("*/*/eval_stream/smoke-worst.md")).read_text()
    assert "protocol eval_stream" in markdown and "| arch | erm |" in markdown  # methods: columns
    (figure,) = reports.glob("protocol_figures/*/eval_stream/smoke-convnet_4.png")
    assert figure.stat().st_size > 10_000
    # Feature Forgetting's P_CL of the last time: its mean accuracy on the steps it has seen
    (p_cl,) = reports.glob("*_tables/*/eval_stream/smoke-p_cl.csv")
    seen = views["0-2"].step_accuracies
    expected_p_cl = sum(seen[str(s)].test for s in range(3)) / 3
    p_cl_table = __import__("pandas").read_csv(p_cl)
    erm_p_cl = p_cl_table[(p_cl_table["arch"] == "convnet_4") & (p_cl_table["method"] == "erm")]
    assert erm_p_cl["mean"].item() == pytest.approx(expected_p_cl)
    (forgetting,) = reports.glob("protocol_figures/*/eval_stream/smoke-convnet_4-forgetting.png")
    assert forgetting.stat().st_size > 10_000
    # the protocol's accuracy for compute: its score against the FLOPs of both views it trained
    (compute,) = reports.glob("protocol_figures/*/eval_stream/smoke-convnet_4-compute.png")
    assert compute.stat().st_size > 10_000
    from seq2final.protocols import ProtocolOptions
    from seq2final.reporting.protocols import protocol_scores

    (row,) = protocol_scores(records, "eval_stream", ProtocolOptions(window=1))
    assert row.train_flops == sum(r.train_flops for r in views.values()) > 0  # pooled: no state
    final_table = next(reports.glob("*_tables/*/smoke-per_arch.csv")).read_text()
    assert "baseline" in final_table and "erm" not in final_table
