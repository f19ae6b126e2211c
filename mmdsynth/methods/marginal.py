"""Marginal-based methods: MST (McKenna, Miklau, Sheldon 2021), through this library's engine.

The table is a discrete domain (:class:`~mmdsynth.data.discrete.Domain`: declared categories, numeric columns on a
public grid from their bounds). MST's plan, as stages the engine runs (:mod:`mmdsynth.privacy.marginals`), in zCDP
(:class:`~mmdsynth.privacy.engine.ZCDPEngine`: the total rho from (epsilon, delta), charged before any read):

1. every attribute's 1-way marginal, one Gaussian release with a third of rho;
2. a graphical model of those (post-processing), then a maximum spanning tree of attribute pairs chosen one edge
   at a time by the exponential mechanism (score: the L1 distance of the pair's counts from the model's), a third;
3. the chosen pairs' 2-way marginals, one Gaussian release with the last third.

The graphical model of all measurements (estimation and sampling) is the maintained **mbi 2.x** library
(a dependency of mmdsynth): post-processing of the release, with the public record count m as the known
total. Differences from the authors' script (`mechanisms/mst.py` of private-pgm): replace-one neighbours with m
public, as every release here (the authors' add/remove relation has half the sensitivities), secure noise and
selection randomness, no compression of rare cells (the public grid has at most ``max_cells`` cells).
"""
from __future__ import annotations

import itertools
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .. import choice
from ..data.discrete import DEFAULT_CELLS, Domain, simplex_projection
from ..generators.graphical import ModelMarginals, draw_codes, estimate, mbi
from ..data.encoding import TableEncoder
from ..data.private_schema import require_complete
from ..data.schema import Schema
from ..errors import ArtifactError, InvalidParameterError
from ..privacy.budget import BudgetFile
from ..privacy.engine import Facts, Sums
from ..privacy.ledger import PRIVACY_UNIT
from ..privacy.marginals import TREE_SCORES, Measure, Select, SelectTree
from ..release import META_FILE, Release
from ..validation import check_delta, check_epsilon, check_positive
from .base import as_schema, read_model_folder, write_model_folder
from .contract import Method, register
from .outline import BASE_BYTES, PlanOutline, release_words
from ..runtime import phase
from ..statistics.tables import CheckedRows, clique_key
from .tables import encoder_of, rows_per_person_stages, unit_shares

logger = logging.getLogger(__name__)

#: tensor names of the released counts: MARGINAL_PREFIX + "a|b"
MARGINAL_PREFIX = "marginal/"


def coarse_counts(domain: Domain, name: str, fine_counts) -> np.ndarray:
    """A fine 1-way measurement summed over the cells of ``domain`` (post-processing)."""
    return np.bincount(domain.coarse_of_fine(name), weights=np.asarray(fine_counts, dtype=np.float64),
                       minlength=domain.size(name))


def _tensor_name(i: int, clique) -> str:
    """The release's name for measurement ``i`` (a clique may be measured more than once)."""
    return f"{MARGINAL_PREFIX}{i}:{clique_key(clique)}"


def label_star(domain: Domain) -> tuple:
    """The label's pairs with every other attribute, in the attributes' order (the label is last): a public
    function of the schema. Empty when the schema has no label."""
    label = domain.schema.label
    return tuple((a, label) for a in domain.attributes if label and a != label)


class MarginalMethod(Method):
    """What the marginal methods share (MST, AIM and the hybrid; not a method itself): a discrete domain of the
    table (declared categories, numeric columns on a public grid of at most ``max_cells`` cells, ``grid``: "public",
    or "released": cut at equal mass of the released 1-way marginals), the fit as stages the engine runs
    (:meth:`planner`, each method's own) in one zCDP plan calibrated and charged before any read, the release, the
    graphical model estimated from it (mbi 2.x, ``iters`` mirror-descent iterations), synthetic rows drawn from it
    and the model folder. A method says what it measures (:meth:`planner`, :meth:`stage_outline`, :meth:`_check_plan`)
    and what it adds to the plan (:meth:`_engine`, :meth:`_more_stages`) or makes of the release (:meth:`_fitted`,
    :meth:`_modelled`)."""

    data_kinds = ("table",)
    kind_defaults = {"table": {"epsilon": 1.0}}
    param_help = {
        "max_cells": "numeric columns' cells on their public grid (from the declared bounds)",
        "iters": "mirror-descent iterations of the graphical model (post-processing)",
        "grid": '"public" (numeric cells from the declared bounds) or "released" (cut at equal mass of the released '
                "1-way marginals: post-processing, no extra budget)",
    }
    param_choices = {"grid": ("public", "released")}
    #: the release is made once at fit; sampling reads only the release (and the model estimated from it)
    releases_once = False
    generative = True
    takes_shards = True
    person_level = True

    @classmethod
    def dataset_defaults(cls, dataset: str, kind: str) -> dict:
        """The tabular benchmarks' privacy level (epsilon 1, delta 1e-5); no per-dataset settings."""
        return {"epsilon": 1.0, "delta": 1e-5}

    # -- fit --------------------------------------------------------------------------------------------
    def fit(self, X, y=None, *, label: str | None = None, schema=None, dataset: str = "", out=None,
            budget: BudgetFile | None = None, resume: bool = False, public_facts: dict | None = None,
            privacy_unit: str = PRIVACY_UNIT):
        """Fit on a table: ``fit(df, label=..., schema=...)``. ``out``: the model folder (release, model.json).
        Returns self."""
        self._check_input(X, y, resume)
        self._check_settings()
        self._run_table(X, label, schema, dataset=dataset, out=out, budget=budget, public_facts=public_facts,
                        privacy_unit=privacy_unit)
        return self

    def table_planner(self, schema: Schema, *, dataset: str = "", out=None, budget: BudgetFile | None = None,
                      public_facts: dict | None = None, privacy_unit: str = PRIVACY_UNIT, facts=None):
        """A table fit's planner, for :func:`~mmdsynth.privacy.engine.run_plan` on the table's rows (the method
        contract's: :func:`mmdsynth.fit` runs it after choosing the method from the rows' public ``facts``, which it
        then passes here): every refusal its settings and the schema can give is made here, before a row is read."""
        out = Path(out) if out is not None else None
        if out is not None and (out / "release" / META_FILE).exists():
            raise ArtifactError(f"{out} already holds a release; use a new folder.")
        s = self._check_settings()
        require_complete(schema)
        domain = Domain.of(schema, s.max_cells)
        self._check_plan(domain)
        privacy_unit = self._unit(schema, privacy_unit)    # one person, when the schema names a person column
        return self._fit_stages(schema, domain, out, dataset, budget, public_facts, privacy_unit, facts)

    def _check_settings(self):
        """The fit's settings (``settings_``), each refused before anything is read: the parameters' choices, epsilon,
        the estimation's iterations, the marginal extra installed."""
        s = self.settings_ = self.settings_for("table")
        check_epsilon(s.epsilon)
        check_positive(s.iters, "iters", integer=True)
        mbi()                                              # the extra is there before anything is read or charged
        return s

    def _fit_stages(self, schema, domain: Domain, out, dataset: str, budget, public_facts, privacy_unit: str,
                    facts=None):
        """The fit's planner (run by :func:`~mmdsynth.privacy.engine.run_plan`): the table's public facts (its count:
        rows, declared, or persons), the filter calibrated and the budget checked (nothing read), shards' rows
        checked in one pass before the charge, the method's marginal stages (:meth:`planner`) and the releases of the
        same plan after them (:meth:`_more_stages`), then the release and the model estimated from it
        (post-processing)."""
        facts = facts or (yield Facts())
        n = facts.n_records                                # public, declared: the rows, or the persons
        choice.check_enough(choice.PublicFacts(n, schema.privacy_unit))
        self._settle_delta(n)
        check_delta(self._s.delta)
        encoder = TableEncoder(schema, list(facts.columns))     # public: the columns' names and order
        engine = yield self._opening(budget=budget, dataset=dataset, privacy_unit=privacy_unit,
                                     shares=self._shares(schema), domain=domain, encoder=encoder,
                                     progress=self._s.progress, assumed={"n_classes": schema.n_classes},
                                     check=encoder)        # a DataFrame's rows checked once, after the calibration
        if not facts.in_memory:                            # shards: every row checked in one pass, persons counted
            yield Sums(CheckedRows(encoder), ())
        engine.open(f"{self.method} fit on {dataset or 'user data'}")
        measurements = yield from self.planner(domain, engine.stage_rho, n)
        more, more_spec, more_facts = yield from self._more_stages(engine, facts, schema, dataset)
        domain = self._cut(domain, {c[0]: y for c, y, _, fine in measurements if fine})
        out_facts = {"name": dataset, "n_records": n, "n_classes": schema.n_classes, "conditional": False,
                     "computation": facts.computation, "method": self.method, "table": encoder.to_dict(),
                     "numeric_encoding": "minmax", **(public_facts or {}), **more_facts}
        tensors, spec = self._marginal_release(measurements, domain)
        tensors, spec = {**tensors, **more}, self._more_spec(spec, more_spec)
        self.release_ = Release(tensors, spec, out_facts, engine.ledger)
        if out is not None:                                # saved before any post-processing: it holds the budget
            self.release_.save(out / "release")
        self._model = None
        self._fitted()                                     # post-processing of the release: the model, ...
        if out is not None:
            self.save(out)
        return self

    def _check_input(self, X, y, resume: bool) -> None:
        """A fit's arguments, each refused as the user must fix it."""
        from ..data.shards import ShardedTable

        if y is not None or not isinstance(X, (ShardedTable, pd.DataFrame)):
            raise InvalidParameterError(f"{self.method} takes a table: fit(df, label=..., schema=...) or a "
                                        f"ShardedTable, no y.")
        if resume:
            raise InvalidParameterError(f"{self.method} has no training to resume: its model is estimated from the "
                                        f"release when it is loaded.")

    def _marginal_release(self, measurements: list, domain: Domain) -> tuple[dict, dict]:
        """(tensors, spec) of the measured marginals: each measurement's noisy counts, and the domain and
        measurements that rebuild the model (post-processing of the noisy results)."""
        ways = [sum(len(c) == k for c, _, _, _ in measurements) for k in (1, 2, 3)]
        grid_text = "public grid" if domain.grid == "public" else "grid cut by the released 1-way marginals"
        spec = {"name": "marginals", "kind": "counts of cliques of a discrete domain", "domain": domain.to_dict(),
                "captures": f"{ways[0]} 1-way, {ways[1]} 2-way and {ways[2]} 3-way marginal measurements ({self.method}"
                            f"); numeric columns on a {grid_text} of at most {domain.max_cells} cells",
                "measurements": [{"clique": list(c), "std": float(std), "tensor": _tensor_name(i, c), "fine": fine}
                                 for i, (c, _, std, fine) in enumerate(measurements)]}
        tensors = {_tensor_name(i, c): torch.as_tensor(y) for i, (c, y, _, _) in enumerate(measurements)}
        return tensors, spec

    # -- the plan in words, before any row is read (issue 81, item 5) ----------------------------------------
    def plan_outline(self, schema, facts) -> PlanOutline:
        """The releases of a fit on a table of ``schema`` with ``facts`` (:class:`~mmdsynth.choice.PublicFacts`), each
        with its share of the plan's rho, and its memory and time estimates: public facts only, nothing read."""
        self.settings_ = self.settings_for("table")
        self._settle_delta(facts.n_records)
        schema = as_schema(schema, getattr(schema, "label", None))
        require_complete(schema)                     # as the fit refuses it: naming the columns and the fixes
        domain = Domain.of(schema, self._s.max_cells)
        self._check_plan(domain)
        engine = self._open_engine(budget=None, dataset="", privacy_unit=PRIVACY_UNIT,
                                   shares=self._shares(schema))      # calibration only: no budget, nothing read
        stage = engine.stage_rho / engine.rho
        releases = [(what, stage * share) for what, share in self.stage_outline(domain)]
        releases += [(release_words(name), share) for name, share in engine.shares.items()]
        n = int(facts.n_records or 0)
        return PlanOutline(self.method, facts.records, tuple(releases), self._memory(schema, n, domain),
                           self._seconds(schema, n, domain), self._memory_advice(), spread=self.TIME_SPREAD)

    def _memory(self, schema, n: int, domain: Domain) -> int:
        """The fit's memory estimate: the table as read and encoded (about 3 copies of 8 bytes a value) and the
        graphical model (its cliques' cells, small for a tree)."""
        return int(BASE_BYTES + 24 * n * (len(domain.attributes) + 1))

    #: the time estimate's rate per term of :meth:`time_terms` (each method's own; ``benchmarks/time_estimate.py``
    #: refits them from the suite's stored fits)
    TIME_RATES: dict = {}
    #: how far the measured fits fell from the estimate, as the outline prints it (the outline's own default here)
    TIME_SPREAD = PlanOutline.spread

    def time_terms(self, schema, n: int, domain: Domain) -> dict:
        """The quantities the time estimate charges a rate for (:attr:`TIME_RATES`), public: the domain, the record
        count and the settings. MST: a start, and the reading, per record and column."""
        return {"start": 1.0, "record_attribute": n * len(domain.attributes)}

    def _seconds(self, schema, n: int, domain: Domain) -> float:
        """The time estimate on 2 cores: each of :meth:`time_terms` at its rate (:attr:`TIME_RATES`)."""
        return sum(self.TIME_RATES[k] * v for k, v in self.time_terms(schema, n, domain).items())

    def _memory_advice(self) -> str:
        return "A table read in shards (`--shards`, a ShardedTable) is summed in bounded memory."

    def _shares(self, schema: Schema) -> dict:
        """The named releases the plan's filter declares up front as shares of rho (the rows per person under a
        unit); the marginal stages spend the rest."""
        return unit_shares(schema)

    def _more_stages(self, engine, facts, schema, dataset):
        """The stages of the releases of the same plan after the marginal stages (MST, AIM: the rows per person, with a
        privacy unit): returns (tensors, spec entries, public facts) they add. ``facts``: the rows' public facts."""
        persons, persons_facts = yield from rows_per_person_stages(engine, facts)
        return persons, {}, persons_facts

    def _more_spec(self, spec: dict, more: dict) -> dict:
        """The release's spec from the marginals' and what the later releases add (:meth:`_more_stages`)."""
        return {**spec, **more}

    def _fitted(self) -> None:
        """Post-processing once the release is made: the graphical model, estimated once (sampling reads it)."""
        self.model_()

    # -- what a marginal method measures (each method's own) -------------------------------------------------
    def planner(self, domain: Domain, rho: float, n: int):
        """The method's stages, a generator the engine runs (:meth:`~mmdsynth.privacy.engine.PrivacyEngine.run`)
        spending ``rho`` over ``domain`` for ``n`` public records; returns the measurements [(clique, noisy counts,
        noise std, fine)]."""
        raise NotImplementedError

    def stage_outline(self, domain: Domain) -> list[tuple[str, float]]:
        """The stages in words with their shares of the stages' rho, as :meth:`planner` spends it."""
        raise NotImplementedError

    def _one_way(self, domain: Domain, rho: float):
        """The first stage of MST's plan and of the hybrid's every-pair plan: the 1-way marginals of every column,
        numeric ones on the fine grid, in one release costing ``rho``; returns (noisy counts, their std, the domain
        cut by them: :meth:`_cut`)."""
        one, std = yield Measure(tuple((a,) for a in domain.attributes), rho, "1-way marginals of every column, "
                                 "numeric ones on their full public grid", domain=domain.fine())
        return one, std, self._cut(domain, {c[0]: y for c, y in one.items()})

    def _cut(self, domain: Domain, fine_counts: dict) -> Domain:
        """The model's domain once the 1-way marginals on the fine grid are released (``fine_counts``: {column:
        noisy counts}): ``domain`` itself with ``grid="public"``, cut at their equal mass with ``"released"``. A
        public function of the release: the planner counts its later stages in it, and the model is estimated in
        it."""
        return domain.adapted(fine_counts) if self._s.grid == "released" else domain

    def _check_plan(self, domain: Domain) -> None:
        """Refuse settings the plan cannot run with (public: the domain), before anything is read or charged."""
        if len(domain.attributes) < 2:
            raise InvalidParameterError(f"{self.method} models the columns' joint distribution: the schema needs at "
                                        f"least one learned column besides the label (it has {len(domain.attributes) - 1}).")

    def fit_summary(self, dataset: str, out) -> list[str]:
        eps, delta = self.release_.ledger.total()
        return [f"fitted {self.method} on {dataset or 'user data'}: epsilon={eps:g}, delta={delta:g}; "
                f"{self.release_.feature_spec['captures'].split(' (')[0]} released; saved to {out}"]

    # -- outputs ----------------------------------------------------------------------------------------
    @property
    def encoder_(self) -> TableEncoder | None:
        return encoder_of(self.release_) if hasattr(self, "release_") else None

    @property
    def _final_iters(self) -> int:
        return int(self._s.iters)

    def domain_(self) -> Domain:
        return Domain.from_dict(self.encoder_.schema, self.release_.feature_spec["domain"])

    def model_(self):
        """The graphical model of the release (estimated once, post-processing)."""
        if not hasattr(self, "release_"):
            raise InvalidParameterError(f"this {self.method} is not fitted; call fit() or mmdsynth.load().")
        if getattr(self, "_model", None) is None:
            spec = self.release_.feature_spec
            measurements = self._modelled([(tuple(m["clique"]), self.release_.tensors[m["tensor"]].numpy(), m["std"],
                                            bool(m.get("fine"))) for m in spec["measurements"]])
            with phase("estimating the graphical model", self._s.progress):
                self._model = estimate(self.domain_(), measurements, self.release_.dataset["n_records"],
                                       self._final_iters)
        return self._model

    def _modelled(self, measurements: list) -> list:
        """The measurements the graphical model is estimated from (MST: all of them)."""
        return measurements

    def _calibrated(self) -> "ModelMarginals":
        """The model's junction tree calibrated in numpy (:class:`ModelMarginals`), once per model: each later
        :meth:`sample` reuses it."""
        model = self.model_()
        if getattr(self, "_calibration", (None,))[0] is not model:
            self._calibration = (model, ModelMarginals(model))
        return self._calibration[1]

    def sample(self, n: int, *, seed: int | None = None, **_) -> pd.DataFrame:
        """``n`` synthetic rows (post-processing): drawn from the graphical model, each numeric cell's value
        uniform inside it, typed by the schema."""
        check_positive(n, "n", integer=True)
        seed = self._s.seed if seed is None else seed
        return self._decode(self._model_codes(n, seed), seed)

    def _model_codes(self, n: int, seed: int) -> np.ndarray:
        """(n, attributes) codes drawn from the graphical model (randomized rounding, :func:`draw_codes`; public
        seed)."""
        calibrated = self._calibrated()
        state = np.random.get_state()                    # the draw reads numpy's global generator: public, seeded
        try:
            np.random.seed(seed)
            rows = draw_codes(self.model_(), calibrated, n)
        finally:
            np.random.set_state(state)
        return np.stack([np.asarray(rows[a], dtype=np.int64) for a in self.domain_().attributes], 1)

    def _decode(self, codes: np.ndarray, seed: int) -> pd.DataFrame:
        """Rows typed by the schema from codes: a numeric cell's value drawn inside it (public seed)."""
        rng = np.random.default_rng(seed)
        X, labels = self.domain_().encoded(codes, rng, within=self._within())
        return self.encoder_.minmax().decode(X, labels, categorical="argmax", rng=rng)

    def _within(self) -> dict:
        """{numeric column: probabilities of its fine cells}, from the release's fine 1-way measurements (the
        simplex projection of each noisy count vector): where inside a coarse cell a value is drawn."""
        spec = self.release_.feature_spec
        numeric = set(self.domain_().grids)
        return {m["clique"][0]: simplex_projection(self.release_.tensors[m["tensor"]].numpy())
                for m in spec["measurements"] if m.get("fine") and m["clique"][0] in numeric}

    # -- persistence --------------------------------------------------------------------------------------
    def save(self, directory) -> Path:
        if not hasattr(self, "release_"):
            raise InvalidParameterError(f"this {self.method} is not fitted; call fit() first.")
        return write_model_folder(directory, self, {})

    @classmethod
    def _from_folder(cls, directory: Path, meta: dict):
        return read_model_folder(cls, directory, meta)



@register
class MST(MarginalMethod):
    """MST (McKenna, Miklau, Sheldon 2021, the NIST 2018 winner generalised): 1-way marginals of every column,
    a maximum spanning tree of column pairs chosen privately, their 2-way marginals, and the graphical model of
    them all (mbi 2.x). Tables only. ``max_cells``: numeric columns' cells on their public grid; ``iters``: the
    model's mirror-descent iterations (post-processing); ``seed``: the synthetic rows' draw (public).
    ``label_pairs``: also the 2-way marginals of the label with every column the tree does not already pair it
    with (a public choice, the same for every table with this schema; the budget then splits in four equal parts
    instead of three): what a classifier trained on the rows reads, P(column | label), is then measured rather
    than inferred through the tree. ``grid``: "public" (numeric cells from the declared bounds alone) or "released"
    (the public grid's cells merged where the released 1-way marginal puts equal mass, at no extra cost: the
    quantile bins Google's library pays for, here cut from a measurement MST makes anyway). ``tree_score``: how the
    tree's pairs are scored (:class:`~mmdsynth.privacy.marginals.SelectTree`): "model" (MST's) or "dependence".
    ``noise_seed`` fixes
    the privacy noise and the selection (tests only: the ledger says it voids the guarantee)."""

    #: MST's time estimate: a start, and the reading per record and column, refitted by benchmarks/time_estimate.py to
    #: the suite's MST fits since the numpy estimate (20 cells of 2,500-24,000 records, 2026-12-05: in sample
    #: 0.43-1.44x; the earlier rates, 3 s and 2e-5 s, gave 1.24-4.10x)
    TIME_RATES = {"start": 1.53, "record_attribute": 1.92e-6}
    method = "mst"
    summary = "1-way marginals, a private spanning tree of 2-way marginals, a graphical model (MST, mbi 2.x)"
    param_help = {
        "label_pairs": "also measure the label's 2-way marginal with every column (a public choice; the budget "
                       "splits in four parts instead of three)",
        "tree_score": '"model" (MST\'s: a pair\'s distance from the model of the 1-way marginals) or "dependence" '
                      "(its distance from independence; about 3 times the noise, but no column gathers the tree's "
                      "edges because its own 1-way estimate is poor)",
    }
    param_choices = {"tree_score": TREE_SCORES}

    def __init__(self, epsilon: float | None = None, delta: float | None = None, *, max_cells: int = DEFAULT_CELLS,
                 iters: int = 3000, label_pairs: bool = False, grid: str = "public", tree_score: str = "model",
                 seed: int = 0, noise_seed: int | None = None, progress: bool | None = None):
        self.epsilon, self.delta, self.max_cells, self.iters = epsilon, delta, max_cells, iters
        self.label_pairs, self.grid, self.tree_score = label_pairs, grid, tree_score
        self.seed, self.noise_seed, self.progress = seed, noise_seed, progress

    # -- what MST measures ------------------------------------------------------------------------------
    def planner(self, domain: Domain, rho: float, n: int):
        """MST's stages (a generator the engine runs): the 1-way marginals, the tree, its 2-way marginals (with
        ``label_pairs``, then the label's pairs the tree left out); returns the measurements [(clique, noisy counts,
        noise std, one-way)]."""
        attrs = tuple(domain.attributes)
        star = label_star(domain) if self._label_pairs() else ()
        parts = 4 if star else 3
        one, std1, domain = yield from self._one_way(domain, rho / parts)
        p = {a: simplex_projection(coarse_counts(domain, a, one[(a,)])) for a in attrs}   # the 1-ways' model
        pairs = tuple(itertools.combinations(attrs, 2))
        tree = yield SelectTree(attrs, pairs, {(a, b): n * np.outer(p[a], p[b]).reshape(-1) for a, b in pairs},
                                rho / parts, domain=domain, score=self._s.tree_score)
        two, std2 = yield Measure(tuple(tree), rho / parts, "2-way marginals of the tree's pairs", domain=domain)
        out = [(c, y, std1, True) for c, y in one.items()] + [(c, y, std2, False) for c, y in two.items()]
        rest = tuple(c for c in star if c not in set(tree))
        if star:          # the share is spent even when the tree took every pair: the split is fixed before any read
            extra, std3 = yield Measure(rest or star, rho / parts, "2-way marginals of the label with the columns "
                                        "the tree does not pair it with (a public choice)", domain=domain)
            out += [(c, y, std3, False) for c, y in extra.items()]
        return out

    def stage_outline(self, domain: Domain) -> list[tuple[str, float]]:
        """MST's stages in words with their shares of the stages' rho (as :meth:`planner` spends it)."""
        star = label_star(domain) if self._label_pairs() else ()
        parts = 4 if star else 3
        out = [("1-way marginals of every column (numeric ones on their full public grid)", 1 / parts),
               (f"a spanning tree of {len(domain.attributes) - 1} pairs, chosen privately (exponential mechanism, "
                f"score: {self._s.tree_score})", 1 / parts),
               ("2-way marginals of the tree's pairs", 1 / parts)]
        if star:
            out.append(("2-way marginals of the label with the columns the tree does not pair it with", 1 / parts))
        return out

    def _label_pairs(self):
        """Whether the plan measures the label's pairs (``label_pairs``, resolved)."""
        return self._s.label_pairs

    def _check_plan(self, domain: Domain) -> None:
        if not isinstance(self._label_pairs(), bool):
            raise InvalidParameterError(f"label_pairs must be True or False; got {self._s.label_pairs!r}.")
        super()._check_plan(domain)


@register
class AIM(MarginalMethod):
    """AIM (McKenna, Mullins, Sheldon, Miklau 2022): rounds of select -> measure -> estimate. The workload is every
    2-way marginal of at most ``max_cells_workload`` cells (weight 1); the candidates are its downward closure,
    each weighted by how many workload attributes it shares. The 1-way marginals are measured first; then each
    round the exponential mechanism picks the candidate whose counts are farthest (L1, less the noise it would
    add) from the current graphical model, among those that keep the model within ``max_model_size`` MB scaled
    by the budget used, and its counts are measured; the model is re-estimated (mbi 2.x, warm-started). A round
    spends 0.9 of its rho on the measurement and 0.1 on the selection; ``rounds`` (default 16 x attributes) sets
    the first rounds' share, and when a measurement barely changes the model the next rounds get 4 times the
    rho (half the noise). The last round uses what is left. Every share is decided from public facts and earlier
    releases; the engine's filter refuses more than the total. Tables only; ``iters``: mirror-descent iterations
    of each round's estimate (the final one uses 4 times as many)."""

    #: AIM's time estimate: MST's terms, and seconds per round and column, refitted by benchmarks/time_estimate.py to
    #: the suite's AIM fits since the numpy estimate (23 cells, benchmarks/log/2026-12-05.md#numpy-estimate: in sample
    #: 0.36-1.8x at epsilon 1 but census, which took 11x; at epsilon 10 its rounds on cps1988, college, males, nmes
    #: and cervical picked larger cliques and took 3-30x the estimate, which nothing public predicted)
    TIME_RATES = {"start": 0.0, "record_attribute": 1.97e-5, "round_attribute": 0.00164}
    TIME_SPREAD = ("expect 0.3-2x at epsilon 1; up to 30x longer where its rounds pick large cliques (at larger "
                   "epsilon, on wide tables)")
    method = "aim"
    summary = "rounds of private selection and measured marginals with a graphical model (AIM, mbi 2.x)"
    param_help = {
        "max_model_size": "the graphical model's largest size in MB (AIM's default 80), scaled by the budget used",
        "rounds": "the first rounds' share of the budget is 1/rounds (default 16 x the table's attributes)",
        "max_cells_workload": "2-way marginals with more cells are left out of the workload",
    }

    def __init__(self, epsilon: float | None = None, delta: float | None = None, *, max_model_size: float = 80.0,
                 rounds: int | None = None, max_cells_workload: int = 10000, max_cells: int = DEFAULT_CELLS,
                 iters: int = 250, grid: str = "public", seed: int = 0, noise_seed: int | None = None,
                 progress: bool | None = None):
        self.epsilon, self.delta, self.max_cells, self.iters, self.grid = epsilon, delta, max_cells, iters, grid
        self.seed, self.noise_seed, self.progress = seed, noise_seed, progress
        self.max_model_size, self.rounds, self.max_cells_workload = max_model_size, rounds, max_cells_workload

    @property
    def _final_iters(self) -> int:
        return 4 * int(self._s.iters)

    def _check_plan(self, domain: Domain) -> None:
        super()._check_plan(domain)
        d = len(domain.attributes)
        if self._s.rounds is not None and (not isinstance(self._s.rounds, int) or self._s.rounds < 2 * d):
            raise InvalidParameterError(
                f"rounds={self._s.rounds!r}: the 1-way marginals take 0.9 x attributes / rounds of the budget, so "
                f"rounds must be a whole number >= 2 x the {d} attributes (default 16 x attributes = {16 * d}).")
        check_positive(self._s.max_model_size, "max_model_size")
        check_positive(self._s.max_cells_workload, "max_cells_workload", integer=True)

    def stage_outline(self, domain: Domain) -> list[tuple[str, float]]:
        """AIM's stages in words with their shares of the stages' rho: the 1-way marginals at 0.9 x attributes /
        rounds, then rounds of selection (a tenth) and measurement (the rest) until the rho is spent; how many rounds
        depends on their noisy results (a round whose measurement barely moves the model makes the next ones 4 times
        larger)."""
        d = len(domain.attributes)
        first = 0.9 * d / int(self._s.rounds or 16 * d)
        return [("1-way marginals of every column (numeric ones on their full public grid)", first),
                (f"rounds of a private selection (a tenth of each) and a measured marginal (the rest), at most "
                 f"{int(self._s.rounds or 16 * d)} rounds, fewer as earlier rounds show the model settled", 1 - first)]

    def _memory(self, schema, n: int, domain: Domain) -> int:
        """MST's estimate, and the graphical model at its largest (``max_model_size`` MB, several copies while it is
        estimated)."""
        return int(super()._memory(schema, n, domain) + 3 * self._s.max_model_size * 2 ** 20)

    def time_terms(self, schema, n: int, domain: Domain) -> dict:
        """MST's terms and AIM's rounds: ``rounds`` (16 x attributes by default; fewer in practice), each a model
        estimate whose cost grows with the columns."""
        d = len(domain.attributes)
        return {**super().time_terms(schema, n, domain), "round_attribute": int(self._s.rounds or 16 * d) * d}

    def planner(self, domain: Domain, rho: float, n: int):
        """AIM's rounds (a generator the engine runs); returns the measurements [(clique, noisy counts, std)]."""
        lib = mbi()
        attrs = tuple(domain.attributes)
        per_round = rho / int(self._s.rounds or 16 * len(attrs))
        initial = 0.9 * per_round * len(attrs)
        one, std1 = yield Measure(tuple((a,) for a in attrs), initial, "1-way marginals of every column, numeric "
                                  "ones on their full public grid", domain=domain.fine())
        domain = self._cut(domain, {c[0]: y for c, y in one.items()})
        sizes = domain.sizes
        cells = lambda cl: int(np.prod([sizes[a] for a in cl]))        # noqa: E731
        workload = [cl for cl in itertools.combinations(attrs, 2) if cells(cl) <= self._s.max_cells_workload]
        weights = {(a,): float(sum(a in w for w in workload)) for a in attrs}
        weights.update({cl: 2.0 + sum(len(set(cl) & set(w)) for w in workload if w != cl) for cl in workload})
        candidates = [c for c in weights if weights[c] > 0] or [(a,) for a in attrs]
        measurements = [(c, y, std1, True) for c, y in one.items()]
        used = initial
        model = estimate(domain, measurements, n, self._s.iters)
        marginals = ModelMarginals(model)
        lib_domain = lib.Domain.fromdict(sizes)
        last, t = False, 0
        while not last:
            t += 1
            if rho - used < 2 * per_round:                 # the last round takes what is left
                per_round, last = rho - used, True
            used += per_round
            std = 1.0 / math.sqrt(0.9 * per_round)         # one clique, sensitivity sqrt(2): rho = 1 / std^2
            limit = self._s.max_model_size * used / rho
            free = {sub for c in model.cliques for r in range(1, len(c) + 1) for sub in itertools.combinations(c, r)}
            small = tuple(c for c in candidates if c in free or
                          lib.junction_tree.hypothetical_model_size(lib_domain, list(model.cliques) + [c]) <= limit)
            estimates = {c: marginals(c) for c in small}
            bias = {c: math.sqrt(2 / math.pi) * std * cells(c) for c in small}
            pick = yield Select(small, estimates, 0.1 * per_round, weights={c: weights[c] for c in small},
                                penalties=bias, domain=domain)
            counts, std = yield Measure((pick,), 0.9 * per_round, f"round {t}: the selected marginal", domain=domain)
            measurements.append((pick, counts[pick], std, False))
            logger.info("aim round %d: measured %s; %.1f%% of rho spent", t, clique_key(pick), 100 * used / rho)
            model = estimate(domain, measurements, n, self._s.iters, warm_start=model)
            marginals = ModelMarginals(model)
            if not last and np.abs(marginals(pick) - estimates[pick]).sum() <= math.sqrt(2 / math.pi) * std * cells(pick):
                per_round *= 4                             # the model barely moved: half the noise from now on
        return measurements
