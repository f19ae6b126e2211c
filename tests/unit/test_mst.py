"""MST through the engine (issue 47 item 2): fit, sample, save/load, the CLI, refusals before the charge."""
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import mmdsynth
from mmdsynth.errors import InvalidParameterError
from mmdsynth.methods import AIM, MST
from mmdsynth.privacy.budget import BudgetFile

from support import SCHEMA, run_cli, toy_table

pytest.importorskip("mbi")       # the [mbi] extra; in the test extra, so CI runs these


def test_fit_sample_and_the_ledger(tmp_path):
    df = toy_table(600)
    m = MST(epsilon=1.0, iters=300, noise_seed=0).fit(df, label="y", schema=SCHEMA, out=tmp_path / "run")
    eps, delta = m.release_.ledger.total()
    assert (eps, delta) == (1.0, 1e-5)
    entries = m.release_.ledger.entries
    d = 5                                                   # four columns and the label
    assert [e.mechanism for e in entries] == ["gaussian"] + ["exponential"] * (d - 1) + ["gaussian"]
    assert sum(e.rho for e in entries) == pytest.approx(entries[0].plan["rho"])
    pairs = [x["clique"] for x in m.release_.feature_spec["measurements"] if len(x["clique"]) == 2]
    assert len(pairs) == d - 1
    syn = m.sample(500, seed=1)
    assert list(syn.columns) == list(df.columns) and len(syn) == 500
    calibrated = m._calibrated()
    pd.testing.assert_frame_equal(m.sample(500, seed=1), syn)      # a later sample reuses the calibrated tree
    assert m._calibrated() is calibrated
    assert syn["age"].between(17, 90).all() and set(syn["colour"]) <= {"red", "green", "blue"}
    assert set(syn["y"]) <= {"neg", "pos"}
    again = mmdsynth.load(tmp_path / "run")
    assert type(again) is MST
    pd.testing.assert_frame_equal(again.sample(200, seed=3), m.sample(200, seed=3))


def _gap(t):
    """How much more often an over-50 row is labelled pos than the others (toy_table: y = (age > 50) xor blue)."""
    old = t["age"] > 50
    return (t["y"][old] == "pos").mean() - (t["y"][~old] == "pos").mean()


def test_pairwise_dependence_is_kept_and_a_three_way_one_is_not():
    """At epsilon 1000 (little noise) the tree's 2-way marginals keep the age-label dependence (about 0.3 here);
    the xor of age and colour is a 3-way interaction no spanning tree of pairs holds, so the synthetic rows must
    not reproduce it (if they did, something other than the released marginals would be at work)."""
    df = toy_table(3000, seed=4)
    m = MST(epsilon=1000.0, iters=500, noise_seed=0).fit(df, label="y", schema=SCHEMA)
    syn = m.sample(3000, seed=0)
    assert _gap(df) > 0.2 and abs(_gap(syn) - _gap(df)) < 0.06
    def xor_rate(t):
        return (((t["age"] > 50) ^ (t["colour"] == "blue")) == (t["y"] == "pos")).mean()
    assert xor_rate(df) == 1.0 and xor_rate(syn) < 0.7


def test_refusals_leave_the_budget_unspent(tmp_path):
    budget = BudgetFile.open(tmp_path / "b.json", "toy", 5.0, 1e-5)
    bad = toy_table(100)
    bad.loc[3, "age"] = 500                                  # outside the declared bounds
    with pytest.raises(mmdsynth.DataValidationError):
        MST(epsilon=1.0).fit(bad, label="y", schema=SCHEMA, budget=budget)
    incomplete = json.loads(json.dumps(SCHEMA))
    del incomplete["columns"][0]["bounds"]
    with pytest.raises(mmdsynth.SchemaError):
        MST(epsilon=1.0).fit(toy_table(100), label="y", schema=incomplete, budget=budget)
    with pytest.raises(InvalidParameterError):
        MST(epsilon=1.0).fit(np.zeros((10, 3)), budget=budget)
    assert BudgetFile.open(tmp_path / "b.json").spent == (0.0, 0.0)


def test_cli_fit_sample_evaluate(tmp_path, capsys):
    df = toy_table(500)
    df[:400].to_csv(tmp_path / "train.csv", index=False)
    df[400:].to_csv(tmp_path / "test.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    code, out, err = run_cli(capsys, "fit", "--method", "mst", "--csv", tmp_path / "train.csv", "--schema",
                             tmp_path / "s.json", "--label", "y", "--iters", "200", "--out", tmp_path / "run", "--quiet")
    assert code == 0, err[-1500:]
    assert "5 1-way, 4 2-way and 0 3-way marginal measurements released" in out
    code, _, err = run_cli(capsys, "sample", tmp_path / "run", "--n", "50", "--out", tmp_path / "s.csv")
    assert code == 0, err[-1500:]
    assert len(pd.read_csv(tmp_path / "s.csv")) == 50
    _, out, _ = run_cli(capsys, "inspect", tmp_path / "run")
    assert "exponential" in out or "tree edge" in out, out
    assert "accountant zcdp" in out


def test_aim_rounds_spend_the_whole_plan_and_sample(tmp_path):
    """AIM's rounds: 1-ways first, then select -> measure rounds until the filter's rho is spent exactly; each
    round's selection is one ledger entry and its measurement another; save, load and sample."""
    df = toy_table(500)
    with pytest.raises(InvalidParameterError, match="rounds"):
        AIM(epsilon=2.0, rounds=4).fit(df, label="y", schema=SCHEMA)
    m = AIM(epsilon=2.0, rounds=10, iters=30, noise_seed=0).fit(df, label="y", schema=SCHEMA, out=tmp_path / "aim")
    entries = m.release_.ledger.entries
    rounds = sum(e.mechanism == "exponential" for e in entries)
    assert rounds >= 1 and [e.mechanism for e in entries[:1]] == ["gaussian"]
    assert [e.mechanism for e in entries[1:]] == ["exponential", "gaussian"] * rounds
    assert sum(e.rho for e in entries) == pytest.approx(entries[0].plan["rho"], rel=1e-9)
    assert len(m.release_.feature_spec["measurements"]) == 5 + rounds
    syn = mmdsynth.load(tmp_path / "aim").sample(100, seed=0)
    assert len(syn) == 100 and list(syn.columns) == list(df.columns)


def test_shards_give_the_release_memory_gives(tmp_path):
    """The marginal sums run where the data lives: the same table in three CSV shards (stream engine) gives the
    same release as in memory (same fixed noise, so the same selections), and a bad shard is refused before the
    charge."""
    from mmdsynth.data import ShardedTable

    df = toy_table(600)
    for i, part in enumerate(np.array_split(np.arange(600), 3)):
        df.iloc[part].to_csv(tmp_path / f"part{i}.csv", index=False)
    shards = ShardedTable(tmp_path / "part*.csv", SCHEMA, n_records=600)
    a = MST(epsilon=1.0, iters=50, noise_seed=5).fit(df, label="y", schema=SCHEMA).release_
    b = MST(epsilon=1.0, iters=50, noise_seed=5).fit(shards, label="y").release_
    assert a.feature_spec["measurements"] == b.feature_spec["measurements"]
    for k in a.tensors:
        assert np.allclose(a.tensors[k].numpy(), b.tensors[k].numpy())
    assert b.dataset["computation"]["engine"] == "stream" and b.dataset["computation"]["shards"] == 3
    bad = df.copy()
    bad.loc[450, "age"] = 1000
    bad.iloc[400:].to_csv(tmp_path / "part2.csv", index=False)
    budget = BudgetFile.open(tmp_path / "b.json", "toy", 5.0, 1e-5)
    with pytest.raises(mmdsynth.DataValidationError):
        MST(epsilon=1.0).fit(ShardedTable(tmp_path / "part*.csv", SCHEMA, n_records=600), label="y", budget=budget)
    assert BudgetFile.open(tmp_path / "b.json").spent == (0.0, 0.0)


def test_cli_fits_mst_on_shards(tmp_path, capsys):
    df = toy_table(300)
    for i, part in enumerate(np.array_split(np.arange(300), 2)):
        df.iloc[part].to_csv(tmp_path / f"part{i}.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    code, _, err = run_cli(capsys, "fit", "--method", "mst", "--shards", tmp_path / "part*.csv", "--schema",
                           tmp_path / "s.json", "--label", "y", "--n-records", "300", "--iters", "50", "--out",
                           tmp_path / "run", "--quiet")
    assert code == 0, err[-1500:]
    assert mmdsynth.load(tmp_path / "run").release_.dataset["computation"]["shards"] == 2


def test_a_spike_inside_a_wide_cell_comes_back_as_the_spike():
    """Numeric 1-way marginals are measured on the full public grid (one cell per integer up to 256 values), and a
    coarse cell's value is drawn through them: half the rows at exactly 40 hours come back at 40 (drawing uniformly
    inside the 32-cell grid's cell spread them over 40-43: adult's hours-per-week 1-way TVD was 0.34, now 0.007)."""
    from mmdsynth.data import Schema
    from mmdsynth.data.discrete import Domain

    schema = Schema.from_dict({"columns": [{"name": "hours", "type": "numeric", "bounds": [1, 99], "integer": True},
                                           {"name": "k", "type": "categorical", "categories": ["a", "b"]}],
                               "label": "y", "label_categories": ["0", "1"]})
    g = np.random.default_rng(0)
    n = 2000
    hours = np.where(g.random(n) < 0.5, 40, g.integers(1, 100, n))
    df = pd.DataFrame({"hours": hours, "k": g.choice(["a", "b"], n), "y": g.choice(["0", "1"], n)})
    syn = MST(epsilon=100.0, iters=200, noise_seed=0).fit(df, label="y", schema=schema).sample(n, seed=0)
    assert abs((syn["hours"] == 40).mean() - (df["hours"] == 40).mean()) < 0.05
    domain = Domain.of(schema)
    fine, parent = domain.fine(), domain.coarse_of_fine("hours")
    lo, hi = domain.grids["hours"].edges, fine.grids["hours"].edges
    assert len(parent) == fine.size("hours") and (np.diff(parent) >= 0).all()        # nested, in order
    assert set(lo) <= set(hi)


def _model_with_a_cycle(seed: int, n_attributes: int):
    """(sizes, an mbi model) whose cliques form a cycle (so its junction tree has fill-in) plus a separate
    component, estimated from random counts."""
    from mmdsynth.generators.graphical import mbi

    lib = mbi()
    rng = np.random.default_rng(seed)
    sizes = {f"x{i}": int(rng.integers(2, 7)) for i in range(n_attributes)}
    cliques = [("x0", "x1"), ("x1", "x2"), ("x0", "x2"), ("x3", "x4"), ("x4", "x5", "x6"), ("x2", "x5"), ("x7",)]
    ms = [lib.LinearMeasurement(rng.random(int(np.prod([sizes[a] for a in c]))) * 100, c, 1.0) for c in cliques]
    return sizes, lib.estimation.MirrorDescent().estimate(lib.Domain.fromdict(sizes), ms, known_total=1000.0, iters=50)


def test_model_marginals_match_mbi_on_a_model_with_a_cycle():
    """AIM's selection reads every candidate's model marginal each round: ModelMarginals (numpy, the calibrated
    junction tree and a path product) gives the marginals of mbi's own joint distribution on every pair and every
    attribute, for a model whose cliques form a cycle (so the tree has fill-in) plus a separate component."""
    import itertools

    from mmdsynth.generators.graphical import ModelMarginals

    sizes, model = _model_with_a_cycle(seed=0, n_attributes=9)
    ours = ModelMarginals(model)
    # mbi's whole joint (17,280 cells), projected once: each query a sum of it (one projection a query compiled one
    # program each, 13 s of the test)
    names = list(sizes)
    joint = np.asarray(model.project(tuple(names)).datavector(flatten=False))
    for q in [(a,) for a in sizes] + list(itertools.combinations(sizes, 2)):
        theirs = joint.sum(axis=tuple(i for i, a in enumerate(names) if a not in q)).reshape(-1)
        np.testing.assert_allclose(ours(q), theirs, rtol=1e-8, atol=1e-8, err_msg=str(q))
    with pytest.raises(InvalidParameterError, match="1- and 2-way"):
        ours(("x0", "x3", "x8"))


def test_the_numpy_estimate_is_mbis_and_compiles_nothing(monkeypatch):
    """Small models are estimated in numpy (mmdsynth.generators.mirror_descent), larger ones by mbi's compiled
    steps: on a model whose cliques form a cycle (fill-in), with a separate component, a column measured only
    alone, a numeric column measured on its fine grid (a weighted query) and a warm start from a model of fewer
    measurements, both give the same marginals after 50 steps (the same iterates up to rounding: a wrong step size,
    line search, weight or spread onto the tree moves them by far more), and the numpy one compiles nothing."""
    import jax.monitoring

    from mmdsynth.data.discrete import Domain
    from mmdsynth.data.schema import Schema
    from mmdsynth.generators import graphical

    cols = [{"name": f"x{i}", "type": "categorical", "categories": list("abcde"[:2 + i % 4])} for i in range(7)]
    cols.append({"name": "v", "type": "numeric", "bounds": [0, 100]})
    domain = Domain.of(Schema.from_dict({"columns": cols}), 6)
    g = np.random.default_rng(0)

    def counts(c, fine=False):
        return g.random(int(np.prod([(domain.fine() if fine else domain).size(a) for a in c]))) * 100

    first = [(c, counts(c), 2.0, False) for c in [("x0", "x1"), ("x1", "x2"), ("x3", "x4"), ("x6",)]]
    more = first + [(c, counts(c), 1.5, False) for c in [("x0", "x2"), ("x4", "x5", "v"), ("x2", "x5")]]
    more.append((("v",), counts(("v",), fine=True), 1.0, True))
    compiled, listening = [], [True]
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: compiled.append(kw.get("fun_name"))
        if listening[0] and "backend_compile" in event else None)
    ours = graphical.estimate(domain, more, 1000, 50, warm_start=graphical.estimate(domain, first, 1000, 50))
    listening[0] = False
    assert compiled == []
    monkeypatch.setattr(graphical, "NUMPY_CELLS", 0)
    theirs = graphical.estimate(domain, more, 1000, 50, warm_start=graphical.estimate(domain, first, 1000, 50))
    assert ours.potentials.cliques == theirs.potentials.cliques
    for c in ours.potentials.cliques:
        np.testing.assert_allclose(np.asarray(ours.project(c).datavector()),
                                   np.asarray(theirs.project(c).datavector()), rtol=1e-6, atol=1e-6, err_msg=str(c))


def test_estimates_do_not_pile_up_compiled_programs(monkeypatch):
    """AIM re-estimates the model every round, each time for new cliques; JAX kept every compiled program, and on
    census (41 columns) the process reached the kernel's 65,530 memory-mapping limit and died (signal 11). The
    estimate drops them first: 3 estimates of different models (on mbi's compiled path, as a large model is) leave
    the mapping count about where one left it (measured: -93 to +3 over 12; without the clearing it grows by 200,
    328 and 471 after 1, 2 and 3, and by 2,038 after 12)."""
    from mmdsynth.data.discrete import Domain
    from mmdsynth.data.schema import Schema
    from mmdsynth.generators import graphical
    from mmdsynth.generators.graphical import estimate

    monkeypatch.setattr(graphical, "NUMPY_CELLS", 0)

    cols = [{"name": f"c{i}", "type": "categorical", "categories": ["a", "b", "c"]} for i in range(8)]
    domain = Domain.of(Schema.from_dict({"columns": cols}), 32)
    g = np.random.default_rng(0)
    names = [c["name"] for c in cols]

    def one(k, first=0):
        pairs = [(names[i], names[(i + 1 + k) % 8]) for i in range(first, first + 3)]
        ms = [((a,), g.random(3) * 100, 1.0, False) for a in names] + [(p, g.random(9) * 30, 1.0, False) for p in pairs]
        estimate(domain, ms, 300, iters=5)

    def mappings():
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    one(0)
    start = mappings()
    for k in range(1, 4):
        one(k % 7, first=k % 5)
    assert mappings() - start < 150, mappings() - start


def test_label_pairs_measure_every_column_with_the_label_in_four_equal_shares():
    """``label_pairs``: after the tree, the label's pairs the tree left out are measured (a public choice), and
    the three Gaussian releases and the tree's selection each get a quarter of the plan's rho."""
    df = toy_table(600)
    m = MST(epsilon=1.0, iters=200, label_pairs=True, noise_seed=0).fit(df, label="y", schema=SCHEMA)
    entries = m.release_.ledger.entries
    d = 5                                                   # four columns and the label
    assert [e.mechanism for e in entries] == ["gaussian"] + ["exponential"] * (d - 1) + ["gaussian", "gaussian"]
    rho = entries[0].plan["rho"]
    assert sum(e.rho for e in entries) == pytest.approx(rho)
    gaussians = [e for e in entries if e.mechanism == "gaussian"]
    assert [e.rho for e in gaussians] == pytest.approx([rho / 4] * 3)
    pairs = [tuple(x["clique"]) for x in m.release_.feature_spec["measurements"] if len(x["clique"]) == 2]
    columns = [c for c in df.columns if c != "y"]
    assert {(c, "y") for c in columns} <= set(pairs)          # every column measured with the label
    assert len(pairs) == len(set(pairs)) == (d - 1) + sum((c, "y") not in pairs[:d - 1] for c in columns)
    assert len(m.sample(300, seed=0)) == 300
    plain = MST(epsilon=1.0, iters=200, noise_seed=0).fit(df, label="y", schema=SCHEMA)
    assert [e.mechanism for e in plain.release_.ledger.entries][-2:] == ["exponential", "gaussian"]


def test_label_pairs_is_refused_where_it_cannot_apply():
    from mmdsynth.methods import Hybrid
    with pytest.raises(InvalidParameterError, match="label_pairs"):
        MST(epsilon=1.0, label_pairs="yes").fit(toy_table(100), label="y", schema=SCHEMA)
    with pytest.raises(InvalidParameterError, match="marginals='mst'"):
        Hybrid(epsilon=1.0, marginals="aim", label_pairs=True).fit(toy_table(100), label="y", schema=SCHEMA)


def test_a_tree_scored_by_dependence_joins_the_dependent_pairs_and_says_so(tmp_path):
    """``tree_score="dependence"`` (MST and the hybrid): the tree's rounds score each pair by its distance from
    independence, at the sensitivity 6 + 4/m the ledger states; at a large epsilon the tree joins the pairs that
    depend (smoker copies colour's blue; y depends on age and colour) and not the independent score column to
    anything but one partner. A name the engine does not know is refused before the budget is touched."""
    from mmdsynth.methods import Hybrid

    df = toy_table(2000, seed=2)
    df["smoker"] = np.where(df["colour"] == "blue", "yes", "no")
    m = MST(epsilon=200.0, iters=200, tree_score="dependence", noise_seed=0).fit(df, label="y", schema=SCHEMA)
    trees = [e for e in m.release_.ledger.entries if e.mechanism == "exponential"]
    assert len(trees) == 4 and all("product of its own 1-way counts" in e.description for e in trees)
    assert [e.sensitivity for e in trees] == pytest.approx([6 + 4 / 2000] * 4)
    pairs = {frozenset(x["clique"]) for x in m.release_.feature_spec["measurements"] if len(x["clique"]) == 2}
    assert frozenset(("colour", "smoker")) in pairs and frozenset(("age", "y")) in pairs
    assert sum("score" in p for p in pairs) == 1
    plain = MST(epsilon=200.0, iters=200, noise_seed=0).fit(df, label="y", schema=SCHEMA)
    assert all(e.sensitivity == 2.0 for e in plain.release_.ledger.entries if e.mechanism == "exponential")
    h = Hybrid(epsilon=1.0, pool=2, steps=5, tree_score="dependence", noise_seed=0).fit(toy_table(600), label="y",
                                                                                         schema=SCHEMA)
    assert any("product of its own 1-way counts" in e.description for e in h.release_.ledger.entries)
    budget = BudgetFile.open(tmp_path / "b.json", "toy", 5.0, 1e-5)
    for method in (MST, Hybrid):
        with pytest.raises(InvalidParameterError, match="tree_score must be one of"):
            method(epsilon=1.0, tree_score="mutual information").fit(toy_table(100), label="y", schema=SCHEMA,
                                                                     budget=budget)
    assert BudgetFile.open(tmp_path / "b.json").spent == (0.0, 0.0)


def test_rows_are_rounded_along_the_junction_tree_and_compile_nothing():
    """The draw (randomized rounding along the calibrated junction tree, in numpy) on a model whose cliques form a
    cycle (so the tree has fill-in) plus a separate component: the first column's counts are the model's to within a
    row, every later column's counts within each group of rows sharing its parents are the model's conditional
    counts to within two rows (one evenly spaced, jittered point per row: each end of a category's interval may take
    one or not), a seed gives the same rows again, and no program is compiled."""
    import jax.monitoring

    from mmdsynth.generators.graphical import ModelMarginals, draw_codes

    sizes, model = _model_with_a_cycle(seed=1, n_attributes=8)
    calibrated = ModelMarginals(model)
    compiled, listening = [], [True]                  # JAX keeps its listeners: this one stops after the draw
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: compiled.append(kw.get("fun_name"))
        if listening[0] and "backend_compile" in event else None)
    n = 2000
    np.random.seed(3)
    rows = draw_codes(model, calibrated, n)
    listening[0] = False
    assert compiled == []
    np.random.seed(3)
    again = draw_codes(model, calibrated, n)
    assert all(np.array_equal(rows[a], again[a]) for a in sizes)
    order = list(calibrated.order)[::-1]
    first = calibrated.inside_a_clique((order[0],))
    seen = np.bincount(rows[order[0]], minlength=sizes[order[0]])
    assert np.abs(seen - n * first / first.sum()).max() < 1 + 1e-9
    cliques = [set(c) for c in calibrated.tree.nodes]
    checked = 0
    for k, col in enumerate(order[1:], 1):
        near = set().union(*[c for c in cliques if col in c])
        parents = tuple(a for a in sizes if a in near and a in order[:k])
        if not parents:
            continue
        joint = calibrated.inside_a_clique(parents + (col,))
        keys = np.stack([rows[a] for a in parents], -1)
        for key in np.unique(keys, axis=0):
            members = (keys == key).all(1)
            cond = joint[tuple(key)] / joint[tuple(key)].sum()
            got = np.bincount(rows[col][members], minlength=sizes[col])
            assert np.abs(got - members.sum() * cond).max() < 2, (col, parents, key)   # a jittered point per row
            checked += 1
    assert checked > 20 and any(len(set(c)) >= 3 for c in calibrated.tree.nodes)


def test_a_seed_draws_the_same_rows_in_every_process(tmp_path):
    """A saved model's ``sample(n, seed=s)`` is the same in two other processes with other string hashes. mbi's own
    sampler orders a column's parents by iterating a Python set of column names, so another process (another string
    hash) drew other rows from the same model and seed; the draw here takes the parents in the domain's order. A model
    with the label's pairs has cliques of three (a column with two parents)."""
    import hashlib
    import os

    m = MST(epsilon=5.0, iters=200, label_pairs=True, noise_seed=0).fit(toy_table(600), label="y", schema=SCHEMA,
                                                                          out=tmp_path / "m")
    code = ("import sys, hashlib, mmdsynth; m = mmdsynth.load(sys.argv[1]); "
            "print(hashlib.sha256(m.sample(3000, seed=4).to_csv().encode()).hexdigest())")
    here = hashlib.sha256(m.sample(3000, seed=4).to_csv().encode()).hexdigest()
    there = {subprocess.run([sys.executable, "-c", code, str(tmp_path / "m")], capture_output=True, text=True,
                            check=True, env={**os.environ, "PYTHONHASHSEED": h}).stdout.strip() for h in ("1", "2")}
    assert there == {here}


def test_the_calibration_answers_any_set_inside_a_clique_in_the_order_asked():
    """The sampler asks for the counts of a parent set and a column in any order; each answer is mbi's own
    marginal with the axes in the order asked, and a set in no clique of the tree is refused."""
    from mmdsynth.generators.graphical import ModelMarginals

    sizes, model = _model_with_a_cycle(seed=2, n_attributes=8)
    ours = ModelMarginals(model)
    for q in [("x2", "x0", "x1"), ("x6", "x4"), ("x5", "x6", "x4"), ("x7",)]:
        theirs = np.asarray(model.project(tuple(sorted(q))).datavector(flatten=False))
        order = [sorted(q).index(a) for a in q]
        np.testing.assert_allclose(ours.inside_a_clique(q), np.transpose(theirs, order), rtol=1e-8, atol=1e-8)
    with pytest.raises(InvalidParameterError, match="no clique"):
        ours.inside_a_clique(("x0", "x7"))


def test_released_grid_is_cut_from_the_release_and_travels_with_the_model(tmp_path):
    """``grid="released"``: each numeric column's cells are cut where its released fine 1-way marginal puts equal
    mass. The model's domain is a function of the release alone (recomputed from its fine 1-way tensors, it is
    the same), it is saved with the release and read back by a loaded model; the 2-way measurements are counted in
    it; a wrong value is refused before anything is read."""
    from mmdsynth.data.discrete import Domain
    from mmdsynth.data.numeric_sketch import ColumnGrid

    df = toy_table(3000, seed=4)
    df["age"] = np.where(df["age"] < 60, 30 + df["age"] % 5, df["age"])     # mass piled on 30-34
    m = MST(epsilon=1.0, iters=200, grid="released").fit(df, label="y", schema=SCHEMA, out=tmp_path / "run")
    spec = m.release_.feature_spec
    domain = m.domain_()
    assert domain.grid == "released" and spec["domain"]["grid"] == "released"
    fine = {x["clique"][0]: m.release_.tensors[x["tensor"]].numpy() for x in spec["measurements"] if x["fine"]}
    again = Domain.of(domain.schema, 32).adapted(fine)
    def edges(d):
        return {k: g.edges.tolist() for k, g in d.grids.items()}
    assert edges(again) == edges(domain)
    age = domain.grids["age"]
    public = Domain.of(domain.schema, 32).grids["age"]
    assert set(age.edges) <= set(ColumnGrid.of(domain.schema.column("age")).edges)
    assert ((age.edges > 29) & (age.edges < 35)).sum() > ((public.edges > 29) & (public.edges < 35)).sum()
    for x in spec["measurements"]:
        if len(x["clique"]) == 2:
            assert m.release_.tensors[x["tensor"]].numel() == np.prod([domain.size(a) for a in x["clique"]])
    loaded = mmdsynth.load(tmp_path / "run")
    assert loaded.domain_().grids["age"].edges.tolist() == age.edges.tolist()
    pd.testing.assert_frame_equal(loaded.sample(300, seed=2), m.sample(300, seed=2))
    assert m.sample(300, seed=2)["age"].between(17, 90).all()
    with pytest.raises(InvalidParameterError, match="grid"):
        MST(epsilon=1.0, grid="quantile").fit(toy_table(100).assign(age=np.nan), label="y", schema=SCHEMA)


def test_the_mbi_internals_the_adapter_reads_are_where_it_reads_them():
    """Issue 82: the adapter reads mbi's internals (junction tree, oracles, weighted query, the sampler's oracle
    module), so pyproject pins mbi's minor version; this names what a new mbi moved before the pin is widened."""
    import re
    from importlib.metadata import version
    from pathlib import Path

    from mmdsynth.generators.graphical import MBI_INTERNALS, mbi, mbi_internals_missing

    lib = mbi()
    assert mbi_internals_missing(lib) == [], f"mbi {version('mbi')} moved these: re-check generators/graphical.py"
    pin = re.search(r'"mbi>=2\.0,<(\d+)\.(\d+)"', (Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pin, "pyproject must pin mbi's minor version (the adapter reads its internals)"
    assert tuple(int(x) for x in version("mbi").split(".")[:2]) < (int(pin.group(1)), int(pin.group(2)))
    assert len(MBI_INTERNALS) == len(set(MBI_INTERNALS))

    class Moved:                                   # an mbi without one internal: named, not an AttributeError later
        __name__ = "mbi"
        Domain = lib.Domain
    assert "LinearMeasurement" in mbi_internals_missing(Moved)


def test_the_numpy_calibration_is_exact_where_probabilities_underflow():
    """Potentials so far apart that every product of a clique underflows in probability space (each pair's
    potential puts its mass on a different value of b, the joint's mass e^-800 on both): the calibration falls back
    to log space, as mbi calibrates, and gives the joint's marginals, finite and without a warning (in probability
    space the belief is all zeros and the marginals NaN, so the line search rejects steps mbi takes)."""
    import warnings

    import networkx as nx
    from scipy.special import logsumexp

    from mmdsynth.generators.mirror_descent import _Calibration, _Layout

    sizes, cliques = {"a": 2, "b": 3, "c": 2}, [("a", "b"), ("b", "c")]
    layout = _Layout(cliques, sizes)
    jtree = nx.Graph([tuple(cliques)])
    ab = np.full((2, 3), -800.0)
    ab[:, 0] = [0.0, -1.0]
    bc = np.full((3, 2), -800.0)
    bc[1, :] = [-2.0, 0.0]
    joint = ab[:, :, None] + bc[None, :, :]
    joint = np.exp(joint - logsumexp(joint)) * 50.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mu = _Calibration(jtree, layout)(np.concatenate([ab.ravel(), bc.ravel()]), 50.0)
    got = layout.views(mu)
    assert np.allclose(got[0], joint.sum(2)) and np.allclose(got[1], joint.sum(0))
    assert got[0][:, 0].sum() > 20 and got[0][:, 1].sum() > 20       # the mass is split between b = 0 and b = 1
