"""Issue 45 item 3: a datetime column whose bounds are inferred privately. ``conform`` used to clip the RAW rows
(``pd.to_numeric(...).clip``) before they were read: ISO text failed with row 0's private date in the message, and
datetime64 input was taken in nanoseconds as seconds, so every synthetic date sat at the upper bound. Every value
is now read by itself first, then clipped to the released bounds."""
import numpy as np
import pandas as pd
import pytest

from mmdsynth import DPMERF

SCHEMA = {"columns": [{"name": "d", "type": "datetime", "resolution": "D"},
                      {"name": "x", "type": "numeric", "bounds": [0, 1]}],
          "label": "y", "label_categories": ["a", "b"]}


def _table(n=800, seed=0):
    g = np.random.default_rng(seed)
    d = pd.Timestamp("2020-01-01") + pd.to_timedelta(g.integers(0, 365, n), unit="D")
    return pd.DataFrame({"d": d, "x": g.random(n), "y": np.where(g.random(n) < 0.5, "a", "b")})


@pytest.mark.parametrize("form", ["datetime64", "iso-text", "iso-text-with-offsets"])
def test_inferred_datetime_bounds_read_each_value_before_clipping(form):
    df = _table()
    if form == "iso-text":
        df["d"] = df["d"].dt.strftime("%Y-%m-%d")
    elif form == "iso-text-with-offsets":
        df["d"] = [t.strftime("%Y-%m-%dT12:00:00") + ("+01:00" if i % 2 else "Z") for i, t in enumerate(df["d"])]
    model = DPMERF(epsilon=5, schema_share=0.3, iterations=60, batch_size=200, lr_step=100, n_features=300,
                   noise_seed=0).fit(df, label="y", schema=SCHEMA)
    lo, hi = model.encoder_.schema.column("d").bounds
    real = (pd.Timestamp("2020-01-01") - pd.Timestamp(0)) / pd.Timedelta(seconds=1)
    assert lo <= real <= hi and hi - lo < 40 * 365 * 86400           # released bounds around the real dates
    s = model.sample(400, seed=0)["d"]
    upper = pd.Timestamp(0) + pd.Timedelta(seconds=hi)
    assert (s < upper.floor("D")).mean() > 0.5                        # not every date at the upper bound
    assert s.dt.year.between(1990, 2050).all()
