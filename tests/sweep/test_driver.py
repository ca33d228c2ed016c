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
        client, Path("."), None, {}, {}, request, Stores(None, None, None), False, lambda _: None
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
