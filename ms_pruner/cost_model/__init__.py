"""PaCM, the verify model: the static analyzer's estimate plus a learned residual (gated boosted
trees by default; a pattern-token transformer with MoA momentum adaptation).

``PaCM()`` is a MetaSchedule cost model (``ms.tune_tir(..., cost_model=PaCM())``); ``PaCMCore``
is the same model without MetaSchedule plumbing. See docs/cost_model.md.
"""

from .analyzer_model import PSACostModel
from .pacm import PaCM, PaCMCore, positive_scores, read_model_file
from .tokens import TOKEN_DIM, TokenExtractor
from .training import Sample, fit, lambda_rank_loss, ranking_loss

__all__ = [
    "PaCM",
    "PaCMCore",
    "PSACostModel",
    "Sample",
    "TOKEN_DIM",
    "TokenExtractor",
    "fit",
    "lambda_rank_loss",
    "positive_scores",
    "ranking_loss",
    "read_model_file",
]
