"""Marginals as releases of the engine: the marginal stages and how the engine runs them.

A marginal of a set of columns (a *clique*) is the count of records in each cell of their discrete domain
(:class:`~mmdsynth.data.discrete.Domain`): a sum of one-hot vectors, one per record, each of norm 1. Replacing one
record takes 1 from one cell and adds 1 to another (or changes nothing), so the counts of ``k`` cliques have L2
sensitivity ``sqrt(2 k)`` jointly, and an L1 distance between a clique's counts and any public vector changes by at
most 2. The record count m is public, as for every release.

A method declares **stages** as data (:class:`Measure`, :class:`SelectTree`, :class:`Select`) from a generator
(its *planner*) and learns from their results; :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run` executes them,
in order, with the executors here (:data:`MARGINAL_STAGES`), through a
:class:`~mmdsynth.privacy.engine.ZCDPEngine` (a filter whose total was calibrated and charged before any read): the
planner never sees a private row, only noisy releases, and each stage's share of rho is the planner's decision
from public facts and earlier releases. Every read of the private rows is here, in :func:`clique_counts` (summed
where the data lives: memory, stream, Ray, as the embedding's sums), and each stage is checked before it reads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from ..statistics.tables import CliqueCounts, clique_key
from ..errors import InvalidParameterError

#: the L1 distance between a clique's counts and a public vector moves by at most this when one record is replaced
L1_SENSITIVITY = 2.0
#: how :class:`SelectTree` scores a pair: "model" (MST's: the L1 distance of its counts from the public estimate) or
#: "dependence" (the L1 distance of its counts from the product of their own margins: :func:`dependence_sensitivity`)
TREE_SCORES = ("model", "dependence")


def dependence_sensitivity(m: int) -> float:
    """The most one replaced record moves a pair's dependence score ||C - r c^T / m||_1, where C is the pair's
    counts (summing to the public m), r and c its row and column sums. Replacing a record moves C by -e_ij + e_kl
    (L1 <= 2), r by -e_i + e_k and c by -e_j + e_l, so r c^T / m by (r dc^T + dr c^T + dr dc^T) / m, whose L1 is at
    most (2m + 2m + 4) / m: 6 + 4/m in all (a record of a person table weighs 1 / its person's rows, m counts the
    persons, and the same bound holds: dr and dc have L1 at most 2)."""
    return 6.0 + 4.0 / m


@dataclass(frozen=True)
class Measure:
    """Release the counts of ``cliques`` with one Gaussian release costing ``rho`` (joint sensitivity
    ``sqrt(2 len(cliques))``). Result: {clique: noisy counts (float64, the clique's cells in row-major order)} and
    the noise std, as ``(noisy, std)``."""

    cliques: tuple
    rho: float
    what: str = "marginals"
    #: the domain to count in (public, the same schema; e.g. :meth:`~mmdsynth.data.discrete.Domain.fine` for 1-way
    #: marginals at the full grid's resolution); None: the run's domain
    domain: object = field(default=None, repr=False)


@dataclass(frozen=True)
class SelectTree:
    """MST's selection: ``len(attributes) - 1`` rounds of the exponential mechanism, each costing ``rho / rounds``,
    each choosing among the ``candidates`` (pairs of attributes) that join two parts of the tree built so far the one
    scored highest. ``score`` "model" (MST's): the L1 distance of the pair's counts from the public ``estimates`` (the
    model fitted to earlier releases; sensitivity 2); "dependence": the L1 distance of its counts from the product
    of their own margins, how far the pair is from independent (``estimates`` unused; sensitivity
    :func:`dependence_sensitivity`, about 3 times MST's, so more noise at the same rho). MST's score favours a column
    whose own 1-way estimate is poor with every partner, and on wide tables its tree can gather most edges on that
    one column; the dependence score does not look at the estimates. Result: the chosen pairs, in order."""

    attributes: tuple
    candidates: tuple
    estimates: dict = field(repr=False)
    rho: float
    #: the domain to count in (as :class:`Measure`'s)
    domain: object = field(default=None, repr=False)
    score: str = "model"


@dataclass(frozen=True)
class Select:
    """AIM's selection: one exponential-mechanism draw costing ``rho`` among ``candidates``, scored
    ``weight * (L1 distance of the counts from the public estimate - penalty)`` with public ``weights`` and
    ``penalties``. Result: the chosen clique."""

    candidates: tuple
    estimates: dict = field(repr=False)
    rho: float
    weights: dict = field(default_factory=dict)
    penalties: dict = field(default_factory=dict)
    #: the domain to count in (as :class:`Measure`'s)
    domain: object = field(default=None, repr=False)


def clique_counts(source, domain, encoder, cliques) -> dict[str, np.ndarray]:
    """The exact counts of every clique (data-touching: the private rows are read here, summed on the source's
    engine, checked to add up to the public m)."""
    return source.total(CliqueCounts(domain, encoder, cliques))


def _check_cliques(domain, cliques) -> None:
    known = set(domain.attributes)
    for clique in cliques:
        if not clique or len(set(clique)) != len(clique) or not set(clique) <= known:
            raise InvalidParameterError(f"clique {clique!r} must name distinct attributes of the domain "
                                        f"{domain.attributes}.")


def _stage_domain(stage, domain, assumed: dict):
    """(domain, assumed) for a stage: its own domain when it names one (of the run's schema), else the run's."""
    if stage.domain is None:
        return domain, assumed
    if stage.domain.schema.to_dict() != domain.schema.to_dict():
        raise InvalidParameterError(f"a {type(stage).__name__} stage's domain must be of the run's schema.")
    source = ("public, from the schema" if stage.domain.grid == "public" else
              "public: the schema's grid cut by the released 1-way marginals")
    assumed = {k: v for k, v in assumed.items() if not k.startswith("domain (")}
    return stage.domain, {**assumed, f"domain ({source})": stage.domain.sizes}


def _measure(engine, source, stage: Measure, context: "StageContext"):
    domain, encoder, assumed = context
    domain, assumed = _stage_domain(stage, domain, assumed)
    _check_cliques(domain, stage.cliques)
    sensitivity = math.sqrt(2 * len(stage.cliques))
    counts = clique_counts(source, domain, encoder, stage.cliques)
    noisy = engine.gaussian(
        "marginals", {k: torch.as_tensor(v) for k, v in counts.items()}, sensitivity, rho=stage.rho,
        description=f"{stage.what}: cell counts of {len(stage.cliques)} clique(s) "
                    f"({', '.join(clique_key(c) for c in stage.cliques[:6])}{' ...' if len(stage.cliques) > 6 else ''})",
        assumed={**assumed, "sensitivity": f"sqrt(2 x {len(stage.cliques)} cliques): replacing a record moves one "
                                          f"count down and one up in each clique's counts"},
        n_records=source.n_records, computation=source.describe())
    return {tuple(k.split("|")): v.numpy() for k, v in noisy.items()}, engine.entries[-1].noise_std


def _l1_scores(counts: dict, estimates: dict, cliques) -> np.ndarray:
    return np.asarray([np.abs(counts[clique_key(c)] - np.asarray(estimates[c], dtype=np.float64).reshape(-1)).sum()
                       for c in cliques])


def pair_dependence(C: np.ndarray, m: float) -> float:
    """A pair's distance from independence, ||C - r c^T / m||_1: ``C`` its counts as a matrix, r and c their sums
    over its rows and columns, ``m`` the total they are scaled by."""
    return float(np.abs(C - np.outer(C.sum(axis=1), C.sum(axis=0)) / m).sum())


def _dependence_scores(counts: dict, domain, cliques, m: int) -> np.ndarray:
    """Each pair's :func:`pair_dependence` (its counts as a matrix over the public m)."""
    return np.asarray([pair_dependence(counts[clique_key((a, b))].reshape(domain.sizes[a], domain.sizes[b]), m)
                       for a, b in cliques])


def _tree_scores(stage: SelectTree, source, domain, encoder) -> tuple[dict, float, str, str]:
    """({pair: score}, its sensitivity, the score in words, why that sensitivity) for a tree selection: one read of
    every candidate."""
    counts = clique_counts(source, domain, encoder, stage.candidates)      # every candidate pair, one read
    if stage.score == "dependence":
        m = source.n_records
        sensitivity = dependence_sensitivity(m)
        return (dict(zip(stage.candidates, _dependence_scores(counts, domain, stage.candidates, m))), sensitivity,
                "farthest (L1) from the product of its own 1-way counts",
                f"6 + 4/m = {sensitivity:.6g}: replacing a record moves the counts by 2 in L1 and the product of "
                f"their sums over m by at most 4 + 4/m")
    return (dict(zip(stage.candidates, _l1_scores(counts, stage.estimates, stage.candidates))), L1_SENSITIVITY,
            "farthest (L1) from the model of the 1-way marginals",
            "2: replacing a record moves one count down and one up")


def _select_tree(engine, source, stage: SelectTree, context: "StageContext"):
    domain, encoder, assumed = context
    domain, assumed = _stage_domain(stage, domain, assumed)
    _check_cliques(domain, stage.candidates)
    if any(len(c) != 2 for c in stage.candidates):
        raise InvalidParameterError("SelectTree's candidates are pairs of attributes.")
    if stage.score not in TREE_SCORES:
        raise InvalidParameterError(f"SelectTree's score must be one of {TREE_SCORES}; got {stage.score!r}.")
    rounds = len(stage.attributes) - 1
    if rounds < 1:
        return []
    error, sensitivity, words, why = _tree_scores(stage, source, domain, encoder)
    part = {a: a for a in stage.attributes}                               # union-find over the attributes (public)

    def root(a):
        while part[a] != a:
            part[a] = part[part[a]]
            a = part[a]
        return a
    chosen = []
    for r in range(rounds):
        open_ = [c for c in stage.candidates if root(c[0]) != root(c[1])]
        if not open_:
            break
        pick = open_[engine.exponential(
            "selection", [error[c] for c in open_], sensitivity, rho=stage.rho / rounds,
            description=f"tree edge {r + 1} of {rounds} by {stage.score}: the pair whose counts are {words}, among "
                        f"{len(open_)} joining two parts of the tree",
            assumed={**assumed, "score sensitivity": why},
            n_records=source.n_records, computation=source.describe())]
        part[root(pick[0])] = root(pick[1])
        chosen.append(pick)
    return chosen


def _select(engine, source, stage: Select, context: "StageContext"):
    domain, encoder, assumed = context
    domain, assumed = _stage_domain(stage, domain, assumed)
    _check_cliques(domain, stage.candidates)
    weights = np.asarray([float(stage.weights.get(c, 1.0)) for c in stage.candidates])
    penalties = np.asarray([float(stage.penalties.get(c, 0.0)) for c in stage.candidates])
    if not (np.isfinite(weights).all() and (weights >= 0).all() and np.isfinite(penalties).all()):
        raise InvalidParameterError("Select's weights must be finite and >= 0, its penalties finite.")
    counts = clique_counts(source, domain, encoder, stage.candidates)
    scores = weights * (_l1_scores(counts, stage.estimates, stage.candidates) - penalties)
    del counts
    i = engine.exponential(
        "selection", scores, L1_SENSITIVITY * float(weights.max()), rho=stage.rho,
        description=f"the clique whose counts are farthest (weighted L1, less its size penalty) from the model, among "
                    f"{len(stage.candidates)}",
        assumed={**assumed, "score sensitivity": "2 x the largest weight: replacing a record moves one count down "
                                                 "and one up"},
        n_records=source.n_records, computation=source.describe())
    return stage.candidates[i]


class StageContext(NamedTuple):
    """What a run's marginal stages count in (public): the table's discrete ``domain`` and ``encoder``, and the
    public facts their ledger entries assume."""

    domain: object
    encoder: object
    assumed: dict


#: the marginal stages and their executors, run by :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run`
MARGINAL_STAGES = {Measure: _measure, SelectTree: _select_tree, Select: _select}
