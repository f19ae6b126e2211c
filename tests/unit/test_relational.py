"""Issue 84, item 1: a database's declared schema, its tables read from a folder, DataFrames or a real database, keys
checked (refusals with counts, never a value), each row's root key through the chain of foreign keys."""
import copy
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mmdsynth.data.relational import DatabaseSchema, read_database, root_ids
from mmdsynth.errors import DataValidationError, SchemaError

from support import ID, MATHACH, PBCSEQ, store_sql, throwaway_postgres

RELATIONAL = Path(os.environ.get("MMDSYNTH_DATA_DIR", "")) / "relational"
needs_data = pytest.mark.skipif(not (RELATIONAL / "pbcseq").is_dir(), reason="the relational datasets are not here")


@needs_data
@pytest.mark.parametrize("name, schema, counts", [("pbcseq", PBCSEQ, {"patients": 312, "visits": 1945}),
                                                  ("mathach", MATHACH, {"schools": 160, "students": 7185})])
def test_the_real_databases_read_with_their_keys_and_roots(name, schema, counts):
    tables = read_database(RELATIONAL / name, schema)
    assert {t: len(df) for t, df in tables.items()} == counts
    db = DatabaseSchema.from_dict(schema)
    child, (fk, root) = db.order()[1], db.parent(db.order()[1])
    roots = root_ids(tables, db)
    assert roots[child].equals(tables[child][fk]) and roots[root].equals(tables[root][db.tables[root].primary_key])
    per_root = roots[child].value_counts()
    assert per_root.min() >= 1 and per_root.sum() == counts[child]
    assert DatabaseSchema.from_dict(db.to_dict()) == db


@needs_data
def test_a_database_and_dataframes_read_as_the_folder_does(tmp_path):
    """The same tables from DataFrames, SQLite and a real PostgreSQL with its foreign key declared."""
    folder = read_database(RELATIONAL / "mathach", MATHACH)
    raw = {t: pd.read_csv(RELATIONAL / "mathach" / f"{t}.csv.gz") for t in MATHACH["tables"]}
    sqlite = f"sqlite:///{tmp_path / 'db.sqlite'}"
    for t, df in raw.items():
        store_sql(sqlite, t, df)
    postgres = throwaway_postgres()
    url = next(postgres)
    try:
        import sqlalchemy as sa

        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE schools (school_id integer PRIMARY KEY, \"Size\" integer, \"Sector\" "
                                 "text, \"PRACAD\" real, \"DISCLIM\" real, \"HIMINTY\" integer, \"MEANSES\" real)"))
            conn.execute(sa.text("CREATE TABLE students (student_id integer PRIMARY KEY, school_id integer REFERENCES "
                                 "schools (school_id), \"Minority\" text, \"Sex\" text, \"SES\" real, \"MathAch\" real)"))
            for t in ("schools", "students"):
                raw[t].to_sql(t, conn, if_exists="append", index=False)
        engine.dispose()
        for got in (read_database(raw, MATHACH), read_database(sqlite, MATHACH), read_database(url, MATHACH)):
            for t in MATHACH["tables"]:
                pd.testing.assert_frame_equal(got[t].reset_index(drop=True), folder[t].reset_index(drop=True),
                                              check_dtype=False, atol=1e-6)
    finally:
        postgres.close()


def _tiny():
    schools = pd.DataFrame({"school_id": [11, 12], "Size": [500, 900], "Sector": ["Public", "Catholic"],
                            "PRACAD": [0.3, 0.5], "DISCLIM": [0.1, -0.2], "HIMINTY": [0, 1], "MEANSES": [0.0, 0.4]})
    students = pd.DataFrame({"student_id": [1, 2, 3], "school_id": [11, 11, 12], "Minority": ["No", "Yes", "No"],
                             "Sex": ["Male", "Female", "Male"], "SES": [0.1, -1.0, 0.5], "MathAch": [10.0, 12.5, 8.0]})
    return {"schools": schools, "students": students}


@pytest.mark.parametrize("change, message", [
    (lambda t: t["students"].__setitem__("school_id", [11, 11, 48213]),
     "table 'students': 1 row\\(s\\) have a 'school_id' that no row of 'schools' holds"),
    (lambda t: t["schools"].__setitem__("school_id", [48213, 48213]),
     "table 'schools': 1 row\\(s\\) repeat a primary key 'school_id'"),
    (lambda t: t["students"].__setitem__("school_id", [11, None, 12]), "column 'school_id' has 1 missing value"),
])
def test_broken_keys_are_refused_with_a_count_never_a_key(change, message):
    tables = _tiny()
    change(tables)
    with pytest.raises(DataValidationError, match=message) as err:
        read_database(tables, MATHACH)
    assert "48213" not in str(err.value)


def _schema_with(edit):
    d = copy.deepcopy(MATHACH)
    edit(d)
    return d


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(privacy_unit="students_x"), "privacy_unit 'students_x' is not one of the tables"),
    (lambda d: d["tables"]["students"].update(foreign_keys={"school_id": "districts"}),
     "names table 'districts', which the schema does not declare"),
    (lambda d: d["tables"]["students"]["columns"].__setitem__(1, {"name": "school_id", "type": "categorical",
                                                                 "categories": ["a", "b"]}),
     "foreign key 'school_id' must be declared among its columns as .*\"type\": \"id\""),
    (lambda d: d["tables"]["schools"].update(foreign_keys={"school_id": "students"}), "the root table 'schools' has "
     "foreign keys"),
    (lambda d: d["tables"]["students"].update(foreign_keys={}), "table 'students' has 0 foreign keys"),
    (lambda d: d["tables"]["students"]["columns"].__setitem__(1, {"name": "school_id", "type": "id"}),
     "students.school_id is declared with text IDs and schools.school_id with integer IDs"),
    (lambda d: d["tables"].update({"bad name": d["tables"].pop("students")}), "table name 'bad name'"),
    (lambda d: d["tables"]["schools"].pop("primary_key"), "has no \"primary_key\""),
])
def test_a_schema_the_keys_cannot_hold_is_refused_with_the_fix(edit, message):
    with pytest.raises(SchemaError, match=message):
        DatabaseSchema.from_dict(_schema_with(edit))


def test_keys_in_a_circle_are_refused():
    d = {"privacy_unit": "a", "tables": {
        "a": {"primary_key": "a_id", "columns": [{"name": "a_id", **ID}]},
        "b": {"primary_key": "b_id", "foreign_keys": {"c_id": "c"},
              "columns": [{"name": "b_id", **ID}, {"name": "c_id", **ID}]},
        "c": {"primary_key": "c_id", "foreign_keys": {"b_id": "b"},
              "columns": [{"name": "c_id", **ID}, {"name": "b_id", **ID}]}}}
    with pytest.raises(SchemaError, match="the foreign keys run in a circle: b -> c -> b"):
        DatabaseSchema.from_dict(d)


def test_a_chain_of_three_tables_gives_every_row_its_root(tmp_path):
    """schools -> classes -> pupils: a pupil's root is its class's school; the folder may mix CSV, compressed CSV and
    Parquet; a table with no file, or with two, is refused."""
    d = {"privacy_unit": "schools", "tables": {
        "schools": {"primary_key": "school_id", "columns": [{"name": "school_id", **ID},
                                                            {"name": "size", "type": "numeric", "bounds": [0, 9]}]},
        "classes": {"primary_key": "class_id", "foreign_keys": {"school_id": "schools"},
                    "columns": [{"name": "class_id", **ID}, {"name": "school_id", **ID}]},
        "pupils": {"primary_key": "pupil_id", "foreign_keys": {"class_id": "classes"},
                   "columns": [{"name": "pupil_id", "type": "id"}, {"name": "class_id", **ID},
                               {"name": "score", "type": "numeric", "bounds": [0, 1]}]}}}
    pd.DataFrame({"school_id": [5, 6], "size": [1, 2]}).to_csv(tmp_path / "schools.csv", index=False)
    pd.DataFrame({"class_id": [50, 51, 60], "school_id": [5, 5, 6]}).to_csv(tmp_path / "classes.csv.gz", index=False)
    pd.DataFrame({"pupil_id": ["p1", "p2", "p3", "p4"], "class_id": [60, 50, 51, 60],
                  "score": [0.1, 0.2, 0.3, 0.4]}).to_parquet(tmp_path / "pupils.parquet", index=False)
    db = DatabaseSchema.from_dict(d)
    assert db.order() == ["schools", "classes", "pupils"]
    tables = read_database(tmp_path, db)
    assert root_ids(tables, db)["pupils"].tolist() == [6, 5, 5, 6]
    (tmp_path / "pupils.csv").write_text("pupil_id,class_id,score\np9,50,0.5\n")
    with pytest.raises(DataValidationError, match="table 'pupils': .* holds 2 files for it"):
        read_database(tmp_path, db)
    for f in ("pupils.csv", "pupils.parquet"):
        (tmp_path / f).unlink()
    with pytest.raises(DataValidationError, match="table 'pupils': .* holds no file for it .*pupils.csv.gz"):
        read_database(tmp_path, db)
    assert np.all(np.isin(root_ids(tables, db)["classes"], [5, 6]))


@needs_data
def test_sdvs_multi_table_metadata_maps_with_the_root_added():
    """SDV's metadata (sdtypes, primary keys, relationships) with "privacy_unit" added: the same keys and tree, its
    IDs read as text; no bounds nor categories (left to private inference)."""
    sdv = {"METADATA_SPEC_VERSION": "MULTI_TABLE_V1", "tables": {
        "schools": {"primary_key": "school_id", "columns": {
            "school_id": {"sdtype": "id"}, "Size": {"sdtype": "numerical"}, "Sector": {"sdtype": "categorical"},
            "PRACAD": {"sdtype": "numerical"}, "DISCLIM": {"sdtype": "numerical"},
            "HIMINTY": {"sdtype": "categorical"}, "MEANSES": {"sdtype": "numerical"}}},
        "students": {"primary_key": "student_id", "columns": {
            "student_id": {"sdtype": "id"}, "school_id": {"sdtype": "id"}, "Minority": {"sdtype": "categorical"},
            "Sex": {"sdtype": "categorical"}, "SES": {"sdtype": "numerical"}, "MathAch": {"sdtype": "numerical"}}}},
        "relationships": [{"parent_table_name": "schools", "parent_primary_key": "school_id",
                           "child_table_name": "students", "child_foreign_key": "school_id"}]}
    with pytest.raises(SchemaError, match="add \"privacy_unit\": ROOT_TABLE"):
        DatabaseSchema.from_dict(sdv)
    db = DatabaseSchema.from_dict({**sdv, "privacy_unit": "schools"})
    assert db.order() == ["schools", "students"] and db.parent("students") == ("school_id", "schools")
    assert db.tables["students"].schema.column("SES").bounds is None
    tables = read_database(RELATIONAL / "mathach", db)
    assert len(tables["students"]) == 7185 and root_ids(tables, db)["students"].nunique() == 160
    bad = copy.deepcopy(sdv)
    bad["relationships"][0]["parent_primary_key"] = "Size"
    with pytest.raises(SchemaError, match="the parent's key is not the primary key of 'schools'"):
        DatabaseSchema.from_sdv(bad, "schools")


LABELLED = copy.deepcopy(MATHACH)
LABELLED["tables"]["schools"].update(label="Sector", label_categories=["Public", "Catholic"],
                                     columns=[c for c in MATHACH["tables"]["schools"]["columns"] if c["name"] != "Sector"])


def test_flatten_makes_every_root_one_person_with_or_without_children():
    from mmdsynth.data.relational import flatten

    tables = _tiny()
    tables["schools"] = pd.concat([tables["schools"], tables["schools"].iloc[:1].assign(school_id=13)])
    db = DatabaseSchema.from_dict(LABELLED)
    joined, flat = flatten(read_database(tables, db), db)
    assert flat.schema.privacy_unit == "school_id" and flat.schema.label == "Sector"
    assert joined.school_id.tolist() == [11, 11, 12, 13] and joined[flat.present].tolist() == ["1", "1", "1", "0"]
    assert joined.loc[3, ["Minority", "SES"]].isna().all() and all(flat.schema.column(c).nullable
                                                                   for c in flat.child_columns)
    assert flat.schema.validate(joined).shape == joined.shape
    with pytest.raises(SchemaError, match="the root table 'schools' declares no label"):
        flatten(read_database(_tiny(), MATHACH), DatabaseSchema.from_dict(MATHACH))
    clash = copy.deepcopy(LABELLED)
    clash["tables"]["students"]["columns"][2]["name"] = "Size"
    with pytest.raises(SchemaError, match=r"column\(s\) \['Size'\] appear in both 'schools' and 'students'"):
        from mmdsynth.data.relational import flat_schema
        flat_schema(DatabaseSchema.from_dict(clash))


def test_fit_tables_samples_new_tables_whose_keys_hold():
    """A fit of the database, as a user calls it: sampled roots and children have new keys, every child names a
    synthetic root, no required value is missing, the columns are the schema's."""
    import mmdsynth

    g = np.random.default_rng(0)
    n = 120
    schools = pd.DataFrame({"school_id": np.arange(1, n + 1), "Size": g.integers(100, 2000, n),
                            "Sector": g.choice(["Public", "Catholic"], n), "PRACAD": g.random(n).round(2),
                            "DISCLIM": g.uniform(-2, 2, n), "HIMINTY": g.integers(0, 2, n), "MEANSES": g.uniform(-1, 1, n)})
    k = g.integers(0, 6, n)
    students = pd.DataFrame({"student_id": np.arange(1, k.sum() + 1), "school_id": np.repeat(schools.school_id, k),
                             "Minority": g.choice(["Yes", "No"], k.sum()), "Sex": g.choice(["Male", "Female"], k.sum()),
                             "SES": g.uniform(-3, 2, k.sum()), "MathAch": g.uniform(0, 25, k.sum())})
    model = mmdsynth.fit_tables({"schools": schools, "students": students}, LABELLED, epsilon=1.0, method="dp-merf",
                                iterations=5, n_features=50, noise_seed=0)
    assert all(e.n_records == n for e in model.release_.ledger.entries)
    out = model.sample(40, seed=0)
    s, c = out["schools"], out["students"]
    assert len(s) == 40 and s.school_id.is_unique and (s.school_id > 99999).all()
    assert c.student_id.is_unique and (c.student_id > 99999).all() and c.school_id.isin(set(s.school_id)).all()
    assert list(s.columns) == ["school_id", "Size", "PRACAD", "DISCLIM", "HIMINTY", "MEANSES", "Sector"]
    assert list(c.columns) == [col["name"] for col in LABELLED["tables"]["students"]["columns"]]
    assert not c[["Minority", "Sex", "SES", "MathAch"]].isna().any().any()
    from mmdsynth.data.relational import check_keys
    check_keys(out, DatabaseSchema.from_dict(LABELLED))         # unique primary keys, every child's parent there


def test_the_command_line_fits_a_database_folder_and_samples_one_csv_a_table(tmp_path, capsys):
    import json

    from support import run_cli

    g = np.random.default_rng(1)
    n = 100
    k = g.integers(0, 5, n)
    folder = tmp_path / "school"
    folder.mkdir()
    pd.DataFrame({"school_id": np.arange(1, n + 1), "Size": g.integers(100, 2000, n),
                  "Sector": g.choice(["Public", "Catholic"], n), "PRACAD": g.random(n).round(2),
                  "DISCLIM": g.uniform(-2, 2, n), "HIMINTY": g.integers(0, 2, n),
                  "MEANSES": g.uniform(-1, 1, n)}).to_csv(folder / "schools.csv", index=False)
    pd.DataFrame({"student_id": np.arange(1, k.sum() + 1), "school_id": np.repeat(np.arange(1, n + 1), k),
                  "Minority": g.choice(["Yes", "No"], k.sum()), "Sex": g.choice(["Male", "Female"], k.sum()),
                  "SES": g.uniform(-3, 2, k.sum()), "MathAch": g.uniform(0, 25, k.sum())}).to_csv(
        folder / "students.csv.gz", index=False)
    (tmp_path / "database.json").write_text(json.dumps(LABELLED))
    code, out, err = run_cli(capsys, "fit", "--tables", folder, "--schema", tmp_path / "database.json", "--epsilon", 1,
                             "--method", "dp-merf", "--iterations", 5, "--n-features", 50, "--out", tmp_path / "run")
    assert code == 0, err
    assert "sample it: mmdsynth sample" in out and (tmp_path / "run" / "database.json").is_file()
    code, out, err = run_cli(capsys, "sample", tmp_path / "run", "--n", 30, "--seed", 0, "--out", tmp_path / "synth")
    assert code == 0, err
    schools, students = (pd.read_csv(tmp_path / "synth" / f"{t}.csv") for t in ("schools", "students"))
    assert len(schools) == 30 and students.school_id.isin(set(schools.school_id)).all()
    assert run_cli(capsys, "sample", tmp_path / "run", "--n", 5, "--out", tmp_path / "synth")[0] != 0  # exists
    code, _, err = run_cli(capsys, "fit", "--tables", folder, "--schema", tmp_path / "database.json", "--epsilon", 1,
                           "--iterations", 5, "--out", tmp_path / "run2")
    assert code != 0 and "--iterations: method options; the table default takes none here" in err
    assert not (tmp_path / "run2").exists()
