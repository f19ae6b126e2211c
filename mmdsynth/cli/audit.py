"""`mmdsynth audit`: the empirical privacy audit."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .._io import atomic_write
from ..errors import InvalidParameterError


def cmd_audit(args) -> int:
    from ..audit import audit

    fmap = None
    if args.feature_map is not None:
        try:
            fmap = json.loads(args.feature_map)
        except ValueError as exc:
            raise InvalidParameterError(f"--feature-map must be a JSON spec like "
                                        f"'{{\"name\": \"rff\", \"input_dim\": 2, \"n_features\": 2}}'; "
                                        f"got {args.feature_map!r} ({exc}).") from exc
    extra = {"duplicate_start": True} if args.duplicate_start else {}
    if args.duplicate_start and args.mechanism != "dpsgd-fit":
        raise InvalidParameterError("--duplicate-start applies to --mechanism dpsgd-fit only.")
    if args.neighbouring != "replace_one":
        if args.mechanism != "sampled-release":
            raise InvalidParameterError("--neighbouring add_remove applies to --mechanism sampled-release only.")
        extra["neighbouring"] = args.neighbouring
    result = audit(args.epsilon, args.delta, mechanism=args.mechanism, feature_map=fmap, n_records=args.records,
                   trials=args.trials, confidence=args.confidence, **extra)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(out) as tmp:
            tmp.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    print(json.dumps(result.to_dict()) if args.json else result.format())
    return 0 if result.passed else 1


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("audit", help="empirical privacy audit: attack a mechanism on neighbouring datasets and "
                                     "print the epsilon lower bound it proves beside the claim",
                       description="Run a mechanism many times on a small public dataset D and on its neighbour D' "
                                   "(one canary record changed), each run with fresh noise, attack the outputs with "
                                   "a likelihood-ratio test and turn its true- and false-positive rates into a "
                                   "lower bound on epsilon (Clopper-Pearson). Exit status 1 if the bound exceeds "
                                   "the claimed epsilon. 20,000 trials of the release take about 20 s.")
    s.add_argument("--epsilon", type=float, default=1.0, help="the claimed epsilon the mechanism is calibrated to "
                                                               "(default 1)")
    s.add_argument("--delta", type=float, default=1e-5, help="the claimed delta (default 1e-5)")
    s.add_argument("--mechanism", default="release", choices=["release", "dpsgd-step", "dpsgd-fit", "sampled-release",
                                                        "selection", "tree-selection", "person-release",
                                                        "person-marginals", "person-selection"],
                   help="release: the mean-embedding release (default); dpsgd-step: one full-batch DP-SGD step "
                        "of DP-KIP; dpsgd-fit: a whole DP-KIP fit (its own secret sampler and clipping, "
                        "worst-case canary at a public start point, the attacker sees every iterate); sampled-release: "
                        "dp-randconv's subsampled release (--sample-rate), whole, with its secret sampler; selection: "
                        "the private selection of MST and AIM (a Select stage through the zCDP filter: one exponential-"
                        "mechanism draw between two cliques spending the whole rho, a canary moving their score gap "
                        "by twice the sensitivity; the attacker sees which was selected); tree-selection: the hybrid's "
                        "tree of pairs scored by dependence (a SelectTree stage of two rounds, the canary swapping the "
                        "two pairs' scores; the attacker sees the first pick); person-release: the release of a table "
                        "whose privacy unit is a person (--privacy-unit), the canary one person with 500 rows; "
                        "person-marginals: the measured 1-way marginals of such a table (MST's, AIM's and the "
                        "hybrid's Measure stage), the same canary person; person-selection: the selection's Select "
                        "stage on such a table, the same canary person)")
    s.add_argument("--duplicate-start", action="store_true",
                   help="dpsgd-fit: the public start is one point repeated (the case that broke clipping)")
    s.add_argument("--neighbouring", default="replace_one", choices=["replace_one", "add_remove"],
                   help="sampled-release: the relation audited (default replace_one; add_remove: the release's "
                        "add/remove accounting, on zero-out neighbours with m public: the canary replaces record 0 "
                        "by a null record whose features are zero)")
    s.add_argument("--feature-map", help="JSON spec of a one-block feature map for --mechanism release "
                                         "(default: 2 random Fourier features of 2-d records)")
    s.add_argument("--records", type=int, default=None, help="records in the audited dataset (default 10; "
                   "dpsgd-fit: 40, one expected per step)")
    s.add_argument("--trials", type=int, default=None, help="runs on each of D and D' (default 20000; selection: "
                                                            "2000, about 20 s; tree-selection: 4000)")
    s.add_argument("--confidence", type=float, default=0.95, help="confidence of the lower bound (default 0.95)")
    s.add_argument("--out", help="also write the result as JSON to this file")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_audit)
    return s
