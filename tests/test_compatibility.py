"""What users already have keeps working after the package was split into layers."""

import pickle

import torch

from seq2final.models import JointModel
from seq2final.models.storage import pack, unpack
from seq2final.tracking.pyfunc import ImageClassifier


def test_registered_models_pickled_under_the_old_class_path_still_load():
    """MLflow pickled the pyfunc model as ``seq2final.serving.ImageClassifier``."""
    new = pickle.dumps(ImageClassifier((3, 32, 32), "unit", None), protocol=0)
    assert b"seq2final.tracking.pyfunc\nImageClassifier" in new
    old = new.replace(b"seq2final.tracking.pyfunc\n", b"seq2final.serving\n")
    loaded = pickle.loads(old)
    assert type(loaded) is ImageClassifier
    assert (loaded.image_shape, loaded.input_scale, loaded.step) == ((3, 32, 32), "unit", None)


def test_joint_models_stored_with_the_old_side_module_key_still_load():
    """Payloads written before ``side_kind`` became ``side_module`` rebuild the same model."""
    torch.manual_seed(0)
    model = JointModel("resnet_1", 10, 2, [["layer1", "fc"]], "side_tune", "one_layer")
    payload = pack(model)
    payload["spec"]["side_kind"] = payload["spec"].pop("side_module")
    loaded = unpack(payload)
    assert loaded.side_module == "one_layer"
    images = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(images, 1), model.eval()(images, 1))
