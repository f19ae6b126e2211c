"""Audit targets of the Gaussian releases (stage kinds ``Sums`` and ``Measure``): the mean-embedding
release, of rows or of persons, and the measured marginals of a person table. The attacker projects the output on
the difference of the two noise-free statistics (the likelihood-ratio test for Gaussian noise)."""
from __future__ import annotations

import copy
import math
import uuid

import numpy as np
import torch

from ..data.discrete import Domain
from ..data.encoding import TableEncoder
from ..data.schema import Schema
from ..embedding import mean_embedding, release_mean_embedding, release_plan
from ..engines.persons import PersonTable
from ..errors import InvalidParameterError
from ..features.base import FeatureMap, build_feature_map
from ..features.rff import RandomFourierFeatures
from ..privacy.calibration import epsilon_for_sigma
from ..privacy.engine import Sums, open_engine
from ..privacy.marginals import clique_counts, Measure
from ..privacy.mechanisms import NoiseSource
from ..statistics.tables import clique_key
from .attack import Target

#: rows of the person-release audit's canary: one person with this many rows (the others have one to three)
CANARY_ROWS = 500


def default_audit_map() -> FeatureMap:
    """Two random Fourier features of 2-d records: one cos/sin pair, so a canary can reach the
    full sensitivity (its features the negative of the record it replaces)."""

    return RandomFourierFeatures(2, 2, seed=0)


def _candidates(records, rng: np.random.Generator) -> np.ndarray:
    """Candidate canaries from ``records(n, rng, low, high)`` (a map's :meth:`~mmdsynth.features.base.FeatureMap.records`,
    inputs of its kind): values on a wide box, zeros and huge values."""
    box = records(4000, rng, -10.0, 10.0)
    extremes = [records(1, rng, v, v) for v in (0.0, 1e6, -1e6, 1e39)]
    return np.concatenate([box, *extremes])


class _ProjectionTarget(Target):
    """A mechanism whose output is one noisy statistic: the attacker projects it on the difference
    of the two noise-free statistics ``stats`` (the likelihood-ratio test for Gaussian noise)."""

    stats: tuple[torch.Tensor, torch.Tensor]
    output_sensitivity: float

    def prepare(self) -> float:
        """The canary's measured effect in units of the declared sensitivity."""
        s0, s1 = self.stats
        gap = float((s1 - s0).norm())
        if not gap > 0:
            raise InvalidParameterError("no canary moved the statistic: the audit cannot attack this map.")
        self._s0, self._dir = s0, (s1 - s0) / gap
        return gap / self.output_sensitivity

    def observe(self, neighbour: bool) -> tuple[np.ndarray, str]:
        out, policy = self.run(neighbour)
        return np.array([float((out - self._s0) @ self._dir)]), policy

    def optimal(self, gap: float) -> float:

        return epsilon_for_sigma(self.sigma / gap, self.delta, accountant="exact") if gap > 1e-9 else 0.0


class _ReleaseTarget(_ProjectionTarget):
    """The mean-embedding release (data-touching function 1), class-conditional, replace-one."""

    neighbouring = "replace_one"

    mechanism, stage = "release", Sums

    @classmethod
    def for_audit(cls, epsilon, delta, n_records, seed, *, feature_map=None, n_classes=2, **_):
        fmap = feature_map if isinstance(feature_map, FeatureMap) else \
            build_feature_map(feature_map) if feature_map is not None else default_audit_map()
        return cls(epsilon, delta, fmap, n_records, int(n_classes), seed)

    def __init__(self, epsilon, delta, feature_map: FeatureMap, n_records: int, n_classes: int, seed: int):

        self.fmap, self.n_classes = feature_map, n_classes
        self.epsilon, self.delta = epsilon, delta
        rng = np.random.default_rng(seed)
        self.X = feature_map.records(n_records, rng)        # inputs of the map's kind (a table map: encoded records)
        self.y = np.arange(n_records) % n_classes
        self.plan, self.multipliers = release_plan(feature_map)
        if len(self.multipliers) != 1:
            raise InvalidParameterError(f"the audit attacks one Gaussian release; {feature_map.spec()['name']} "
                                        f"makes {len(self.multipliers)}: audit a one-block map.")
        self.sigma = open_engine(epsilon, delta, self.plan, multipliers=self.multipliers).sigma
        self.sensitivity = 2.0 * feature_map.norm_bound / n_records
        self.output_sensitivity = self.sensitivity          # the release is the statistic itself
        base = mean_embedding(feature_map, torch.as_tensor(self.X, dtype=torch.float32),
                              torch.as_tensor(self.y), n_classes)
        # the canary replaces record 0 (label y0) by (x', label): the class-conditional embedding
        # moves by (phi(x') e_label - phi(x0) e_y0) / m; pick the candidate and label moving it most
        cands = _candidates(feature_map.records, rng)
        with torch.no_grad():
            phis = feature_map.bounded(feature_map(torch.as_tensor(cands, dtype=torch.float32)).double())
            phi0 = feature_map.bounded(feature_map(torch.as_tensor(self.X[:1], dtype=torch.float32)).double())
        same = (phis - phi0).norm(dim=1)
        other = (phis.norm(dim=1) ** 2 + phi0.norm() ** 2).sqrt()
        gaps = torch.stack([same if label == self.y[0] else other for label in range(n_classes)])
        label, i = divmod(int(gaps.argmax()), len(cands))
        self.X2, self.y2 = self.X.copy(), self.y.copy()
        self.X2[0], self.y2[0] = cands[i], label
        self.stats = (base.flatten(), mean_embedding(feature_map, torch.as_tensor(self.X2, dtype=torch.float32),
                                                    torch.as_tensor(self.y2), n_classes).flatten())
        self.description = (f"the mean-embedding release (release_mean_embedding) under "
                            f"{feature_map.spec()['name']} features, {n_records} records, {n_classes} classes")

    def run(self, neighbour: bool) -> tuple[torch.Tensor, str]:

        X, y = (self.X2, self.y2) if neighbour else (self.X, self.y)
        rel = release_mean_embedding(self.fmap, X, y, epsilon=self.epsilon, delta=self.delta,
                                     n_classes=self.n_classes)
        entry = rel.ledger.entries[0]
        return rel.tensors["embedding"].flatten(), entry.noise_source


class _PersonReleaseTarget(_ProjectionTarget):
    """The mean-embedding release of a table whose privacy unit is a person (:mod:`mmdsynth.engines.persons`):
    D holds ``n_records`` persons of one to three rows each; D' replaces person 0 by one canary person with
    ``CANARY_ROWS`` rows, every row at the table point and label that move the embedding most (a person's
    contribution is the mean of their rows' features, so identical rows are the worst case). The release runs
    through the same path a fit does (a :class:`~mmdsynth.engines.persons.PersonTable`, the table encoder,
    :func:`~mmdsynth.embedding.release_mean_embedding`), m = the number of persons."""

    neighbouring = "replace_one"

    mechanism, stage = "person-release", Sums
    default_trials = 2000             # it reads a table through the person reduction: about 10 ms a run

    def __init__(self, epsilon, delta, n_records: int, seed: int):
        self.epsilon, self.delta, self.n_classes = epsilon, delta, 2
        rng = np.random.default_rng(seed)
        self._tables(n_records, rng)
        self.fmap = RandomFourierFeatures(self.encoder.dim, 2, seed=0)
        plan, mults = release_plan(self.fmap)
        self.sigma = open_engine(epsilon, delta, plan, multipliers=mults).sigma
        self.sensitivity = 2.0 * self.fmap.norm_bound / n_records
        self.output_sensitivity = self.sensitivity
        # the canary: the candidate row and label whose features differ most from person 0's mean contribution
        cand = self._candidates()
        first = self.df[self.df[self.unit] == self.first]
        with torch.no_grad():
            Xc, _ = self.encoder.encode(cand.assign(y="n"))
            phi = self.fmap.bounded(self.fmap(torch.as_tensor(Xc, dtype=torch.float32)).double())
            X0, y0 = self.encoder.encode(first)
            phi0 = self.fmap.bounded(self.fmap(torch.as_tensor(X0, dtype=torch.float32)).double())
        own = torch.zeros(2, phi.shape[1], dtype=torch.float64)
        own.index_add_(0, torch.as_tensor(np.array(y0, dtype=np.int64)), phi0 / len(first))
        gaps = torch.stack([((phi - own[label]) ** 2).sum(1) + (own[1 - label] ** 2).sum() for label in (0, 1)])
        label, i = divmod(int(gaps.argmax()), len(cand))
        self.df2 = self._replaced(cand.iloc[[i] * CANARY_ROWS].assign(y=["n", "p"][label]).reset_index(drop=True))
        self.sources = (PersonTable(self.df, self.unit), PersonTable(self.df2, self.unit))
        exact = []
        for source in self.sources:
            X, y = self.encoder.encode(source.frame)
            w = torch.as_tensor(source.data.weights)
            sums = self.fmap.class_sums(torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(np.array(y)), 2,
                                        weights=w)
            exact.append((sums.T / n_records).flatten())
        self.stats = tuple(exact)
        self.description = (f"the mean-embedding release of a person table (privacy unit: a person; release_mean_"
                            f"embedding through PersonTable), {n_records} persons, canary: one person with "
                            f"{CANARY_ROWS} rows")

    def _tables(self, n_records: int, rng) -> None:
        """D (``df``), its encoder, its person column (``unit``) and the person the canary replaces (``first``)."""
        import pandas as pd

        schema = Schema.from_dict({"columns": [{"name": "a", "type": "numeric", "bounds": [0, 1]},
                                               {"name": "b", "type": "numeric", "bounds": [0, 1]},
                                               {"name": "person", "type": "id"}],
                                   "label": "y", "label_categories": ["n", "p"], "privacy_unit": "person"})
        self.encoder, self.unit, self.first = TableEncoder(schema, ["a", "b", "y", "person"]), "person", "u0"
        sizes = rng.integers(1, 4, n_records)
        rows = int(sizes.sum())
        self.df = pd.DataFrame({"a": rng.random(rows).round(6), "b": rng.random(rows).round(6),
                                "y": np.where(np.arange(rows) % 2 == 0, "n", "p"),
                                "person": np.repeat([f"u{i}" for i in range(n_records)], sizes)})

    def _candidates(self):
        """The canary's candidate rows (its label set apart): a grid of the table's points."""
        import pandas as pd

        grid = np.stack(np.meshgrid(np.linspace(0, 1, 41), np.linspace(0, 1, 41)), -1).reshape(-1, 2)
        return pd.DataFrame({"a": grid[:, 0], "b": grid[:, 1], "person": "canary"})

    def _replaced(self, canary):
        """D': person ``first`` replaced by the canary person's rows."""
        import pandas as pd

        return pd.concat([self.df[self.df[self.unit] != self.first], canary], ignore_index=True)

    def run(self, neighbour: bool) -> tuple[torch.Tensor, str]:

        rel = release_mean_embedding(self.fmap, self.sources[int(neighbour)], encoder=self.encoder, n_classes=2,
                                     epsilon=self.epsilon, delta=self.delta)
        return rel.tensors["embedding"].flatten(), rel.ledger.entries[0].noise_source


class _DatabaseReleaseTarget(_PersonReleaseTarget):
    """The mean-embedding release of a database of a root table and a child table, one root with all its children
    the unit (:func:`mmdsynth.fit_tables`'s path: the tables validated and their keys checked
    (:func:`~mmdsynth.data.relational.read_database`), the child table's training table built
    (:func:`~mmdsynth.data.relational.level_frames`: each child row with its root's columns and count of children, a
    root without children one marked row), then the person table's release).
    D holds ``n_records`` roots with zero to three children each; D' replaces root 0 and its children by one canary
    root with ``CANARY_ROWS`` children, every one at the point and label that move the embedding most; m = the
    number of roots."""

    mechanism, stage = "database-release", Sums
    SCHEMA = {"privacy_unit": "units", "tables": {
        "units": {"primary_key": "unit", "label": "y", "label_categories": ["n", "p"],
                  "columns": [{"name": "unit", "type": "id", "integer": True, "bounds": [0, 10 ** 9]}]},
        "items": {"primary_key": "item", "foreign_keys": {"unit": "units"},
                  "columns": [{"name": "item", "type": "id"},
                              {"name": "unit", "type": "id", "integer": True, "bounds": [0, 10 ** 9]},
                              {"name": "a", "type": "numeric", "bounds": [0, 1]},
                              {"name": "b", "type": "numeric", "bounds": [0, 1]}]}}}

    def __init__(self, epsilon, delta, n_records: int, seed: int):
        super().__init__(epsilon, delta, n_records, seed)
        self.description = (f"the mean-embedding release of a database (a root table and a child table; one root with "
                            f"all its children the unit; fit_tables' child table through PersonTable), {n_records} "
                            f"roots with 0-3 children, canary: one root with {CANARY_ROWS} children")

    def _tables(self, n_records: int, rng) -> None:
        import pandas as pd

        from ..data.relational import DatabaseSchema

        self.db = DatabaseSchema.from_dict(self.SCHEMA)
        k = np.concatenate([[2], rng.integers(0, 4, n_records - 1)])     # root 0 has children; some roots none
        units = pd.DataFrame({"unit": np.arange(n_records), "y": np.where(np.arange(n_records) % 2 == 0, "n", "p")})
        items = pd.DataFrame({"item": [f"i{j}" for j in range(int(k.sum()))], "unit": np.repeat(np.arange(n_records), k),
                              "a": rng.random(int(k.sum())).round(6), "b": rng.random(int(k.sum())).round(6)})
        self.tables = {"units": units, "items": items}
        self.df = self._frame(self.tables)
        level = self._level
        self.encoder, self.unit, self.first = TableEncoder(level.schema, list(self.df.columns)), "unit", 0
        self._present = level.present

    def _frame(self, tables):
        """The child table's training table as the cascade fits it (its root's columns and count joined, a root
        without children one marked row)."""
        from ..data.relational import COUNT, level_frames, levels, read_database

        lv = levels(self.db)
        self._level, self._bound = lv["items"], int(lv["units"].schema.column(COUNT.format(child="items")).bounds[1])
        return level_frames(read_database(tables, self.db), self.db, lv)["items"]

    def _candidates(self):
        """The person target's grid of points, as rows of root 0's children."""
        from ..data.relational import CONTEXT, COUNT

        # the root's only learned column is its count of items: the canary root's (read up to max_children)
        count = {CONTEXT.format(parent="units", column=COUNT.format(child="items")): min(CANARY_ROWS, self._bound)}
        return super()._candidates().drop(columns="person").assign(unit=0, **{self._present: "1"}, **count)

    def _replaced(self, canary):
        """D': root 0 and its children replaced, in the tables, by the canary root and its children; then the child
        table's training table built as a fit builds it."""
        import pandas as pd

        units = self.tables["units"].copy()
        units.loc[units.unit == 0, "y"] = canary["y"].iloc[0]
        items = pd.concat([self.tables["items"][self.tables["items"].unit != 0],
                           pd.DataFrame({"item": [f"c{j}" for j in range(len(canary))], "unit": 0,
                                         "a": canary["a"].to_numpy(), "b": canary["b"].to_numpy()})],
                          ignore_index=True)
        return self._frame({"units": units, "items": items})


class _PersonMarginalTarget(_ProjectionTarget):
    """The measured 1-way marginals of a table whose privacy unit is a person, as MST, AIM and the hybrid measure
    them: a ``Measure`` stage of :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run` on a
    :class:`~mmdsynth.engines.persons.PersonTable`, through a zCDP filter calibrated to the claim and opened for
    each run (the stage spends its whole rho). D holds ``n_records`` persons of one to three rows over two columns
    (values p, q); person 0's rows are all (p, p). D' replaces person 0 by one canary person with ``CANARY_ROWS``
    rows, all (q, q): with each person's rows weighing 1 in all, each column's counts move by (-1, +1), the
    release by exactly its recorded sensitivity sqrt(2 x 2 cliques) = 2; without the person reduction they would
    move by ``CANARY_ROWS`` times that. The attacker projects the noisy counts on the difference of the exact ones."""

    neighbouring = "replace_one"
    CLIQUES = (("a",), ("b",))

    mechanism, stage = "person-marginals", Measure
    default_trials = 2000

    def __init__(self, epsilon, delta, n_records: int, seed: int):
        import pandas as pd


        self.epsilon, self.delta = epsilon, delta
        self._template = open_engine(epsilon, delta)           # calibrated once; no budget file
        self.sensitivity = math.sqrt(2 * len(self.CLIQUES))
        self.output_sensitivity = self.sensitivity
        self.sigma = 1.0 / math.sqrt(2 * self._template.rho)  # std / sensitivity of a Gaussian release spending rho
        schema = Schema.from_dict({"columns": [{"name": "a", "type": "categorical", "categories": ["p", "q"]},
                                               {"name": "b", "type": "categorical", "categories": ["p", "q"]},
                                               {"name": "person", "type": "id"}], "privacy_unit": "person"})
        learned = schema.without_ids()
        self.domain, self.encoder = Domain.of(learned), TableEncoder(learned, ["a", "b", "person"])
        rng = np.random.default_rng(seed)
        sizes = rng.integers(1, 4, n_records)
        rows = int(sizes.sum())
        values = np.where(rng.random((rows, 2)) < 0.5, "p", "q")
        values[:sizes[0]] = "p"                                # person 0: all (p, p)
        df = pd.DataFrame({"a": values[:, 0], "b": values[:, 1],
                           "person": np.repeat([f"u{i}" for i in range(n_records)], sizes)})
        canary = pd.DataFrame({"a": ["q"] * CANARY_ROWS, "b": ["q"] * CANARY_ROWS, "person": ["canary"] * CANARY_ROWS})
        df2 = pd.concat([df[df.person != "u0"], canary], ignore_index=True)
        self.sources = (PersonTable(df, "person"), PersonTable(df2, "person"))
        self.stats = tuple(torch.as_tensor(np.concatenate(
            [clique_counts(src, self.domain, self.encoder, self.CLIQUES)[clique_key(c)] for c in self.CLIQUES]))
            for src in self.sources)
        self.description = (f"the measured 1-way marginals of a person table (privacy unit: a person; a Measure stage "
                            f"of engine.run on a PersonTable, through a zCDP filter spending its whole rho "
                            f"{self._template.rho:.4g}), {n_records} persons, canary: one person with {CANARY_ROWS} "
                            f"rows replacing a person of {sizes[0]}")

    def run(self, neighbour: bool) -> tuple[torch.Tensor, str]:

        engine = _fresh_filter(self._template).open("privacy audit of the person-level marginals")

        def planner():
            return (yield Measure(self.CLIQUES, engine.remaining, what="1-way marginals"))
        noisy, _ = engine.run(self.sources[int(neighbour)], planner(), domain=self.domain, encoder=self.encoder)
        return torch.as_tensor(np.concatenate([noisy[c] for c in self.CLIQUES])), engine.entries[-1].noise_source


def _fresh_filter(template):
    """A new zCDP filter with ``template``'s calibration (its total rho: :func:`~mmdsynth.privacy.zcdp.rho_for_epsilon`
    takes about a second, so an audit calibrates once) and nothing spent, charged or recorded, with a new secure noise
    source (OS randomness: every run's draw independent of every other). A filter's attributes are its calibration
    (copied) and the state of one plan (reset here); tests/contract/test_audit_selection.py checks the result against
    a filter the constructor builds, so a new attribute of the engine shows there. (A ``rho=`` argument of
    ``ZCDPEngine``, as ``PrivacyEngine`` takes ``sigma=``, would make this a constructor call.)"""


    f = copy.copy(template)
    f.noise, f.budget_id = NoiseSource(None), uuid.uuid4().hex
    f.spent, f.entries, f.charged = 0.0, [], False
    return f
