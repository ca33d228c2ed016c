"""Model zoo: the paper's 12 architectures, side modules, the joint model and weight-space paths.

Layers are addressed by name (``conv1``, ``layer1`` ... ``layerK``, ``fc``) everywhere: freezing,
fine-tuning stages, side modules and the joint model's sharing all use these names.
"""

from seq2final.models.architectures import (
    ARCHITECTURES,
    PARAMETER_CONVENTIONS,
    Architecture,
    BasicBlock,
    BlockGeometry,
    BlockModel,
    ClassifierHead,
    ConvBN,
    DenseBlock,
    Stem,
    architecture,
    build_model,
    count_parameters,
    decayed_parameters,
    forward_macs,
    layer_names,
    set_dropout,
    set_trainable,
    squared_weight_norm,
    sum_of_squares,
)
from seq2final.models.joint import JOINT_MODES, STEM_HEAD_MODES, JointModel
from seq2final.models.selection import (
    ParameterChoice,
    biases,
    choose_trainable,
    in_modules,
    of_type,
)
from seq2final.models.side_modules import (
    SIDE_MODULES,
    build_side_module,
    fresh_copy,
    side_module_kinds,
)
from seq2final.models.transforms import (
    OUTPUT_TRANSFORMS,
    TemperatureScaling,
    TransformedModel,
    network_of,
    output_transform,
)
from seq2final.models.weights import interpolate, scale_side_modules

__all__ = [
    "ARCHITECTURES",
    "OUTPUT_TRANSFORMS",
    "TemperatureScaling",
    "TransformedModel",
    "network_of",
    "output_transform",
    "JOINT_MODES",
    "PARAMETER_CONVENTIONS",
    "SIDE_MODULES",
    "STEM_HEAD_MODES",
    "BasicBlock",
    "BlockGeometry",
    "BlockModel",
    "ClassifierHead",
    "ConvBN",
    "DenseBlock",
    "Stem",
    "JointModel",
    "Architecture",
    "ParameterChoice",
    "architecture",
    "biases",
    "choose_trainable",
    "build_model",
    "build_side_module",
    "count_parameters",
    "decayed_parameters",
    "forward_macs",
    "fresh_copy",
    "in_modules",
    "interpolate",
    "layer_names",
    "of_type",
    "scale_side_modules",
    "set_dropout",
    "set_trainable",
    "side_module_kinds",
    "squared_weight_norm",
    "sum_of_squares",
]
