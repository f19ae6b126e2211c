"""The table default (``hybrid``) fitted once per split, its post-processing run several ways on that one release.

Each variant sets post-processing options only (``pool``, ``max_pool``, ``steps``, ``stall_stop``, ``cover``: how many
rows are drawn from the graphical model, what the reweighting and the covering rows read), so the variants share
the release, its noise and its graphical model, and differ only in what is done with them: a paired comparison that
fresh releases (whose noise differs run to run) cannot give. The release is fitted with the first variant's options; each variant sets the options it names, the
others at their defaults. Each variant's rows are written as
``synth_hybrid_eps{E}{tag}{name}.csv`` for ``evaluate_peers.py --method hybrid --tag {tag}{name}``; one JSON line per
variant (fit time, how the reweighting stopped) goes to ``--out``. An option that is not post-processing, or a
malformed variant, is refused before any data is read (exit status 2).

    python3 benchmarks/peers/hybrid_paired.py benchmarks/out/splits/epileptic_s0 --epsilon 1 \\
        --variants on:stall_stop=true off:stall_stop=false --tag _ --out benchmarks/out/hybrid_paired.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mmdsynth.data import load_preset
from mmdsynth.methods import Hybrid

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _rows import emit  # noqa: E402

#: the options the post-processing reads (the pool drawn from the model, the reweighting, the covering rows);
#: anything else changes the release
POST_PROCESSING = ("pool", "max_pool", "steps", "stall_stop", "cover")
#: their defaults: a variant sets what it names, the rest as a user's fit would
DEFAULTS = {k: v for k, v in Hybrid().get_params().items() if k in POST_PROCESSING}


def parse_variants(parser, items) -> dict:
    """``NAME:KEY=JSON[,KEY=JSON]`` items as {name: {key: value}}."""
    out = {}
    for item in items:
        name, sep, rest = item.partition(":")
        if not sep or not name.isidentifier():
            parser.error(f"--variants takes NAME:KEY=JSON[,KEY=JSON] (NAME a word); got {item!r}")
        pairs = {}
        for pair in filter(None, rest.split(",")):
            key, eq, value = pair.partition("=")
            if not eq:
                parser.error(f"--variants {name}: {pair!r} is not KEY=JSON")
            if key not in POST_PROCESSING:
                parser.error(f"--variants {name}: {key!r} is not a post-processing option of hybrid (one of "
                             f"{', '.join(POST_PROCESSING)}); the others change the release: fit it again instead")
            try:
                pairs[key] = json.loads(value)
            except json.JSONDecodeError:
                parser.error(f"--variants {name}: the value of {key} must be JSON; got {value!r}")
        out[name] = pairs
    if len(out) != len(items):
        parser.error("--variants: each NAME once")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", help="split folders NAME_sSEED written by export_splits.py")
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--variants", nargs="+", required=True, metavar="NAME:KEY=JSON[,KEY=JSON]")
    p.add_argument("--tag", default="_", help="before each variant's name in the CSV name")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    variants = parse_variants(p, args.variants)
    for folder in map(Path, args.folders):
        name, _, seed = folder.name.rpartition("_s")
        data = load_preset(name, seed=int(seed))
        first = next(iter(variants.values()))
        model = Hybrid(epsilon=args.epsilon, delta=args.delta, seed=int(seed), **first)
        t = time.perf_counter()
        model.fit(data.train, label=data.schema.label, schema=data.schema, dataset=data.name,
                  privacy_unit=data.privacy_unit)
        fit_s = time.perf_counter() - t
        for k, (vname, params) in enumerate(variants.items()):
            post_s = None
            if k:                                      # the same release and model, post-processed again
                for key, value in {**DEFAULTS, **params}.items():
                    setattr(model, key, value)
                model.settings_ = model.settings_for("table")
                model.pool_ = None
                t = time.perf_counter()
                model._reweight()
                post_s = round(time.perf_counter() - t, 1)
            csv = folder / f"synth_hybrid_eps{args.epsilon:g}{args.tag}{vname}.csv"
            model.sample(len(data.train)).to_csv(csv, index=False)
            row = {"folder": folder.name, "epsilon": args.epsilon, "variant": vname, "params": params,
                   "fit_s": round(fit_s, 1), "post_s": post_s, "synth_csv": csv.name, "reweighting": model.reweighting_}
            emit(row, args.out)


if __name__ == "__main__":
    main()
