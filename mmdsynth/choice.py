"""Which method a table gets when none is named (`mmdsynth fit` without --method, ``mmdsynth.fit``): a rule on
public facts only, importable without torch (the command line decides before it loads the methods).

Every decision of a plan is a function of one :class:`PublicFacts` value: the public count of records (rows under a
row unit; **persons** under a person unit, never their rows), the unit, epsilon and delta (issue 80). The command line
and Python build it from the fit's run's public facts (:class:`~mmdsynth.engines.SourceFacts`: nothing counts the data
before the run) and choose with :func:`choose_table_default`: one rule, one place.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

#: the default delta for a fit of up to DELTA_RECORDS records (the public count: rows, or persons under a person unit)
DEFAULT_DELTA = 1e-5
DELTA_RECORDS = 10_000
#: the registered benchmark datasets (``--dataset NAME``, the papers' presets) keep the papers' delta
PAPERS_DELTA = 1e-5


def default_delta(n_records: int | None) -> float:
    """The delta a fit uses when none is given, a public function of the public count ``n_records`` (issue 83):
    ``DEFAULT_DELTA`` (1e-5) up to ``DELTA_RECORDS`` (10,000) records, above that the largest power of ten at most
    1 / (10 n) (1e-6 up to 100,000 records, 1e-7 up to a million, ...): always at most a tenth of 1/n, where a delta
    of 1/n or more would permit a mechanism that publishes a record outright. Unknown count: 1e-5."""
    if n_records is None or n_records <= DELTA_RECORDS:
        return DEFAULT_DELTA
    return 10.0 ** -(math.ceil(math.log10(n_records)) + 1)


#: the table default's size rule (`mmdsynth fit` without --method, ``mmdsynth.fit``): from this many records up the
#: hybrid (measured marginals and a kernel embedding in one plan), below it DP-MERF, whose one release keeps the whole
#: budget, unless records x epsilon reaches HYBRID_MIN_RECORDS_EPSILON. Measured (benchmarks/log/2026-12-04.md#suite-small:
#: the twelve-table suite's 80/20 splits, eps 1, 3 seeds):
#: on the seven tables of 3,525-4,305 training rows the hybrid (16 cells cut at released mass, the rule below) trains
#: classifiers as good as DP-MERF's or better on all seven (mean ROC AUC / F1 +0.008 to +0.033, level on wvs) with
#: closer 2-way marginals on five (TVD -0.009 to -0.060; farther on wvs and arrests); on males' 2,492 rows the two are
#: level (0.650 / 0.184 against 0.638 / 0.181); earlier, DP-MERF led on cervical's 858 rows and on 2,500 made-up
#: patients (benchmarks/RESULTS.md). The line lies between 2,500 and 3,525 records; 3,000 is a choice inside that gap,
#: not a measured optimum (until 2026-12-04 it was 5,000). The count is public, like every release's m.
HYBRID_MIN_ROWS = 3_000
#: below HYBRID_MIN_ROWS records the hybrid is still the default where records x epsilon is at least this. Measured
#: (benchmarks/log/2026-12-05.md#small-line: fixed 1,000- and 2,000-row samples of six suite tables, seed 0, the
#: hybrid sized as the rule sizes it against the DP-MERF the rule chose): at eps 10 (records x epsilon 10,000 and
#: 20,000) the hybrid's 2-way marginals are closer on all 12 (TVD -0.009 to -0.045) and its 3-way on all 12, its
#: classifiers level (ROC AUC / F1 -0.020 to +0.014, mean -0.002), its fit 2-5x faster; males' 2,492 rows at eps 10
#: (3 seeds): 2-way 0.068 against 0.079, ROC 0.717 against 0.706. At eps 1 (1,000 and 2,000) its classifiers lose on
#: 9 of 12 (down to -0.148 on cps1988's 1,000 rows): DP-MERF keeps the small, low-epsilon tables. Between them
#: (benchmarks/log/2026-12-05.md#small-line-3000: 1,000 rows at eps 3 and 5, 2,000 at eps 2 and 4, the same six
#: tables) the hybrid's classifiers are level from 3,000 records x epsilon up (mean -0.002 to +0.005, as at 10,000)
#: and its 2-way marginals closer on 23 of 24 (3-way 23), fitted in 2-11 s against 14-37 s; at 1,000 and 2,000 they
#: lose (mean -0.033, -0.039). The line is 3,000, the lowest point measured level (until 2026-12-05 afternoon 10,000).
HYBRID_MIN_RECORDS_EPSILON = 3_000


def table_default(n_records: int | None, epsilon: float | None = None) -> str:
    """The method a table of ``n_records`` records (rows, or persons under a person unit: the public count) is
    fitted with at ``epsilon`` when none is named: the hybrid from ``HYBRID_MIN_ROWS`` records or from
    ``HYBRID_MIN_RECORDS_EPSILON`` records x epsilon, DP-MERF below both (unknown size: the hybrid; unknown
    epsilon: the count alone)."""
    if n_records is None or n_records >= HYBRID_MIN_ROWS:
        return "hybrid"
    return "hybrid" if epsilon is not None and n_records * epsilon >= HYBRID_MIN_RECORDS_EPSILON else "dp-merf"


#: under this many rows the table default (DP-MERF) trains its generator for SHORT_TRAINING_ITERATIONS iterations, not
#: the method's 2,000. Measured (benchmarks/log/2026-11-28.md#dpmerf-stops: one release trained to 250, 500, 1,000 and
#: 2,000 iterations in turn, eps 1 and 10): on cervical (192-222 training rows, 3 seeds), the cars of UCI Auto MPG (325,
#: 3 seeds) and 900-row samples of adult (2 seeds), 250 iterations give marginals as close or closer (2-way TVD lower
#: in all six cells) and classifiers as good at eps 1 (ROC AUC +0.029, F1 +0.009, ROC -0.002) and within 0.006 at
#: eps 10 (0.000, +0.003, -0.006), in about an eighth of the time. On adult's 23,790 rows 2,000 are clearly better
#: (2-way TVD 0.084 against 0.110 at eps 1), and between 900 and 23,790 rows nothing was measured: the line is 1,000.
SHORT_TRAINING_ROWS = 1_000
SHORT_TRAINING_ITERATIONS = 250
#: from SHORT_TRAINING_ROWS records up, where the table default is still DP-MERF (under HYBRID_MIN_ROWS records and
#: HYBRID_MIN_RECORDS_EPSILON records x epsilon), its generator trains this many iterations, not 2,000. Measured
#: (benchmarks/log/2026-12-05.md#dpmerf-500: fixed 1,000- and 2,000-row samples of six suite tables at eps 1, 2 seeds
#: each way, fresh releases): 2-way marginals closer on 9 of 12 (mean TVD -0.016; farther by 0.001-0.010 on three
#: 1,000-row samples), 3-way on 10 of 12 (-0.028), classifiers mean -0.006 (-0.040 to +0.032), fits 2.5-4.5x faster;
#: males (2,492 rows, eps 1, 5 seeds): ROC AUC 0.645 +- 0.037 against 0.646 +- 0.019, 2-way TVD 0.164 against 0.181
#: (AIM's 0.157), 15 s against 40 s.
SMALL_TRAINING_ITERATIONS = 500


#: where rows x epsilon is under this, the table default (the hybrid, from HYBRID_MIN_ROWS rows) puts each numeric
#: column on COARSE_CELLS cells of its public grid, not the marginal methods' 32: a cell's count grows with the rows,
#: its noise falls with epsilon. Measured (benchmarks/log/2026-11-29.md#epileptic-cells, fresh releases): on epileptic
#: (7,982-8,183 training rows x 178 numeric columns) at eps 1, 9 releases at 16 cells against 22 at 32, the ROC AUC
#: rises from 0.746 to 0.760 and the 2-way TVD falls from 0.342 to 0.333 (a 2-way marginal of 32 x 32 cells holds
#: about 8 rows a cell there, under count noise of many rows); at eps 10 (rows x epsilon about 82,000) 16 cells lose
#: (2-way TVD 0.146 against 0.131, 3 seeds). On census's 20,097 rows at eps 1, 16 cells were level with 32 (ROC 0.888,
#: 2-way 0.056, within the default's spread). Between 8,183 and 20,097 nothing was measured: the line is 15,000.
COARSE_CELLS_ROWS_EPSILON = 15_000
COARSE_CELLS = 16
#: and there the cells are cut at equal mass of the released 1-way marginals (``grid="released"``, post-processing of
#: a release the plan makes anyway). Measured (benchmarks/log/2026-11-29.md#coarse-released-grid, 6 fresh releases,
#: 3 seeds): on epileptic at eps 1, with the tree scored by dependence, 2-way TVD 0.324 (0.317-0.337) against 0.331
#: on the public grid's 16 cells, ROC AUC 0.765 against 0.756, 3-way 0.537 against 0.548. (With MST's tree score
#: the released grid had made epileptic worse, 0.359 at 32 cells: its trees had hubs.) Since 2026-12-07 the cells are
#: cut the same way everywhere else the hybrid is the default (the marginal methods' 32 of them). Measured
#: (benchmarks/log/2026-12-07.md#released-grid-everywhere, 3 fresh releases each, against the public grid's lines of
#: the goal table): on the 23 table x epsilon cells of the suite and the papers' tables where rows x epsilon reaches
#: 15,000, classifiers better on 13 (cps1988 +0.028 / +0.015, flights +0.012 / +0.011), level on 5, worse on 5 (by up
#: to 0.006, and intrusion at eps 10 -0.030 by one release), 2-way marginals closer on 6 (flights -0.010 / -0.011),
#: level on 13, farther on 4: epileptic at eps 10 (178 numeric columns) 0.130 against 0.113, cps1988 at eps 1 +0.004.
GRID = "released"


def table_default_params(n_records: int | None, epsilon: float | None = None) -> dict:
    """The settings the table default uses for a table of ``n_records`` rows at ``epsilon``, beyond its method's
    defaults (a parameter the user gives wins): DP-MERF trains ``SHORT_TRAINING_ITERATIONS`` iterations under
    ``SHORT_TRAINING_ROWS`` rows, ``SMALL_TRAINING_ITERATIONS`` above; the hybrid cuts its numeric columns' cells at
    equal released mass (``GRID``), ``COARSE_CELLS`` of them where rows x epsilon is under ``COARSE_CELLS_ROWS_EPSILON``
    (an unknown epsilon: not), its own 32 otherwise."""
    if n_records is not None and table_default(n_records, epsilon) == "dp-merf":
        return {"iterations": SHORT_TRAINING_ITERATIONS if n_records < SHORT_TRAINING_ROWS else SMALL_TRAINING_ITERATIONS}
    coarse = n_records is not None and epsilon is not None and n_records * epsilon < COARSE_CELLS_ROWS_EPSILON
    return {**({"max_cells": COARSE_CELLS} if coarse else {}), "grid": GRID}


def sized_settings(sized: dict) -> str:
    """What :func:`table_default_params` set, in words, for the line that says which method a table got."""
    words = []
    if "iterations" in sized:
        under = SHORT_TRAINING_ROWS if sized["iterations"] == SHORT_TRAINING_ITERATIONS else HYBRID_MIN_ROWS
        words.append(f"{sized['iterations']} generator iterations under {under:,} records, where more fit the noise")
    if "max_cells" in sized:
        cut = " cut at equal mass of the released 1-way marginals" if sized.get("grid") == "released" else ""
        words.append(f"numeric columns on {sized['max_cells']} cells{cut} where records x epsilon is under "
                     f"{COARSE_CELLS_ROWS_EPSILON:,}: finer cells would hold fewer rows than their noise")
    elif sized.get("grid") == "released":                 # the cells' count the method's own (or given)
        words.append("numeric columns' cells cut at equal mass of the released 1-way marginals")
    return "; ".join(words)


@dataclass(frozen=True)
class PublicFacts:
    """What a table's plan may depend on: the public count of records (``n_records``: the rows under a row unit, the
    persons under a person unit, never their rows; None when unknown), the privacy unit's column (None: one row),
    epsilon and delta. Nothing else about the data: a plan computed from it is the same for every pair of
    neighbouring tables."""

    n_records: int | None
    unit: str | None = None
    epsilon: float | None = None
    delta: float | None = None

    @property
    def records(self) -> str:
        """The count in words: "1,000 persons" or "4,967 rows"."""
        noun = "person" if self.unit else "row"
        if self.n_records is None:
            return f"unknown {noun}s"
        return f"{self.n_records:,} {noun}{'' if self.n_records == 1 else 's'}"


#: the fewest records (persons under a person unit) a table is fitted on: with m records one record moves every
#: released mean by about 2/m of its range, so below this the noise is the release (and a 1-row table "converges" to
#: copies of its row); the count is public, so the refusal tells nothing a release would not
MIN_RECORDS = 10


def check_enough(facts: "PublicFacts") -> None:
    """Refuse a table of fewer than :data:`MIN_RECORDS` records (its public count), before anything is read."""
    if facts.n_records is not None and facts.n_records < MIN_RECORDS:
        from .errors import DataValidationError
        raise DataValidationError(
            f"the table holds {facts.records}; a fit needs at least {MIN_RECORDS}: one record would move every "
            f"released statistic by about 2/{facts.n_records} of its range, so the noise that hides it would be all "
            f"the release holds. Fit on more records.")


@dataclass(frozen=True)
class TableDefault:
    """The table default chosen from public facts: the method, the settings sized for the facts (a parameter the
    user gave wins: left out here) and why, in words."""

    method: str
    params: dict = field(default_factory=dict)
    why: str = ""


def _by_epsilon(facts: PublicFacts) -> str:
    """Why a table under ``HYBRID_MIN_ROWS`` records gets the hybrid, in words (empty for a larger one)."""
    if facts.n_records is None or facts.n_records >= HYBRID_MIN_ROWS:
        return ""
    return (f" at epsilon {facts.epsilon:g} (records x epsilon {facts.n_records * facts.epsilon:,.0f}, at least "
            f"{HYBRID_MIN_RECORDS_EPSILON:,})")


def choose_table_default(facts: PublicFacts, given=()) -> TableDefault:
    """The table default for ``facts`` (:func:`table_default` and :func:`table_default_params` on its public count
    and epsilon), without the settings named in ``given``."""
    check_enough(facts)                       # a table too small for any release: refused before a plan is chosen
    n = facts.n_records
    method = table_default(n, facts.epsilon)
    sized = {k: v for k, v in table_default_params(n, facts.epsilon).items() if k not in given}
    why = (f"{facts.records}, fewer than {HYBRID_MIN_ROWS:,} and records x epsilon under "
           f"{HYBRID_MIN_RECORDS_EPSILON:,}: one kernel release keeps the whole budget"
           if method == "dp-merf" else f"{facts.records}{_by_epsilon(facts)}: measured marginals and a kernel embedding "
                                       f"in one plan")
    if sized:
        why += f"; {sized_settings(sized)}"
    return TableDefault(method, sized, why)
