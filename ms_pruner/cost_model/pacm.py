"""PaCM as a MetaSchedule cost model (``cost_model=PaCM()``), with MoA momentum adaptation."""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import time
from typing import Dict, List, Optional

import numpy as np
import torch
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from ..analysis import ANALYSES, StaticAnalyzer
from ..errors import UserError
from ..intrinsics import register_tensor_intrinsics
from .knobs import schedule_knobs
from .net import PaCMNet
from .residual import GatedResidual, TreeSettings
from .tokens import BLOCK_SLOTS, PATTERNS, TOKEN_DIM, TokenExtractor
from .training import FitReport, Sample, fit, margin_over_prior, predict_scores, priors

MODEL_FORMAT = "ms_pruner.pacm"
MODEL_VERSION = 2
READABLE_VERSIONS = (1, 2)
RESIDUALS = ("trees", "transformer")
MOA_MOMENTUM = 0.9
MOA_GATE_ENV = "MS_PRUNER_MOA_GATE"


def moa_gated() -> bool:
    """Whether MoA's momentum net gives way to the analyzer once it has ranked the run's newly measured
    records worse (``MS_PRUNER_MOA_GATE``, on unless "0"; off: it always predicts, as in MoA-Pruner)."""
    return os.environ.get(MOA_GATE_ENV, "1") != "0"


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _task_key(mod) -> str:
    return str(int(tvm_ffi.structural_hash(mod)))


class PaCMCore:
    """The model state without MetaSchedule plumbing: samples, the learned residual, training, prediction.

    Both residuals start from the analyzer's prior. ``trees`` (the default without momentum) are
    gradient-boosted ranking trees over the analyzer's terms and the candidate's decisions, gated on
    the run's later records (residual.py); ``transformer`` is the pattern-token network (net.py),
    the one MoA adapts and ``ms-pruner train`` pretrains.

    ``momentum`` (transformer only) enables MoA: the online net is re-initialised from the momentum
    (EMA) net before each fine-tune, the EMA net then moves ``1 - momentum`` of the way to the tuned
    weights, and the EMA net is the one that predicts (Siamese-style), so one noisy round cannot
    derail the model. Like the trees' gate it answers to the run's own records (``moa_gated``):
    before each fine-tune the momentum net and the analyzer alone rank the records measured since
    the last one, which neither has trained on, and the momentum net predicts while its summed
    margin over the analyzer (``training.margin_over_prior``) is not negative, the analyzer after.
    """

    def __init__(self, momentum: Optional[float] = None, time_budget_s: float = 8.0, max_epochs: int = 60,
                 seed: int = 0, device: Optional[torch.device] = None, residual: Optional[str] = None):
        residual = residual or ("transformer" if momentum is not None else "trees")
        if residual not in RESIDUALS:
            raise UserError(f"unknown PaCM residual '{residual}'; choose {' or '.join(RESIDUALS)}")
        if residual == "trees" and momentum is not None:
            raise UserError("MoA momentum adapts the transformer residual; trees have no momentum copy")
        self.residual = residual
        self.trees = GatedResidual(seed=seed)
        torch.manual_seed(seed)
        self.device = device or default_device()
        self.net = PaCMNet().to(self.device)
        self.ema: Optional[PaCMNet] = None
        self.momentum = momentum
        self.time_budget_s = time_budget_s
        self.max_epochs = max_epochs
        self.seed = seed
        self.samples: List[Sample] = []
        self.extractors: Dict[str, TokenExtractor] = {}
        self.last_fit: Optional[FitReport] = None
        self.updates = 0
        self.momentum_margin = 0.0
        self.judged_samples = 0

    # -- features -------------------------------------------------------------------------
    def extractor(self, target) -> TokenExtractor:
        """The target's token extractor, whose analyses the search's own analyzer shares (``ANALYSES``):
        a verified draft member, and a measured one, was analyzed when the draft scored it."""
        key = str(target)
        if key not in self.extractors:
            self.extractors[key] = TokenExtractor(StaticAnalyzer.for_target(target, memory=ANALYSES))
        return self.extractors[key]

    def featurize(self, schedules, target) -> List[Sample]:
        """Samples of post-processed Schedules (their traces hold the decisions the knobs read)."""
        extractor = self.extractor(target)
        samples = []
        for sch in schedules:
            tokens, prior = extractor.extract(sch.mod)
            samples.append(Sample(tokens=tokens, prior=prior, latency_s=math.inf, task="",
                                  knobs=schedule_knobs(sch.trace)))
        return samples

    # -- learning -------------------------------------------------------------------------
    def add(self, samples: List[Sample]) -> None:
        self.samples.extend(samples)

    def train(self, offline: bool = False) -> Optional[FitReport]:
        """Fit on every sample so far; ``offline`` (``ms-pruner train``) fits trees without the gate."""
        if len(self.samples) < 2:
            return None
        if self.residual == "trees":
            start = time.perf_counter()
            fit_trees = self.trees.pretrain if offline else self.trees.fit
            fit_trees(tree_features(self.samples), priors(self.samples),
                      np.array([s.latency_s for s in self.samples]), [s.task for s in self.samples])
            self.updates += 1
            self.last_fit = FitReport(epochs=self.trees.chosen.rounds if self.trees.chosen else 0,
                                      seconds=time.perf_counter() - start, first_loss=math.nan, last_loss=math.nan)
            return self.last_fit
        if self.momentum is not None:
            if self.ema is None:
                self.ema = copy.deepcopy(self.net)
            self.momentum_margin += margin_over_prior(self.ema, self.samples[self.judged_samples:], self.device)
            self.judged_samples = len(self.samples)
            self.net.load_state_dict(self.ema.state_dict())
        self.last_fit = fit(self.net, self.samples, self.device, time_budget_s=self.time_budget_s,
                            max_epochs=self.max_epochs, seed=self.seed + self.updates)
        if self.momentum is not None:
            with torch.no_grad():
                for ema_param, param in zip(self.ema.parameters(), self.net.parameters()):
                    ema_param.mul_(self.momentum).add_(param, alpha=1.0 - self.momentum)
        self.updates += 1
        return self.last_fit

    @property
    def gated_to_analyzer(self) -> bool:
        """Whether MoA's gate has the analyzer predict in place of the momentum net."""
        return self.momentum is not None and moa_gated() and self.momentum_margin < 0

    @property
    def predictor(self) -> PaCMNet:
        return self.ema if self.momentum is not None and self.ema is not None else self.net

    def scores(self, samples: List[Sample]) -> np.ndarray:
        if self.residual == "trees":
            return self.trees.scores(tree_features(samples), priors(samples))
        if self.gated_to_analyzer:
            return priors(samples)
        return predict_scores(self.predictor, samples, self.device)

    # -- persistence ----------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "format": MODEL_FORMAT,
            "version": MODEL_VERSION,
            "config": dict(self.net.config),
            "net": {k: v.detach().cpu() for k, v in self.net.state_dict().items()},
            "ema": {k: v.detach().cpu() for k, v in self.ema.state_dict().items()} if self.ema else None,
            "trained_samples": len(self.samples),
            "updates": self.updates,
            "momentum_margin": self.momentum_margin,
            "residual": self.residual,
            "trees": _tree_state(self.trees),
        }

    def save(self, path: str) -> None:
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        torch.save(self.state(), path)

    def load(self, path: str, as_pretrained: bool = False) -> None:
        state = read_model_file(path)
        self.residual = state.get("residual", "transformer")
        if self.residual == "trees" and self.momentum is not None:
            raise UserError(f"'{path}' holds a trees PaCM; MoA adapts a transformer one (ms-pruner train makes it)")
        trees = state.get("trees") or {}
        self.trees.load_bytes(bytes(trees["booster"].numpy().tobytes()) if "booster" in trees else None,
                              TreeSettings(**trees["settings"]) if "settings" in trees else None,
                              as_pretrained=as_pretrained)
        net = PaCMNet(**state["config"]).to(self.device)
        net.load_state_dict(state["net"])
        self.net = net
        if as_pretrained or state.get("ema") is None:
            self.ema = copy.deepcopy(net) if self.momentum is not None else None
        else:
            self.ema = PaCMNet(**state["config"]).to(self.device)
            self.ema.load_state_dict(state["ema"])
            self.momentum_margin = float(state.get("momentum_margin", 0.0))


def read_model_file(path: str) -> dict:
    """Load and validate a PaCM file; anything wrong is one clear UserError line."""
    if not os.path.isfile(path):
        raise UserError(f"PaCM model file '{path}' does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pylint: disable=broad-except
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise UserError(f"corrupt PaCM model file '{path}': {first}") from None
    if not isinstance(state, dict) or state.get("format") != MODEL_FORMAT:
        raise UserError(f"'{path}' is not a PaCM model file (no '{MODEL_FORMAT}' header)")
    if state.get("version") not in READABLE_VERSIONS:
        raise UserError(f"PaCM model file '{path}' has version {state.get('version')}; this ms_pruner reads "
                        f"versions {' and '.join(map(str, READABLE_VERSIONS))}")
    if state.get("config", {}).get("token_dim") != TOKEN_DIM:
        raise UserError(f"PaCM model file '{path}' was trained on {state.get('config', {}).get('token_dim')}-wide "
                        f"tokens; this ms_pruner makes {TOKEN_DIM}-wide tokens")
    try:
        PaCMNet(**state["config"]).load_state_dict(state["net"])
    except Exception as err:  # pylint: disable=broad-except
        raise UserError(f"incompatible PaCM model file '{path}': {str(err).splitlines()[0][:160]}") from None
    return state


def pretrained_momentum(path: Optional[str]) -> Optional[float]:
    """How a tuning run starts from a ``ms-pruner train`` file: a transformer with MoA's momentum,
    trees (a warm start for the gate) and no file without."""
    if not path:
        return None
    return MOA_MOMENTUM if read_model_file(path).get("residual", "transformer") == "transformer" else None


def tree_features(samples: List[Sample]) -> np.ndarray:
    """The trees' inputs: the analyzer's terms (the summary token's slots) and the decisions."""
    start = len(PATTERNS) + BLOCK_SLOTS
    return np.stack([np.concatenate([s.tokens[-1, start:], s.knobs]) for s in samples]).astype(np.float32)


def _tree_state(trees: GatedResidual) -> dict:
    raw = trees.to_bytes()
    if raw is None:
        return {}
    return {"booster": torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone(),
            "settings": dataclasses.asdict(trees.chosen)}


def _latency(result) -> float:
    if result.error_msg is not None or not result.run_secs:
        return math.inf
    secs = [float(x) for x in result.run_secs]
    value = sum(secs) / len(secs)
    return value if value < 1e9 else math.inf


@derived_object
class PaCM(PyCostModel):
    """The verify model for MetaSchedule (``ms.tune_tir(cost_model=PaCM())``): the analyzer's
    estimate plus a learned residual (``residual``: ``trees`` by default, ``transformer``).

    ``pretrained``: a file from ``ms-pruner train`` to start from. ``momentum`` (e.g. 0.9) turns on
    MoA for the transformer: fine-tune online from a momentum copy that does the predicting.
    ``time_budget_s`` bounds every transformer ``update``.
    """

    def __init__(self, pretrained: Optional[str] = None, momentum: Optional[float] = None,
                 time_budget_s: float = 8.0, max_epochs: int = 60, seed: int = 0, residual: Optional[str] = None):
        super().__init__()
        register_tensor_intrinsics()  # before ms.tune_tir's TuneContext imports them, ten times slower
        self.core = PaCMCore(momentum=momentum, time_budget_s=time_budget_s, max_epochs=max_epochs, seed=seed,
                             residual=residual)
        self.update_calls = 0
        if pretrained:
            self.core.load(pretrained, as_pretrained=True)

    @property
    def description(self) -> str:
        """What ranks now, for round logs: PaCM, MoA's PaCM, or MoA's gate's analyzer."""
        if self.core.momentum is None:
            return "PaCM"
        return "MoA PaCM, gated to the analyzer" if self.core.gated_to_analyzer else "MoA PaCM"

    def load(self, path: str) -> None:
        self.core.load(path)

    def save(self, path: str) -> None:
        self.core.save(path)

    def update(self, context, candidates, results) -> None:
        self.update_calls += 1
        samples = self.core.featurize([c.sch for c in candidates], context.target)
        task = _task_key(context.mod)
        for sample, result in zip(samples, results):
            sample.latency_s = _latency(result)
            sample.task = task
        self.core.add(samples)
        self.core.train()

    def predict(self, context, candidates) -> np.ndarray:
        samples = self.core.featurize([c.sch for c in candidates], context.target)
        return positive_scores(self.core.scores(samples))


def positive_scores(raw: np.ndarray) -> np.ndarray:
    """exp(s - max s) in (0, 1]: same order, and positive as EvolutionarySearch's sampling needs."""
    if raw.size == 0:
        return raw.astype("float64")
    return np.exp(raw - np.max(raw)).astype("float64")
