"""The import path of models registered before the package was split into layers.

Their pickles name ``seq2final.serving.ImageClassifier``; this keeps that name loading the class,
which now lives in :mod:`seq2final.tracking.pyfunc`.
"""

from seq2final.tracking.pyfunc import ImageClassifier, predict_probabilities

__all__ = ["ImageClassifier", "predict_probabilities"]
