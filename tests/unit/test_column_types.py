"""Nullable, datetime and id columns (issue 32): declared in the schema, checked on the private rows,
encoded as blocks the feature maps' bounds cover, generated with the declared types."""
import math

import numpy as np
import pandas as pd
import pytest
import torch

from mmdsynth import DPMERF, Schema
from mmdsynth.data.encoding import TableEncoder, fresh_ids
from mmdsynth.data.numeric_sketch import NumericSketch, release_numeric_sketch
from mmdsynth.data.private_schema import SchemaInference, release_schema_statistics
from mmdsynth.data.schema import Column
from mmdsynth.embedding import mean_embedding
from mmdsynth.errors import DataValidationError, SchemaError
from mmdsynth.features import MixedRFF
from mmdsynth.privacy.engine import PrivacyEngine

from support import MIXED_SCHEMA, mixed_table


def test_declarations_round_trip_and_bad_ones_name_the_fix():
    schema = Schema.from_dict(MIXED_SCHEMA)
    again = Schema.from_dict(schema.to_dict())
    assert again.to_dict() == schema.to_dict()
    visit = schema.column("visit")
    assert visit.kind == "numeric" and visit.datetime == "D" and visit.bounds[0] == 18262 * 86400.0   # 2020-01-01
    assert schema.to_dict()["columns"][4]["bounds"] == ["2020-01-01T00:00:00", "2022-12-31T00:00:00"]
    assert schema.ids == ["pid"] and "pid" not in schema.numeric
    bad = [({"name": "d", "type": "datetime", "bounds": ["2020-01-01", "soon"]}, "not a date"),
           ({"name": "d", "type": "datetime", "resolution": "fortnight"}, "resolution"),
           ({"name": "i", "type": "id", "integer": True}, "public range"),
           ({"name": "i", "type": "id", "nullable": True}, "takes no"),
           ({"name": "c", "type": "categorical", "categories": ["a", None]}, "nullable"),
           ({"name": "n", "type": "numeric", "prefix": "x"}, "takes no"),
           ({"name": "n", "type": "timestamp"}, "type must be")]
    for column, message in bad:
        with pytest.raises(SchemaError, match=message):
            Column.from_dict(column)
    with pytest.raises(SchemaError, match="nullable and id columns cannot"):
        Schema.from_dict({"columns": [*MIXED_SCHEMA["columns"]], "constraints": [
            {"type": "fixed_combinations", "columns": ["age", "colour"], "values": [[20, "red"]]}]})


def test_missing_values_are_accepted_where_declared_and_refused_elsewhere():
    schema = Schema.from_dict(MIXED_SCHEMA)
    df = mixed_table(200)
    out = schema.validate(df)
    assert out["income"].isna().sum() == df["income"].isna().sum() > 0
    assert out["colour"].isna().sum() == df["colour"].isna().sum() > 0
    assert out["visit"].between(*schema.column("visit").bounds).all()
    pd.testing.assert_frame_equal(schema.validate(out), out)            # a checked table checks again as is
    holes = df.assign(age=[np.nan] + list(df["age"][1:]))
    with pytest.raises(DataValidationError, match=r"'age' has 1 missing.*\"nullable\": true"):
        schema.validate(holes)
    text = df.assign(visit=df["visit"].dt.strftime("%Y-%m-%d"))         # ISO text reads as dates too
    assert schema.validate(text)["visit"].equals(out["visit"])
    late = df.assign(visit=[pd.Timestamp("2023-02-01")] + list(df["visit"][1:]))
    with pytest.raises(DataValidationError, match=r"'visit' has 1 value\(s\) outside.*2022-12-31"):
        schema.validate(late)
    with pytest.raises(DataValidationError, match="not dates"):
        schema.validate(df.assign(visit="yesterday"))
    with pytest.raises(DataValidationError, match="outside its declared range"):
        schema.validate(df.assign(pid=100000))
    named = Schema.from_dict({"columns": [{"name": "k", "type": "id"}, {"name": "a", "type": "numeric",
                                                                         "bounds": [0, 1]}]})
    with pytest.raises(DataValidationError, match="starting with 'syn-'"):
        named.validate(pd.DataFrame({"k": ["p1", "syn-7"], "a": [0.1, 0.2]}), require_label=False)


def test_encoding_blocks_are_one_hot_and_decode_restores_missingness_dates_and_types():
    schema = Schema.from_dict(MIXED_SCHEMA)
    enc = TableEncoder.for_frame(schema, mixed_table(10))
    df = mixed_table(500, seed=1)
    X, y = enc.encode(df)
    # age, income, visit | colour (3 + missing) | income [present, missing]
    assert enc.n_numeric == 3 and enc.category_sizes == [4, 2] and X.shape == (500, 9)
    assert X[:, :3].min() >= 0 and X[:, :3].max() <= 1
    blocks = np.split(X[:, 3:], [4], axis=1)
    assert all(np.all(b.sum(1) == 1) for b in blocks)          # every block one-hot: the maps' bounds hold
    assert np.array_equal(blocks[1][:, 1] == 1, df["income"].isna().to_numpy())
    assert np.all(X[df["income"].isna().to_numpy(), 1] == 0.5)  # the public placeholder
    back = enc.decode(X, y, categorical="argmax", rng=np.random.default_rng(0))
    assert list(back.columns) == list(df.columns)
    assert back["income"].isna().equals(df["income"].isna()) and back["colour"].isna().equals(df["colour"].isna())
    assert str(back["visit"].dtype) == "datetime64[ns]" and (back["visit"] == back["visit"].dt.floor("D")).all()
    assert (back["visit"] - df["visit"]).abs().max() <= pd.Timedelta(days=1)   # float32 + rounding to the day
    assert back["age"].dtype == np.int64 and back["pid"].dtype == np.int64
    assert back["pid"].is_unique and back["pid"].min() > 99999                # never a real ID


def test_generated_ids_are_unique_and_fresh_and_formats_are_kept():
    rng = np.random.default_rng(0)
    text = fresh_ids(Column("k", "id"), 10000, rng)
    assert len(set(text)) == 10000 and all(t.startswith("syn-") and len(t) == 36 for t in text)
    ints = fresh_ids(Column("k", "id", (1, 10), integer=True), 10000, rng)
    assert len(set(ints)) == 10000 and ints.min() > 10
    schema = Schema.from_dict({"columns": [
        {"name": "when", "type": "datetime", "bounds": ["01/03/2021 08:00", "31/03/2021 18:00"], "resolution": "h",
         "format": "%d/%m/%Y %H:%M", "nullable": True},
        {"name": "flag", "type": "boolean", "nullable": True}]})
    df = pd.DataFrame({"when": ["05/03/2021 09:00", None, "30/03/2021 17:00"], "flag": [True, None, "false"]})
    assert schema.column("when").bounds[0] == pd.Timestamp("2021-03-01 08:00").timestamp()   # day first, as declared
    assert Schema.from_dict(schema.to_dict()).column("when").bounds == schema.column("when").bounds
    enc = TableEncoder.for_frame(schema, df)
    X, _ = enc.encode(df, with_label=False)
    back = enc.decode(X, categorical="argmax")
    assert back["when"].tolist()[0] == "05/03/2021 09:00" and back["when"].isna().tolist() == [False, True, False]
    assert back["flag"].tolist()[0] is True and back["flag"].isna().tolist() == [False, True, False]
    assert str(back["flag"].dtype) == "boolean"


def _engine(sigma, multipliers):
    return PrivacyEngine.with_sigma(sigma, noise_seed=0, multipliers=multipliers)


def test_worst_case_neighbours_of_nullable_columns_move_every_release_within_its_sensitivity():
    """Record 0 goes from all-missing to extreme present values (and back): the numeric sketch, the
    schema counts and the table embedding move by at most their recorded sensitivities."""
    schema = Schema.from_dict(MIXED_SCHEMA)
    base = mixed_table(60)
    base.loc[0, ["income", "colour"]] = [np.nan, None]
    neighbours = []
    for income, colour in [(200000.0, "blue"), (0.0, "red"), (np.nan, "green"), (123.0, None)]:
        other = base.copy()
        other.loc[0, ["income", "colour"]] = [income, colour]
        neighbours.append(other)
    sketch = NumericSketch.of(schema)
    a = release_numeric_sketch(base, sketch, _engine(1.0, {"numeric_sketch": 1.0}), encoder=TableEncoder(schema))
    todo = SchemaInference(("income",), ("colour",))
    sa = release_schema_statistics(base, todo, _engine(1e-12, {"schema": 1.0}))
    enc = TableEncoder(schema)
    fmap = MixedRFF(enc.n_numeric, len(enc.category_sizes), sum(enc.category_sizes), 40, 0.5,
                    category_sizes=enc.category_sizes)
    Xa, ya = enc.encode(base)
    mu_a = mean_embedding(fmap, torch.tensor(Xa), torch.tensor(ya), 2)
    for other in neighbours:
        b = release_numeric_sketch(other, sketch, _engine(1.0, {"numeric_sketch": 1.0}), encoder=TableEncoder(schema))
        assert math.sqrt(sum(float(((a[k] - b[k]) ** 2).sum()) for k in a)) <= sketch.sensitivity + 1e-9
        sb = release_schema_statistics(other, todo, _engine(1e-12, {"schema": 1.0}))
        num = float(((sa["income"]["counts"] - sb["income"]["counts"]).round() ** 2).sum())
        ca = dict(zip(sa["colour"]["values"], sa["colour"]["counts"].round().tolist()))
        cb = dict(zip(sb["colour"]["values"], sb["colour"]["counts"].round().tolist()))
        cat = sum((ca.get(k, 0) - cb.get(k, 0)) ** 2 for k in set(ca) | set(cb))
        assert math.sqrt(num + cat) <= todo.sensitivity + 1e-9
        assert float(sb["income"]["counts"].sum()) == pytest.approx(60 - other["income"].isna().sum())   # no NaN bin
        Xb, yb = enc.encode(other)
        mu_b = mean_embedding(fmap, torch.tensor(Xb), torch.tensor(yb), 2)
        assert float((mu_a - mu_b).norm()) <= 2 * fmap.norm_bound / 60 * (1 + 1e-9)


def test_a_fit_reproduces_missing_rates_dates_and_fresh_ids():
    schema = Schema.from_dict(MIXED_SCHEMA)
    df = mixed_table(3000)
    m = DPMERF(**{**DPMERF.defaults_for("table"), "iterations": 300, "n_features": 300, "noise_seed": 3}).fit(
        df, label="y", schema=schema)
    s = m.sample(3000, seed=0)
    assert list(s.columns) == list(df.columns)
    for col in ("income", "colour"):
        assert abs(s[col].isna().mean() - df[col].isna().mean()) <= 0.03, col
    assert s["visit"].between(pd.Timestamp("2020-01-01"), pd.Timestamp("2022-12-31")).all()
    assert s["pid"].is_unique and s["pid"].min() > 99999 and not set(s["pid"]) & set(df["pid"])
    assert s["age"].dtype == np.int64 and str(s["visit"].dtype) == "datetime64[ns]"
    with pytest.raises(DataValidationError, match="outside its declared range"):    # a DataFrame's IDs are checked
        DPMERF(epsilon=1, iterations=1, n_features=20).fit(df.assign(pid=100000), label="y", schema=schema)


SDV = {"METADATA_SPEC_VERSION": "SINGLE_TABLE_V1", "primary_key": "pid", "columns": {
    "pid": {"sdtype": "id", "regex_format": "[0-9]{5}"},
    "age": {"sdtype": "numerical", "computer_representation": "Int64"},
    "income": {"sdtype": "numerical", "computer_representation": "Float"},
    "colour": {"sdtype": "categorical"},
    "visit": {"sdtype": "datetime", "datetime_format": "%Y-%m-%d"},
    "y": {"sdtype": "categorical"}}}


def test_sdv_metadata_reads_as_a_schema_with_its_types():
    from mmdsynth.data import schema_from_sdv

    schema = Schema.from_dict(SDV)
    assert schema.label is None and schema.source == "sdv-metadata"
    kinds = {c.name: c.type for c in schema.columns}
    assert kinds == {"pid": "id", "age": "numeric", "income": "numeric", "colour": "categorical", "visit": "datetime",
                     "y": "categorical"}
    assert schema.column("age").integer and not schema.column("income").integer
    assert schema.column("visit").datetime == "D" and schema.column("visit").format == "%Y-%m-%d"
    labelled = schema_from_sdv(SDV, label="y", label_categories=["lo", "hi"], nullable=["income", "colour"])
    assert labelled.label == "y" and "y" not in [c.name for c in labelled.columns]
    assert [c.name for c in labelled.columns if c.nullable] == ["income", "colour"]
    multi = {"METADATA_SPEC_VERSION": "V1", "tables": {"a": SDV, "b": SDV}}
    assert [c.name for c in schema_from_sdv(multi, table="b").columns] == list(SDV["columns"])
    with pytest.raises(SchemaError, match="name the one to use"):
        schema_from_sdv(multi)
    with pytest.raises(SchemaError, match=r"\['mail'\].*email.*drop_unlisted"):
        Schema.from_dict({**SDV, "columns": {**SDV["columns"], "mail": {"sdtype": "email", "pii": True}}})
    with pytest.raises(SchemaError, match="label_categories"):
        schema.with_label("y")


def test_cli_fits_a_csv_described_by_sdv_metadata(tmp_path, capsys):
    import json

    from mmdsynth.cli import main

    df = mixed_table(1500)
    df.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "sdv.json").write_text(json.dumps(SDV))
    base = ["fit", "--method", "dp-merf", "--csv", str(tmp_path / "t.csv"), "--schema", str(tmp_path / "sdv.json"),
            "--label", "y", "--iterations", "20", "--n-features", "50", "-q"]
    assert main(base + ["--label-categories", "lo,hi", "--infer-schema", "0.3", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "missing value(s)" in err and '"nullable": true' in err
    assert main(base + ["--label-categories", "lo,hi", "--nullable", "income,colour", "--infer-schema", "0.3",
                        "--out", str(tmp_path / "m")]) == 0
    assert main(["sample", str(tmp_path / "m"), "--n", "200", "--out", str(tmp_path / "s.csv")]) == 0
    s = pd.read_csv(tmp_path / "s.csv")
    assert list(s.columns) == list(df.columns) and s["pid"].astype(str).str.startswith("syn-").all()
    assert pd.to_datetime(s["visit"], format="%Y-%m-%d").notna().all()       # written in the declared format



def test_evaluate_and_report_score_nullable_date_and_id_columns(tmp_path, capsys):
    """A new user's run: fit a CSV with holes, dates and IDs, then `evaluate` and `report` on real rows."""
    import json

    from mmdsynth.cli import main

    mixed_table(1200).to_csv(tmp_path / "train.csv", index=False)
    mixed_table(400, seed=9).to_csv(tmp_path / "test.csv", index=False)
    (tmp_path / "schema.json").write_text(json.dumps(MIXED_SCHEMA))
    assert main(["fit", "--method", "dp-merf", "--csv", str(tmp_path / "train.csv"), "--schema",
                 str(tmp_path / "schema.json"), "--label", "y", "--iterations", "30", "--n-features", "60", "-q",
                 "--out", str(tmp_path / "m")]) == 0
    assert main(["evaluate", str(tmp_path / "m"), "--test", str(tmp_path / "test.csv"), "--n", "600"]) == 0
    result = json.loads((tmp_path / "m" / "evaluation.json").read_text())
    marg = result["fidelity"]["marginals"]
    assert "pid" not in marg and set(marg["income"]["missing_rate"]) == {"real", "synthetic"}
    assert marg["visit"]["kind"] == "numeric" and result["fidelity"]["max_missing_rate_gap"] is not None
    assert main(["report", str(tmp_path / "m"), "--test", str(tmp_path / "test.csv")]) == 0
    page = (tmp_path / "m" / "report.html").read_text()
    assert "visit" in page and "missing rate, real / synthetic" in page
    rate = marg["income"]["missing_rate"]
    assert f"{rate['real']:.3f} / {rate['synthetic']:.3f}" in page
