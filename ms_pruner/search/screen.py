"""Sampling a GPU design space without replaying the schedules VerifyGPUCode would reject.

Most random tensor-core schedules are invalid: of 150 fresh samples of the 4096^3 fp16 matmul
for the H100 target, VerifyGPUCode rejected 137 (too much shared memory or too many threads a
block), and of the conv2d layer's 150, 132, each after a 28-40 ms trace replay and a 12-45 ms check
(docs/results/cpu/screen/sampling.json).
MetaSchedule's sampler pays that for every draw. Both limits depend only on the tile splits:
threads a block is a product of tile factors, shared memory close to one (a sum of products,
padded). So the sampler here draws the decisions first, with MetaSchedule's own distributions
(``Schedule.sample_perfect_tile`` on a stand-in loop of the same extent; categorical choices by
their probabilities), predicts log2(threads) and log2(shared bytes) from the log2 tile factors by
least squares fitted on the draws it has replayed, and replays only the draws whose prediction,
lowered by the most the fit has overestimated any replayed draw, stays within the target's
limits. A share of the screened-out draws (``audit_share``) is replayed anyway: the fit learns
from the region it rejects, and a valid one among them, a false rejection, is counted and kept.
Until a sketch has enough replayed draws to fit, nothing is screened.
"""

from __future__ import annotations

import math
import random
from typing import Dict, List, Optional

import numpy as np
from tvm import te
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import Schedule, Trace

from .candidates import structural_key
from .config import MIN_FRESH_SAMPLES
from .droplet import TILE_SAMPLES

SUPPORTED_DECISIONS = (*TILE_SAMPLES, "SampleCategorical")
SLACK_LOG2 = 0.1  # screened out only when the lowered prediction exceeds a limit by 7% more
MIN_EXTRA_ROWS = 4  # replayed draws beyond the fit's unknowns before a sketch is screened
AUDIT_SHARE = 0.05  # screened-out draws replayed anyway


class SketchDecisions:
    """A sketch's sampling instructions, their loop extents, and the fits over its replayed draws.

    Each fitted quantity is log2 of a product of tile factors, up to a shared buffer's padding:
    threads a block, and each shared buffer's bytes (``measures``: "threads", ("operand", name),
    ("staging", name)); shared memory a block is the larger of the two sets' sums.
    """

    def __init__(self, trace, extents: List[int]):
        self.trace = trace
        self.insts = [inst for inst in trace.insts if inst.kind.name in SUPPORTED_DECISIONS]
        self.signature = _signature(self.insts)  # how ``ScreenedSampler.screens`` knows its traces
        self._whole_signature = None
        self.extents = extents  # per tile-split instruction, in order
        self.rows: List[List[float]] = []
        self.measured: List[Dict] = []
        self.fits: Dict = {}  # quantity -> (weights, largest overestimate over the replayed draws)

    @property
    def whole_signature(self) -> tuple:
        """Every instruction's kind and attributes (the index maps printed): told apart from a sketch
        that samples alike; computed when first asked."""
        if self._whole_signature is None:
            self._whole_signature = _signature(self.trace.insts)
        return self._whole_signature

    def features(self, decisions: Dict) -> List[float]:
        """1 and the log2 tile factors but each split's outermost, which the others and the extent fix."""
        row = [1.0]
        for inst in self.insts:
            if inst.kind.name in TILE_SAMPLES:
                row.extend(math.log2(max(1, int(f))) for f in list(decisions[inst])[1:])
        return row

    @property
    def fitted(self) -> bool:
        return bool(self.fits)

    def rows_to_fit(self) -> int:
        """Replayed draws this sketch still needs before it is fitted."""
        unknowns = 1 + sum(int(i.attrs[0]) - 1 for i in self.insts if i.kind.name in TILE_SAMPLES)
        return max(0, unknowns + MIN_EXTRA_ROWS - len(self.rows))

    def learn(self, row: List[float], measures: Dict) -> None:
        self.rows.append(row)
        self.measured.append({k: math.log2(max(1.0, v)) for k, v in measures.items()})

    def refit(self) -> None:
        """Least squares of each quantity every replayed draw has, once there are enough draws."""
        if not self.rows or self.rows_to_fit() > 0:
            return
        keys = set(self.measured[0]).intersection(*self.measured[1:])
        x = np.array(self.rows)
        self.fits = {}
        for key in keys:
            y = np.array([m[key] for m in self.measured])
            weights = np.linalg.lstsq(x, y, rcond=None)[0]
            self.fits[key] = (weights, max(0.0, float((x @ weights - y).max())))

    def exceeds(self, row: List[float], limits: tuple) -> bool:
        """Whether the draw surely breaks a limit (threads, shared bytes a block): each quantity
        predicted less the most its fit overestimated a replayed draw, and shared memory the
        larger sum of those lowered buffer bytes."""
        if not self.fits:
            return False
        x = np.array(row)
        lowest = {key: float(x @ weights) - over for key, (weights, over) in self.fits.items()}
        if "threads" in lowest and lowest["threads"] > math.log2(limits[0]) + SLACK_LOG2:
            return True
        sums = [sum(2.0 ** v for k, v in lowest.items() if k[0] == side) for side in ("operand", "staging")]
        return max(sums) > limits[1] * 2.0 ** SLACK_LOG2


class ScreenedSampler:
    """Fresh valid schedules of a GPU ``DesignSpace``, replaying only draws that may be valid.

    ``limits``: (threads a block, shared bytes a block) that VerifyGPUCode enforces on the target.
    ``stats`` counts, over the sampler's life, the draws, the ones replayed, screened out, audited,
    the valid ones and the false rejections (valid draws the screen would have dropped).
    """

    def __init__(self, space, analyzer, limits, audit_share: float = AUDIT_SHARE, saturation: int = 0):
        self.space = space
        self.analyzer = analyzer
        self.limits = tuple(float(v) for v in limits)
        self.audit_share = audit_share
        self.saturation, self.exhausted = saturation, False
        self.sketches: List[Optional[SketchDecisions]] = []
        for sketch in space.sketches:
            if any(i.kind.name.startswith("Sample") and i.kind.name not in SUPPORTED_DECISIONS for i in sketch.insts):
                self.sketches.append(None)
                continue
            extents = _tile_extents(space.mod, Trace(sketch.insts, {}))
            self.sketches.append(SketchDecisions(sketch, extents) if extents is not None else None)
        self.supported = bool(self.sketches) and all(s is not None for s in self.sketches)
        self.stats = dict(drawn=0, replayed=0, screened=0, audited=0, valid=0, false_rejections=0)
        self._tiles = {}

    @classmethod
    def for_target(cls, space, analyzer, saturation: int = 0) -> Optional["ScreenedSampler"]:
        """The sampler for ``space`` under its target's VerifyGPUCode limits; None where a sketch
        samples a decision it does not draw."""
        limits = (int(space.target.attrs.get("max_threads_per_block", 1024)), analyzer.max_shared_memory)
        sampler = cls(space, analyzer, limits, saturation=saturation)
        return sampler if sampler.supported else None

    def sample(self, count: int, rng: random.Random) -> List:
        """Up to ``count`` distinct valid schedules (post-processed), from at most 40 draws a
        schedule asked (the replays on the space's threads, the analyzer reading each before
        VerifyGPUCode: ``DesignSpace.replay_checked``). With ``saturation`` it stops, ``exhausted``,
        once that many valid draws in a row, and 8 a schedule found, gave no new schedule: a space
        of a few (a model's reshape or cast) otherwise took the whole budget, 5160 draws, 17 s."""
        seen = set()
        found: List = []
        budget = 40 * count + 40
        since_new = 0
        while len(found) < count and budget > 0 and not self._saturated(since_new, len(found)):
            size = max(2 * int(self.space.context.num_threads), 2 * (count - len(found)))
            if not all(s.fitted for s in self.sketches):  # learning: no more draws than the fits need
                size = max(int(self.space.context.num_threads),
                           sum(s.rows_to_fit() for s in self.sketches) + len(self.sketches))
            size = min(budget, size)
            budget -= size
            jobs = []  # (sketch, decisions, row, audited)
            for _ in range(size):
                sketch = self.sketches[self.space.pick_sketch(rng)]
                decisions = self.draw(sketch, rng)
                row = sketch.features(decisions)
                self.stats["drawn"] += 1
                audited = False
                if sketch.exceeds(row, self.limits):
                    self.stats["screened"] += 1
                    if rng.random() >= self.audit_share:
                        continue
                    audited = True
                    self.stats["audited"] += 1
                jobs.append((sketch, decisions, row, audited))
            seeds = [rng.randrange(1, 1 << 30) for _ in jobs]
            traces = [Trace(sketch.trace.insts, decisions) for sketch, decisions, *_ in jobs]
            results = self.space.on_threads(lambda trace, seed: self.space.replay_checked(trace, seed, self.analyzer),
                                            traces, seeds)
            for (sketch, _, row, audited), (sch, measures) in zip(jobs, results):
                self.stats["replayed"] += 1
                if measures:
                    sketch.learn(row, measures)
                if sch is None:
                    continue
                self.stats["valid"] += 1
                self.stats["false_rejections"] += int(audited)
                key = structural_key(sch.mod)
                since_new += 1
                if key not in seen and len(found) < count:
                    seen.add(key)
                    found.append(sch)
                    since_new = 0
            for sketch in {id(s): s for s, *_ in jobs}.values():
                sketch.refit()
        self.exhausted = self._saturated(since_new, len(found))
        return found

    def _saturated(self, since_new: int, found: int) -> bool:
        return 0 < self.saturation <= since_new and since_new >= 8 * found

    def screens(self, trace) -> Optional[bool]:
        """Whether the screen would drop ``trace`` unreplayed (a mutated or moved schedule's trace, its
        postprocessors removed): its sampling instructions are matched in order to each sketch's (and
        where two sketches sample alike, every instruction), and it is dropped where every matching
        sketch's fit says it breaks a limit. None where no fitted sketch matches or a decision is missing."""
        insts = [inst for inst in trace.insts if inst.kind.name in SUPPORTED_DECISIONS]
        signature = _signature(insts)
        matches = [s for s in self.sketches if s is not None and s.fitted and s.signature == signature]
        if len(matches) > 1:  # sketches that sample alike (the matmul's two layouts of B): by every instruction
            whole = _signature(trace.insts)
            matches = [s for s in matches if s.whole_signature == whole] or matches
        verdicts = []
        for sketch in matches:
            decisions = {own: trace.decisions.get(inst) for own, inst in zip(sketch.insts, insts)}
            if any(value is None for value in decisions.values()):
                return None
            verdicts.append(sketch.exceeds(sketch.features(decisions), self.limits))
        return all(verdicts) if verdicts else None

    def draw(self, sketch: SketchDecisions, rng: random.Random) -> Dict:
        """One random decision per sampling instruction of ``sketch`` (tile splits by factor, the rest
        by their candidates), drawn without a replay."""
        decisions, tiles = {}, iter(sketch.extents)
        for inst in sketch.insts:
            if inst.kind.name in TILE_SAMPLES:
                decisions[inst] = self._tile(inst, next(tiles), rng)
            else:
                probs = [float(p) for p in inst.attrs[1]]
                decisions[inst] = rng.choices(range(len(probs)), weights=probs)[0]
        return decisions

    def _tile(self, inst, extent: int, rng: random.Random) -> List[int]:
        """MetaSchedule's tile draw of ``inst`` (a perfect or a partitioned split), on a stand-in loop
        of ``extent`` (renewed now and then so its trace stays short)."""
        key = (extent, inst.kind.name, tuple(int(a) for a in inst.attrs))
        entry = self._tiles.get(key)
        if entry is None or entry[2] >= 256:
            entry = [*_stand_in_loop(extent, rng.randrange(1, 1 << 30)), 0]
            self._tiles[key] = entry
        sch, loop, _ = entry
        entry[2] += 1
        if inst.kind.name == "SamplePartitionedTile":
            n, position, multiple = (int(a) for a in inst.attrs)
            draws = sch.sample_partitioned_tile(loop, n=n, partition_pos=position, innerpart_factor=multiple)
        else:
            draws = sch.sample_perfect_tile(loop, n=int(inst.attrs[0]), max_innermost_factor=int(inst.attrs[1]))
        return [int(sch.get(rv)) for rv in draws]


def fresh_samples(sampler: Optional[ScreenedSampler], inner, wanted: int, attempts: int,
                  rng: random.Random) -> List:
    """``wanted`` fresh valid schedules: the screened sampler's, when there is one, and for any it
    fell short of MetaSchedule's C++ sampler (``inner``'s SampleInitPopulation, ``attempts`` draws a
    pass; it stops a pass once MIN_FRESH_SAMPLES are valid, so at least 4 passes, more for more),
    unless the screened sampler found its space exhausted (its draws would come back again)."""
    fresh = sampler.sample(wanted, rng) if sampler is not None and wanted > 0 else []
    if sampler is not None and sampler.exhausted:
        return fresh
    for _ in range(max(4, wanted // MIN_FRESH_SAMPLES + 1)):
        if len(fresh) >= wanted:
            break
        fresh.extend(ms._ffi_api.SearchStrategyEvolutionarySearchSampleInitPopulation(  # pylint: disable=protected-access
            inner, attempts - len(fresh)))
    return fresh


def _signature(insts) -> tuple:
    return tuple((inst.kind.name, str(inst.attrs)) for inst in insts)


def _stand_in_loop(extent: int, seed: int):
    src = te.placeholder((extent,), name="src")
    dst = te.compute((extent,), lambda i: src[i], name="dst")
    sch = Schedule(te.create_prim_func([src, dst]), seed=seed)
    return sch, sch.get_loops(sch.get_sblock("dst"))[0]


def _tile_extents(mod, trace) -> Optional[List[int]]:
    """The extent of the loop each tile-split instruction of ``trace`` splits, read while
    replaying it once; None when a replay fails or an extent is not a constant."""
    sch = Schedule(mod, seed=1, error_render_level="none")
    extents: List[Optional[int]] = []

    def provider(inst, inputs, attrs, decision):
        if inst.kind.name in TILE_SAMPLES:
            extent = sch.get(inputs[0]).extent
            extents.append(int(extent) if hasattr(extent, "value") or isinstance(extent, int) else None)
        return decision

    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    except Exception:  # pylint: disable=broad-except
        return None
    return None if any(e is None for e in extents) else extents
