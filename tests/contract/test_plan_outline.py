"""The plan said before paying (issue 81, item 5): for every table method that outlines its plan, the shares it prints
before a row is read are the shares its fit's ledger then records, the outline depends on public facts only, and a
fit whose memory estimate exceeds the machine is refused before anything is read, written or charged."""
import json

import pytest

import mmdsynth
from mmdsynth.choice import PublicFacts
from mmdsynth.cli import main
from mmdsynth.data import Schema
from mmdsynth.errors import InvalidParameterError
from mmdsynth.methods import outline as outline_module
from mmdsynth.methods.contract import METHODS

from support import SCHEMA, toy_table

pytest.importorskip("mbi")

#: each outlined method at settings that fit in a second (the plan's structure is the defaults')
FAST = {"dp-merf": dict(iterations=5, batch_size=50, n_features=100),
        "dp-hp": dict(iterations=5, batch_size=50), "dp-ntk": dict(iterations=5, batch_size=50),
        "mst": dict(iters=50), "aim": dict(iters=20, rounds=12),
        "hybrid": dict(iters=50, n_features=100, pool=2, steps=5)}


def outlined():
    """The registry's table methods with an outline (a new one joins the contract by outlining its plan)."""
    schema = Schema.from_dict(SCHEMA)
    out = []
    for name, cls in sorted(METHODS.items()):
        if "table" in cls.data_kinds and cls(1.0).plan_outline(schema, PublicFacts(400, None, 1.0, 1e-5)) is not None:
            out.append(name)
    return out


def ledger_shares(entries):
    """Each ledger entry's share of its plan: rho over the plan's rho (zCDP), else 1 / sigma^2 over the sum."""
    if all(e.rho for e in entries):
        total = entries[0].plan["rho"]
        return [e.rho / total for e in entries]
    inv = [1.0 / e.noise_multiplier ** 2 for e in entries]
    return [v / sum(inv) for v in inv]


def test_every_table_method_outlines_its_plan():
    names = outlined()
    assert {"dp-merf", "mst", "aim", "hybrid"} <= set(names), names
    missing = set(names) - set(FAST)
    assert not missing, f"give {missing} fast settings in FAST: they outline a plan this contract must check"


@pytest.mark.parametrize("name", sorted(FAST))
def test_the_outline_is_what_the_ledger_records(name):
    """The shares printed before the fit add up to the whole plan and match the ledger's entries, in order (AIM's
    rounds, whose number follows their noisy results, as one line: their sum)."""
    if name not in outlined():
        pytest.skip(f"{name} does not outline its plan")
    df = toy_table(400)
    model = METHODS[name](1.0, noise_seed=0, **FAST[name])
    plan = model.plan_outline(Schema.from_dict(SCHEMA), PublicFacts(len(df), None, 1.0, 1e-5))
    said = [share for _, share in plan.releases]
    assert sum(said) == pytest.approx(1.0, abs=1e-9)
    model.fit(df, label="y", schema=SCHEMA)
    recorded = ledger_shares(model.release_.ledger.entries)
    if name == "aim":                       # the rounds after the 1-way marginals: one line
        recorded = [recorded[0], sum(recorded[1:])]
    if name in ("mst", "hybrid"):           # the tree's selection: one entry per round, one line
        rounds = len(SCHEMA["columns"])     # attributes (columns and the label) - 1
        recorded = [recorded[0], sum(recorded[1:1 + rounds]), *recorded[1 + rounds:]]
    assert recorded == pytest.approx(said, abs=1e-9), (plan.lines(), recorded)
    assert plan.memory_bytes > 0 and plan.seconds > 0


def test_the_outline_reads_public_facts_only():
    """Two tables with the same public facts (schema, count, epsilon, delta) get the same outline, whatever their
    values; the count moves the pool's memory and nothing private does."""
    schema = Schema.from_dict(SCHEMA)
    h = METHODS["hybrid"](1.0)
    small = h.plan_outline(schema, PublicFacts(1_000, None, 1.0, 1e-5))
    assert small == h.plan_outline(schema, PublicFacts(1_000, None, 1.0, 1e-5))
    large = h.plan_outline(schema, PublicFacts(100_000, None, 1.0, 1e-5))
    assert large.memory_bytes > small.memory_bytes and large.releases == small.releases
    # the pool is capped (max_pool): beyond it only the table as read grows, as MST's does
    mem = lambda model, n: model.plan_outline(schema, PublicFacts(n, None, 1.0, 1e-5)).memory_bytes  # noqa: E731
    mst = METHODS["mst"](1.0)
    assert mem(h, 10 ** 7) - mem(h, 10 ** 6) == mem(mst, 10 ** 7) - mem(mst, 10 ** 6) > 0


def test_a_fit_past_the_machine_is_refused_before_anything_is_read(tmp_path, monkeypatch, capsys):
    """The CLI prints the plan, then refuses a fit whose estimate exceeds the memory free, naming the setting that
    lowers it; no folder is written, no budget charged. Python's mmdsynth.fit refuses the same way."""
    df = toy_table(400)
    csv, schema = tmp_path / "t.csv", tmp_path / "s.json"
    df.to_csv(csv, index=False)
    schema.write_text(json.dumps(SCHEMA))
    monkeypatch.setattr(outline_module, "available_memory", lambda: 100 * 2 ** 20)    # 100 MB free
    budget = tmp_path / "budget.json"
    assert main(["fit", "--csv", str(csv), "--schema", str(schema), "--label", "y", "--epsilon", "1", "--method",
                 "hybrid", "--budget", str(budget), "--budget-epsilon", "5", "--out", str(tmp_path / "run")]) != 0
    said = capsys.readouterr()
    assert "plan: hybrid on 400 rows" in said.out and "40.0 %  the class-conditional kernel" in said.out
    assert "estimate: about" in said.out
    assert "nothing was read or charged" in said.err and "--max-pool" in said.err and "--n-features" in said.err
    assert not (tmp_path / "run").exists() and not budget.exists()
    with pytest.raises(InvalidParameterError, match="nothing was read or charged"):
        mmdsynth.fit(df, label="y", schema=SCHEMA, epsilon=1.0, method="hybrid")


@pytest.mark.parametrize("name", ["hybrid", "mst", "aim"])
def test_an_outline_of_a_schema_without_bounds_is_refused_as_the_fit_refuses_it(name):
    """A schema that leaves out bounds or categories: the outline (printed before the fit) refuses it with the fit's
    typed error naming the columns, not a TypeError from the grid."""
    from mmdsynth.errors import SchemaError
    from support import partial_schema

    with pytest.raises(SchemaError, match="leaves out bounds"):
        METHODS[name](1.0).plan_outline(partial_schema(), PublicFacts(400, None, 1.0, 1e-5))
