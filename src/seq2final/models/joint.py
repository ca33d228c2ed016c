"""The joint model: one network per time step, sharing layers wherever a step adds nothing new.

JM, ST, SST and JST (docs/methods.md) are all this one structure. Each layer (``conv1``,
``layer1`` ... ``layerK``, ``fc``) holds a list of modules over time; at every step ``t >= 1`` the
layers named in ``new_layers_per_step[t - 1]`` get a new module, and ``module_path[t][layer]`` is
the index of the module step ``t`` uses (a running count of new modules).

* ``separate`` mode (JM): step ``t`` uses its module alone; new modules are fresh copies.
* ``side_tune`` mode (ST/SST/JST): a block's module 0 is the base block and later modules are side
  modules; step ``t`` uses the *sum* of modules ``0..module_path[t]``. The stem and head either get
  a new full copy used alone (``stem_head="separate"``: ST-*/SST-*, which re-learn ``conv1`` and
  ``fc`` under the adjacency penalty) or full copies that are summed too (``"summed"``: JST-*).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models.architectures import (
    BlockModel,
    apply_dropout,
    build_model,
    decayed_parameters,
    sum_of_squares,
)
from seq2final.models.side_modules import build_side_module, fresh_copy, side_module_kinds

JOINT_MODES = ("separate", "side_tune")
STEM_HEAD_MODES = ("separate", "summed")


class JointModel(nn.Module):
    """Modules over time for every layer of one architecture; ``forward(x, t)`` runs step ``t``.

    Modules are stored as ``layers[layer_name][index]``. ``module_scales[layer][index]`` multiplies
    a summed module's output; it is 1 except in copies made by
    :func:`seq2final.models.weights.scale_side_modules`, where 0 means "no such module".
    """

    def __init__(
        self,
        arch: str,
        num_classes: int,
        num_steps: int,
        new_layers_per_step: Sequence[Sequence[str]],
        mode: str = "separate",
        side_module: str = "block",
        stem_head: str = "separate",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        base = build_model(arch, num_classes, dropout)  # validates the settings too
        _check_config(base, num_steps, new_layers_per_step, mode, side_module, stem_head)
        self.arch = arch
        self.num_classes = num_classes
        self.num_steps = num_steps
        self.new_layers_per_step = [list(layers) for layers in new_layers_per_step]
        self.mode = mode
        self.side_module = side_module
        self.stem_head = stem_head
        self.dropout = float(dropout)
        self.layer_names: tuple[str, ...] = base.layer_names
        self._summed = {
            name: mode == "side_tune" and (name in base.geometry or stem_head == "summed")
            for name in self.layer_names
        }
        self.layers = nn.ModuleDict(
            {name: nn.ModuleList([getattr(base, name)]) for name in self.layer_names}
        )
        self.module_path: list[dict[str, int]] = [dict.fromkeys(self.layer_names, 0)]
        for new_layers in new_layers_per_step:
            path = dict(self.module_path[-1])
            for name in new_layers:
                if mode == "side_tune" and name in base.geometry:
                    module = build_side_module(base, name, side_module)
                else:
                    module = fresh_copy(getattr(base, name))
                self.modules_of(name).append(module)
                path[name] += 1
            self.module_path.append(path)
        self.module_scales: dict[str, list[float]] = {
            name: [1.0] * len(self.modules_of(name)) for name in self.layer_names
        }

    def modules_of(self, name: str) -> nn.ModuleList:
        """Layer ``name``'s modules: the original's first, then each new one in step order (the
        ``ModuleList`` at ``layers[name]``, typed as one)."""
        modules = self.layers[name]
        assert isinstance(modules, nn.ModuleList)
        return modules

    def is_summed(self, layer: str) -> bool:
        """Whether a step uses the sum of this layer's modules so far rather than its latest one."""
        return self._summed[layer]

    def forward(self, x: torch.Tensor, t: int) -> torch.Tensor:
        if not 0 <= t < self.num_steps:
            raise Seq2FinalError(f"time step {t} out of range; valid: 0..{self.num_steps - 1}")
        last = len(self.layer_names) - 1
        for index, name in enumerate(self.layer_names):
            x = self.layer_output(name, x, t)
            if index < last:
                x = apply_dropout(x, self.dropout, self.training)
        return x

    def layer_output(self, name: str, x: torch.Tensor, t: int) -> torch.Tensor:
        """The output of layer ``name`` at time ``t`` for input ``x`` (side modules summed)."""
        modules = self.modules_of(name)
        index = self.module_path[t][name]
        if not self._summed[name]:
            return modules[index](x)
        out = modules[0](x)
        for j in range(1, index + 1):
            scale = self.module_scales[name][j]
            if scale == 0.0:
                continue
            side = modules[j](x)
            if side.shape != out.shape:  # never let broadcasting hide a mismatch
                raise Seq2FinalError(
                    f"{name}[{j}] outputs {tuple(side.shape)} but {name}[0] outputs "
                    f"{tuple(out.shape)} for input {tuple(x.shape)}; DenseNet 1-layer side "
                    "modules need even feature-map sizes at each transition (e.g. 32x32 images)"
                )
            out = out + (side if scale == 1.0 else scale * side)
        return out

    def load_previous(self, previous: nn.Module, freeze: bool = True) -> None:
        """Copy an earlier model into the modules its steps use, optionally freezing them.

        ``previous`` is a plain model (a one-step model) or a joint model with fewer or equal
        steps built with the same layer spec for those steps. ST/SST load the model of steps
        ``0..T-2`` and train only the modules new at ``T-1``, which stay freshly initialised.
        """
        if isinstance(previous, JointModel):
            previous_steps = previous.num_steps
            previous_layers = {name: list(previous.modules_of(name)) for name in self.layer_names}
            previous_scales = previous.module_scales
            if previous_steps > 1 and previous._summed != self._summed:
                raise Seq2FinalError(
                    f"cannot load a '{previous.mode}'/'{previous.stem_head}' joint model into a "
                    f"'{self.mode}'/'{self.stem_head}' one"
                )
        elif isinstance(previous, BlockModel):
            previous_steps = 1
            previous_layers = {name: [getattr(previous, name)] for name in self.layer_names}
            previous_scales = {name: [1.0] for name in self.layer_names}
        else:
            raise Seq2FinalError(
                f"can load a BlockModel or JointModel, not {type(previous).__name__}"
            )
        if previous.arch != self.arch:
            raise Seq2FinalError(f"cannot load a {previous.arch} model into a {self.arch} one")
        if previous_steps > self.num_steps:
            raise Seq2FinalError(
                f"previous model has {previous_steps} steps, more than this one's {self.num_steps}"
            )
        for name, sources in previous_layers.items():
            expected = self.module_path[previous_steps - 1][name] + 1
            if len(sources) != expected:
                raise Seq2FinalError(
                    f"previous model has {len(sources)} module(s) for {name}; this model uses "
                    f"{expected} over steps 0..{previous_steps - 1}"
                )
        for name, sources in previous_layers.items():
            for index, source in enumerate(sources):
                target = self.modules_of(name)[index]
                try:
                    target.load_state_dict(source.state_dict())
                except RuntimeError as error:
                    first_line = str(error).splitlines()[0]
                    raise Seq2FinalError(f"cannot load {name}[{index}]: {first_line}") from None
                self.module_scales[name][index] = previous_scales[name][index]
                if freeze:
                    target.requires_grad_(False)

    def param_norm(self) -> torch.Tensor:
        """Squared L2 of conv/linear weights (BN excluded) of the module each step uses.

        As in the original, the sum runs over steps and layers, taking the module at
        ``module_path[t][layer]``; a module used by several steps is counted once per step.
        """
        return sum_of_squares([
            parameter
            for path in self.module_path
            for name, index in path.items()
            for parameter in decayed_parameters(self.modules_of(name)[index])
        ])  # fmt: skip

    def adjacency_norm(self) -> torch.Tensor:
        """Sum over adjacent steps of ||theta_t - theta_{t-1}||^2 for layers whose module changes.

        All parameters of the two modules count, BN weight and bias included (running statistics
        are buffers and do not). In ``separate`` mode every layer counts; in ``side_tune`` mode
        only ``conv1`` and ``fc``, the layers whose new modules are full copies of the old ones.
        """
        names = self.layer_names if self.mode == "separate" else ("conv1", "fc")
        changes = [
            (self.modules_of(name)[before[name]], self.modules_of(name)[after[name]])
            for before, after in zip(self.module_path, self.module_path[1:], strict=False)
            for name in names
            if before[name] != after[name]
        ]
        if not changes:
            return torch.zeros((), device=next(self.parameters()).device)
        news = [p for _, new in changes for p in new.parameters()]
        olds = [p for old, _ in changes for p in old.parameters()]
        return sum_of_squares(news, minus=olds)


def _check_config(
    base: BlockModel,
    num_steps: int,
    new_layers_per_step: Sequence[Sequence[str]],
    mode: str,
    side_module: str,
    stem_head: str,
) -> None:
    """Refuse a malformed joint-model spec before any module is built, naming the valid values."""
    if mode not in JOINT_MODES:
        raise Seq2FinalError(f"unknown joint mode '{mode}'; valid: {', '.join(JOINT_MODES)}")
    if stem_head not in STEM_HEAD_MODES:
        raise Seq2FinalError(
            f"unknown stem_head '{stem_head}'; valid: {', '.join(STEM_HEAD_MODES)}"
        )
    if mode == "side_tune" and side_module not in side_module_kinds(base):
        raise Seq2FinalError(
            f"side module kind '{side_module}' does not exist for {base.arch}; "
            f"valid: {', '.join(side_module_kinds(base))}"
        )
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise Seq2FinalError(f"num_steps must be a positive integer, got {num_steps!r}")
    if isinstance(new_layers_per_step, str) or len(new_layers_per_step) != num_steps - 1:
        raise Seq2FinalError(
            f"new_layers_per_step needs one list per step 1..{num_steps - 1} "
            f"({num_steps - 1} lists), got {new_layers_per_step!r}"
        )
    for t, new_layers in enumerate(new_layers_per_step, start=1):
        if isinstance(new_layers, str):
            raise Seq2FinalError(f"step {t}: expected a list of layer names, got '{new_layers}'")
        unknown = [name for name in new_layers if name not in base.layer_names]
        if unknown:
            raise Seq2FinalError(
                f"step {t}: unknown layer(s) {', '.join(unknown)}; "
                f"valid: {', '.join(base.layer_names)}"
            )
        if len(set(new_layers)) != len(new_layers):
            raise Seq2FinalError(f"step {t}: a layer is listed twice in {list(new_layers)}")
