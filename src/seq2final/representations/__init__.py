"""Feature Forgetting's data-efficiency curves, in one place (docs/representations.md): a model
fine-tuned (FT) or probed (LP) on nested subsets of the final step's training images
(:mod:`.fit`), every historical state of a run given its curves under resumable keys
(:mod:`.train`), the curves and P_rep tabulated over seeds (:mod:`.tables`) and drawn
(:mod:`.figures`). The ``representations`` pipeline and ``evaluate``'s and ``visualize``'s
curve nodes call these."""
