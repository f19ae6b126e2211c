"""Sharded, streamed and distributed releases (mmdsynth.engines, mmdsynth.data.shards).

The Ray tests start a local cluster once per module (``ray.init(num_cpus=2)``, about 5 s) and are
skipped with a reason where Ray is not installed; CI installs it (``mmdsynth[ray]``).
"""
import json
import os
import time

import numpy as np
import pytest
import torch

from mmdsynth import DPMERF, DPNTK, Schema
from mmdsynth.cli import main
from mmdsynth.data import ShardedArrays, ShardedTable
from mmdsynth.embedding import release_mean_embedding
from mmdsynth.engines import add_partials, get_engine
from mmdsynth.errors import DataValidationError, InvalidParameterError, SchemaError, UnknownNameError
from mmdsynth.features import RandomFourierFeatures

from support import SCHEMA, toy_table, visit_shards, visits

TINY = dict(iterations=2, batch_size=50, noise_seed=0, n_features=100, epsilon=1.0, delta=1e-5)


def write_shards(df, folder, sizes, fmt="csv"):
    folder.mkdir(parents=True, exist_ok=True)
    start = 0
    for i, size in enumerate(sizes):
        part = df.iloc[start:start + size]
        start += size
        path = folder / f"part-{i:03d}.{fmt}"
        part.to_csv(path, index=False) if fmt == "csv" else part.to_parquet(path, index=False)
    assert start == len(df)
    return folder


def releases_close(a, b, tol=1e-10):
    assert set(a.tensors) == set(b.tensors)
    for k in a.tensors:
        assert torch.allclose(a.tensors[k].double(), b.tensors[k].double(), atol=tol, rtol=0), k


# -- the reduce ----------------------------------------------------------------------------------
def test_partials_add_tensors_and_value_counts_key_by_key():
    a = {"sums": torch.ones(2, 3), "colour": {"red": 2.0, "blue": 1.0}, "age": np.array([1.0, 2.0])}
    b = {"sums": torch.ones(2, 3), "colour": {"red": 1.0, "green": 4.0}, "age": np.array([0.0, 1.0])}
    out = add_partials(a, b)
    assert torch.equal(out["sums"], 2 * torch.ones(2, 3)) and out["colour"] == {"red": 3.0, "blue": 1.0, "green": 4.0}
    assert np.array_equal(out["age"], [1.0, 3.0]) and a["colour"] == {"red": 2.0, "blue": 1.0}   # inputs untouched


class _MovableSums:
    """A statistic that records where the engine moves it and which device each batch was summed on."""

    def __init__(self):
        self.moves, self.computed_on = [], []
        self.device = torch.device("cpu")

    def to(self, device):
        self.moves.append(str(device))
        self.device = torch.device(device)
        return self

    def __call__(self, batch):
        self.computed_on.append(str(self.device))
        return {"sums": torch.as_tensor(np.asarray(batch[0]), dtype=torch.float64).sum(0)}


@pytest.mark.own_statistic
@pytest.mark.parametrize("gpu", [False, True])
def test_stream_engine_sums_on_the_gpu_when_one_is_visible_and_moves_the_statistic_back(monkeypatch, gpu):
    import mmdsynth.runtime as runtime
    from mmdsynth.engines import as_source

    monkeypatch.setattr(runtime, "default_device", lambda device=None: torch.device("cuda" if gpu else "cpu"))
    stat, X = _MovableSums(), np.arange(12.0).reshape(4, 3)
    total = as_source(X, None).total(stat)
    assert torch.equal(total["sums"], torch.tensor([18.0, 22.0, 26.0], dtype=torch.float64))
    # on a GPU machine the sums are computed there and the statistic (its feature map) ends back on the CPU;
    # without one nothing moves
    assert stat.moves == (["cuda", "cpu"] if gpu else [])
    assert stat.computed_on == (["cuda"] if gpu else ["cpu"])


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_streamed_table_release_equals_in_memory_with_the_same_noise(tmp_path, fmt):
    df = toy_table(300)
    folder = write_shards(df, tmp_path / "shards", [100, 37, 163], fmt)
    mem = DPMERF(n_classes=2, **TINY).fit(df, label="y", schema=SCHEMA)
    src = ShardedTable(folder, Schema.from_dict(SCHEMA), n_records=300, batch_rows=40)   # batches inside shards
    streamed = DPMERF(n_classes=2, **TINY).fit(src, label="y")
    releases_close(mem.release_, streamed.release_)
    assert [e.computation for e in streamed.release_.ledger.entries][-1] == {"engine": "stream", "shards": 3, "m": 300}
    assert mem.release_.ledger.entries[-1].computation == {"engine": "memory", "shards": 1, "m": 300}
    assert len(streamed.sample(20)) == 20


def test_release_alone_makes_the_release_without_training(tmp_path):
    folder = write_shards(toy_table(100), tmp_path / "s", [100])
    model = DPMERF(**TINY)
    rel = model.release(ShardedTable(folder, SCHEMA, n_records=100))
    assert rel.tensors["embedding"].shape[1] == 2 and not hasattr(model, "generator_")
    assert rel.ledger.entries[-1].computation == {"engine": "stream", "shards": 1, "m": 100}


def test_streamed_release_with_private_schema_inference_equals_in_memory(tmp_path):
    """All four releases (schema statistics, numeric sketch, proportions, embedding) from shards."""
    open_schema = json.loads(json.dumps(SCHEMA))
    del open_schema["columns"][1]["bounds"], open_schema["columns"][3]["categories"]
    df = toy_table(400)
    folder = write_shards(df, tmp_path / "s", [150, 250])
    kw = dict(n_classes=2, schema_share=0.1, **TINY)
    mem = DPMERF(**kw).fit(df, label="y", schema=open_schema)
    streamed = DPMERF(**kw).fit(ShardedTable(folder, Schema.from_dict(open_schema), n_records=400), label="y")
    releases_close(mem.release_, streamed.release_)
    assert mem.release_.dataset["table"] == streamed.release_.dataset["table"]      # same inferred schema
    assert len(streamed.release_.ledger.entries) == 4 and len({e.budget_id for e in streamed.release_.ledger.entries}) == 1


def test_sharded_arrays_release_equals_in_memory(tmp_path, digits):
    x, y = digits.x_train[:600].numpy(), digits.y_train[:600].numpy()
    for i, (a, b) in enumerate([(0, 250), (250, 600)]):
        np.savez(tmp_path / f"d{i}.npz", x=x[a:b], y=y[a:b])
    kw = dict(n_classes=10, iterations=2, batch_size=50, noise_seed=1, ntk_width=50, epsilon=1.0)
    mem = DPNTK(**kw).fit(x, y)
    src = ShardedArrays(str(tmp_path / "*.npz"), n_records=600, batch_rows=100)
    assert src.record_shape == (1, 8, 8) and src.labelled
    sharded = DPNTK(**kw).fit(src)
    releases_close(mem.release_, sharded.release_, tol=1e-9)


def test_unlabelled_npy_shards_make_an_unconditional_release(tmp_path, digits):
    x = digits.x_train[:200].numpy()
    np.save(tmp_path / "a.npy", x[:120])
    np.save(tmp_path / "b.npy", x[120:])
    src = ShardedArrays(tmp_path, n_records=200)
    with pytest.raises(InvalidParameterError, match="hold no labels: use conditional=False"):
        DPNTK(1.0, n_classes=10, iterations=1, ntk_width=20).fit(src)
    model = DPNTK(1.0, conditional=False, iterations=1, ntk_width=20, noise_seed=0).fit(src)
    assert model.release_.tensors["embedding"].ndim == 1


# -- m is declared and checked; bad shards are named; nothing is released ---------------------------
def test_declared_count_that_disagrees_with_the_rows_is_refused_before_any_release(tmp_path):
    folder = write_shards(toy_table(120), tmp_path / "s", [60, 60])
    out = tmp_path / "run"
    with pytest.raises(DataValidationError, match=r"holds 120 records but n_records=100 was declared.*nothing was "
                                                  r"released"):
        DPMERF(n_classes=2, **TINY).fit(ShardedTable(folder, SCHEMA, n_records=100), out=out)
    assert not (out / "release").exists()
    with pytest.raises(InvalidParameterError, match="n_records must be the declared total"):
        ShardedTable(folder, SCHEMA, n_records=None)


def test_schema_violating_and_corrupt_shards_are_named_and_nothing_is_written(tmp_path):
    df = toy_table(120)
    folder = write_shards(df, tmp_path / "s", [60, 60], "parquet")
    bad = df.iloc[60:].copy()
    bad.loc[bad.index[5], "age"] = 200                       # outside the declared bounds [17, 90]
    bad.to_parquet(folder / "part-001.parquet", index=False)
    out = tmp_path / "run"
    with pytest.raises(DataValidationError, match=r"shard .*part-001.parquet: .*age"):
        DPMERF(n_classes=2, **TINY).fit(ShardedTable(folder, SCHEMA, n_records=120), out=out)
    (folder / "part-001.parquet").write_bytes(b"PAR1 not really parquet")
    with pytest.raises(DataValidationError, match=r"shard .*part-001.parquet cannot be read"):
        DPMERF(n_classes=2, **TINY).fit(ShardedTable(folder, SCHEMA, n_records=120), out=out)
    df.iloc[60:].assign(extra=1).to_parquet(folder / "part-001.parquet", index=False)
    with pytest.raises(SchemaError, match=r"part-001.parquet.*\['extra'\] that the schema does not list"):
        DPMERF(n_classes=2, **TINY).fit(ShardedTable(folder, SCHEMA, n_records=120), out=out)
    assert not (out / "release").exists()
    with pytest.raises(DataValidationError, match=r"no shard files found at .*nowhere"):
        ShardedTable(tmp_path / "nowhere" / "*.csv", SCHEMA, n_records=1)


def test_table_shards_are_read_in_bounded_batches(tmp_path):
    folder = write_shards(toy_table(1000), tmp_path / "s", [1000])
    src = ShardedTable(folder, SCHEMA, n_records=1000, batch_rows=128)
    sizes = [n for _, n in src.batches(0)]
    assert max(sizes) == 128 and sum(sizes) == 1000


def test_engine_names_and_options_are_checked():
    with pytest.raises(UnknownNameError, match="unknown engine 'spark'"):
        get_engine("spark")
    with pytest.raises(InvalidParameterError, match="engine='ray' only"):
        get_engine("stream", workers=2)


# -- sensitivity of the sharded release on worst-case neighbours ---------------------------------------
@pytest.mark.parametrize("engine", ["stream", "ray"])
def test_sharded_embedding_moves_by_at_most_2_over_m_on_worst_case_neighbours(tmp_path, engine, request):
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    g = np.random.default_rng(0)
    x, y = g.uniform(0, 1, (90, 5)).astype(np.float32), g.integers(0, 3, 90)
    fmap = RandomFourierFeatures(5, 64, length_scale=0.5, seed=0)
    results = []
    for k, adversary in enumerate([None, 1e30, -1e30]):
        xs, ys = x.copy(), y.copy()
        if adversary is not None:
            xs[70], ys[70] = adversary, 2 - ys[70] % 3           # one record replaced, in the last shard
        folder = tmp_path / f"n{k}"
        folder.mkdir()
        for i, (a, b) in enumerate([(0, 30), (30, 90)]):
            np.savez(folder / f"p{i}.npz", x=xs[a:b], y=ys[a:b])
        src = ShardedArrays(folder, n_records=90, engine=engine)
        rel = release_mean_embedding(fmap, src, epsilon=1.0, delta=1e-5, n_classes=3, seed=7)
        results.append(rel.tensors["embedding"])
    for other in results[1:]:
        assert torch.isfinite(other).all()
        assert float((results[0] - other).norm()) <= 2 / 90 * (1 + 1e-6)
    assert float((results[1] - results[0]).norm()) > 0.2 / 90        # the neighbour is really different


# -- Ray ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray is an extra (pip install 'mmdsynth[ray]'); CI installs it")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_release_equals_streamed_and_records_the_engine(tmp_path, ray_cluster):
    df = toy_table(500)
    folder = write_shards(df, tmp_path / "s", [100, 100, 100, 100, 100], "parquet")
    streamed = DPMERF(n_classes=2, **TINY).fit(ShardedTable(folder, SCHEMA, n_records=500), label="y")
    engine = get_engine("ray")
    on_ray = DPMERF(n_classes=2, **TINY).fit(ShardedTable(folder, SCHEMA, n_records=500, engine=engine), label="y")
    releases_close(streamed.release_, on_ray.release_)
    assert on_ray.release_.ledger.entries[-1].computation == {"engine": "ray", "shards": 5, "m": 500}
    assert engine.last_run["shards"] == 5 and engine.last_run["peak_worker_rss_mib"] > 0


def test_persons_across_shards_on_ray(tmp_path, ray_cluster):
    """A person's rows spread over shards, read by Ray's workers: the release is the in-memory one (same noise)."""
    df, _ = visits(200)
    shards = visit_shards(tmp_path, df)
    kw = dict(epsilon=1.0, noise_seed=0, iterations=3, n_features=100)
    mem = DPMERF(**kw).fit(df, label="y", schema=Schema.from_dict(SCHEMA).with_privacy_unit("patient")).release_
    got = DPMERF(**kw).fit(shards(200, engine=get_engine("ray", workers=2)), label="y").release_
    assert got.ledger.entries[0].computation["engine"] == "ray"
    for k in mem.tensors:
        np.testing.assert_allclose(got.tensors[k].double().numpy(), mem.tensors[k].double().numpy(), atol=1e-9)


def test_ray_names_a_bad_shard_and_releases_nothing(tmp_path, ray_cluster):
    df = toy_table(200)
    folder = write_shards(df, tmp_path / "s", [100, 100])
    (folder / "part-001.csv").write_text((folder / "part-001.csv").read_text().replace("red", "purple"))
    out = tmp_path / "run"
    with pytest.raises(DataValidationError, match=r"part-001.csv: categorical column 'colour' has \d+ "
                       r"value\(s\) \(1 distinct\) not among .*nothing was released") as err:
        DPMERF(n_classes=2, **TINY).fit(ShardedTable(folder, SCHEMA, n_records=200, engine="ray"), out=out)
    assert "purple" not in str(err.value)                 # a count, never the private value (issue 45)
    assert not (out / "release").exists()


def test_cli_fits_shards_on_ray(tmp_path, ray_cluster, capsys):
    folder = write_shards(toy_table(200), tmp_path / "s", [50, 50, 100], "parquet")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    assert main(["fit", "--method", "dp-merf", "--shards", str(folder), "--schema", str(schema), "--label", "y",
                 "--n-records", "200", "--engine", "ray", "--iterations", "2", "--n-features", "100", "--quiet",
                 "--out", str(tmp_path / "run")]) == 0
    rel = json.loads((tmp_path / "run" / "release" / "release.json").read_text())
    assert all(e["computation"] == {"engine": "ray", "shards": 3, "m": 200} for e in rel["ledger"])


class SlowOnce:
    """A statistic that, on its first run for shard 1's rows, records its worker's pid and waits to be
    killed; once a marker file exists (the retry) it counts like any other."""

    def __init__(self, folder):
        self.folder = folder

    def __call__(self, df):
        if len(df) == 7 and not (self.folder / "retried").exists():
            (self.folder / "retried").write_text("")
            (self.folder / "pid").write_text(str(os.getpid()))
            time.sleep(60)
        return {"rows": float(len(df)), "age": float(df["age"].astype(float).sum())}


@pytest.mark.own_statistic
def test_ray_retries_a_shard_whose_worker_was_killed_and_counts_it_once(tmp_path, ray_cluster):
    import sys
    import threading

    ray_cluster.cloudpickle.register_pickle_by_value(sys.modules[SlowOnce.__module__])   # workers lack tests/
    df = toy_table(27)
    folder = write_shards(df, tmp_path / "s", [10, 7, 10])
    src = ShardedTable(folder, SCHEMA, n_records=27, engine="ray")
    box = {}
    worker = threading.Thread(target=lambda: box.update(total=src.total(SlowOnce(tmp_path))))
    worker.start()
    deadline = time.time() + 60
    while not (tmp_path / "pid").exists() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)
    os.kill(int((tmp_path / "pid").read_text()), 9)         # the worker process dies mid-task
    worker.join(120)
    assert box["total"]["rows"] == 27.0 and box["total"]["age"] == float(df["age"].sum())


def test_cli_fits_unlabelled_array_shards_unconditionally(tmp_path, digits):
    x = digits.x_train[:100].numpy()
    np.save(tmp_path / "a.npy", x[:60])
    np.save(tmp_path / "b.npy", x[60:])
    assert main(["fit", "--method", "dp-merf", "--shards", str(tmp_path / "*.npy"), "--n-records", "100",
                 "--epsilon", "1", "--iterations", "2", "--batch-size", "20", "--quiet", "--out", str(tmp_path / "r")]) == 0
    rel = json.loads((tmp_path / "r" / "release" / "release.json").read_text())
    assert rel["dataset"]["conditional"] is False and rel["ledger"][-1]["computation"]["shards"] == 2


# -- CLI -----------------------------------------------------------------------------------------------
def test_cli_fits_table_shards_streamed_and_refuses_missing_count(tmp_path, capsys):
    folder = write_shards(toy_table(200), tmp_path / "s", [80, 120])
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    base = ["fit", "--method", "dp-merf", "--shards", str(folder / "*.csv"), "--schema", str(schema), "--label", "y",
            "--iterations", "2", "--n-features", "100", "--quiet"]
    assert main(base + ["--out", str(tmp_path / "a")]) == 2
    assert "--shards needs --n-records N" in capsys.readouterr().err
    assert main(base + ["--n-records", "200", "--out", str(tmp_path / "b")]) == 0
    rel = json.loads((tmp_path / "b" / "release" / "release.json").read_text())
    assert rel["ledger"][-1]["computation"] == {"engine": "stream", "shards": 2, "m": 200}
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "b"), "--ledger"]) == 0
    assert "sums computed: streamed in one process, 2 shard(s), rows checked against the declared m=200" in \
        capsys.readouterr().out
    assert main(["fit", "--method", "dp-merf", "--csv", str(folder / "part-000.csv"), "--schema", str(schema),
                 "--label", "y", "--engine", "ray", "--out", str(tmp_path / "c")]) == 2
    assert "apply to --shards" in capsys.readouterr().err
