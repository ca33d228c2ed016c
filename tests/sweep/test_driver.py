"""The driver's ordering of ready tasks, with a client that records what it is given."""

from __future__ import annotations

from pathlib import Path

from seq2final.sweep.driver import PRIORITY, Sweep, architecture_order
from seq2final.sweep.graph import Stores, SweepRequest
from seq2final.sweep.work import PipelineRun


class RecordingClient:
    def __init__(self) -> None:
        self.priorities: dict[str, int] = {}

    def submit(self, function, *args, key: str, priority: int, **options):  # noqa: ANN001, ANN003
        self.priorities[args[2].name] = priority
        return key


def test_larger_architectures_rank_higher():
    order = architecture_order(["resnet_4", "convnet_1", "convnet_4"])
    assert order["convnet_1"] < order["convnet_4"] < order["resnet_4"]


def test_states_then_long_jobs_then_final_step_jobs_each_largest_first():
    client = RecordingClient()
    request = SweepRequest(sequences=("s",), archs=("convnet_1", "resnet_4"))
    sweep = Sweep(
        client, Path("."), None, {}, request, Stores(None, None, None), False, lambda _: None
    )
    sweep._arch_rank = architecture_order(request.archs)

    def submit(name: str, kind: str, arch: str, free: bool = False) -> None:
        sweep._submit(PipelineRun(kind, name, "p", {"arch": arch}, "log"), training=True, free=free)

    submit("state small", "state", "convnet_1")
    submit("state large", "state", "resnet_4")
    submit("pooled small", "job", "convnet_1", free=True)
    submit("pooled large", "job", "resnet_4", free=True)
    submit("final small", "job", "convnet_1")
    submit("final large", "job", "resnet_4")
    ranked = sorted(client.priorities, key=client.priorities.__getitem__, reverse=True)
    assert ranked == [
        "state large", "state small", "pooled large", "pooled small", "final large", "final small"
    ]  # fmt: skip
    assert max(client.priorities.values()) < PRIORITY["sequence"] * 1000


class AfterClient(RecordingClient):
    """Also records each task's name and the futures (keys here) it waits for."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[tuple[str, str, list[str], str]] = []

    def submit(self, function, *args, key: str, priority: int, **options):  # noqa: ANN001, ANN003
        task, after = args[2], list(args[3:])
        self.tasks.append((task.kind, task.params.get("protocol_view"), after, key))
        return super().submit(function, *args, key=key, priority=priority, **options)


def _plan(checked_run, protocol: str, options: dict, method: list[str]):
    from seq2final.runs.planner import plan_run

    run = checked_run(**_STREAM, method=method, protocol=protocol, protocol_options=options)
    return run, plan_run(run, "data")


_STREAM = {"sequence": "source100:rotation60:rotation60:rotation60:rotation60",
           "dataset": "digits", "build_sequences": {"test_size": 50}, "arch": "convnet_1",
           "budget": "smoke", "training": {"device": "cpu"}}  # fmt: skip


def test_a_chain_grown_to_a_later_view_is_one_task_waiting_for_the_states_before_it(
    checked_run, tmp_path
):
    """Eval-Fix at step 3 continues SFT's chain of steps 0..2: its earlier states have no job of
    their own, so the one state task trains them; a warm-started stream's job waits for the job
    of the previous time."""
    from seq2final.runs.result_store import ResultStore
    from seq2final.runs.state_store import HistoricalStore
    from seq2final.sweep.graph import SequenceWork

    stores = Stores(None, HistoricalStore(tmp_path / "s"),
                    ResultStore(tmp_path / "r", tmp_path / "m", tmp_path / "c"))  # fmt: skip
    client = AfterClient()
    request = SweepRequest(sequences=("s",), archs=("convnet_1",))
    sweep = Sweep(client, Path("."), None, {}, request, stores, False, lambda _: None)
    run, fix = _plan(checked_run, "eval_fix", {"split_step": 3}, ["sft"])
    spec = run.spec
    assert len([s for s in fix.states if s.mode == "sequential"]) == 3  # steps 0..0, 0..1, 0..2
    sweep._planned[(spec.name, spec.dataset)] = 1
    sweep._submit_training(SequenceWork(run, {}, True, [fix]))
    (state,) = [t for t in client.tasks if t[0] == "state"]  # one task: the chain of 0..2
    (job,) = [t for t in client.tasks if t[0] == "job"]
    assert job[2] == [state[3]]  # the job waits for it
    _, stream = _plan(checked_run, "eval_stream",
                      {"window": 1, "warm_start": True}, ["erm"])  # fmt: skip
    client.tasks.clear()
    sweep._planned[(spec.name, spec.dataset)] = 1
    sweep._submit_training(SequenceWork(run, {}, True, [stream]))
    jobs = [t for t in client.tasks if t[0] == "job"]
    assert [view for _, view, _, _ in jobs] == ["0-0", "0-1", "0-2", "0-3"]
    assert jobs[0][2] == []
    for job, previous in zip(jobs[1:], jobs, strict=False):
        assert job[2] == [previous[3]]  # each waits for the previous time's job


def test_a_resumed_sweep_trains_only_the_states_its_unfinished_jobs_continue(checked_run, tmp_path):
    """Records kept, models gone (a new session): a stream's chain states whose jobs all have a
    record are not trained; each unfinished job waits for the one task of its own state."""
    from seq2final.runs.state_store import HistoricalStore
    from seq2final.sweep.graph import SequenceWork

    run, stream = _plan(checked_run, "eval_stream", {"window": 1}, ["sft"])
    views = sorted({job.view.name for job in stream.jobs if job.view is not None})
    finished = {
        job.key for job in stream.jobs if job.view is not None and job.view.name in views[:2]
    }
    open_jobs = [job for job in stream.jobs if job.key not in finished]
    assert finished and open_jobs
    stores = Stores(None, HistoricalStore(tmp_path / "s"), finished)  # finished: what is recorded
    client = AfterClient()
    request = SweepRequest(sequences=("s",), archs=("convnet_1",))
    sweep = Sweep(client, Path("."), None, {}, request, stores, False, lambda _: None)
    sweep._planned[(run.spec.name, run.spec.dataset)] = 1
    sweep._submit_training(SequenceWork(run, {}, True, [stream]))
    submitted = set(client.priorities)  # the tasks' names: state keys and job keys
    needed = {job.state_key for job in open_jobs if job.state_key}
    assert submitted & {s.key for s in stream.states} == needed
    assert submitted - needed == {job.key for job in open_jobs}
    future_of = {name: task[3] for name, task in zip(client.priorities, client.tasks, strict=True)}
    waits = {name: task[2] for name, task in zip(client.priorities, client.tasks, strict=True)}
    for job in open_jobs:  # each waits for the one task of its own state
        assert waits[job.key] == [future_of[job.state_key]]
