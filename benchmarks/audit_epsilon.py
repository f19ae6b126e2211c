"""`mmdsynth audit` at several claimed epsilons, honest and with a deliberately broken mechanism.

For each claimed epsilon: the real release (secure noise, as a fit uses it), then the same
release with every noise std divided by ``--break-factor`` (patched into the noise source from
here: the library has no switch for it). Writes one JSON line per audit.

    .venv/bin/python benchmarks/audit_epsilon.py --epsilon 1 2 4 --trials 100000 \
        --out benchmarks/out/audit.jsonl
"""
from __future__ import annotations

import argparse
import json
import platform
import time

from mmdsynth.audit import audit
from mmdsynth.privacy.mechanisms import NoiseSource


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epsilon", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--trials", type=int, default=100000)
    p.add_argument("--mechanism", default="release")
    p.add_argument("--break-factor", type=float, default=2.0)
    p.add_argument("--out", default="benchmarks/out/audit.jsonl")
    args = p.parse_args()
    original = NoiseSource.add_noise
    for eps in args.epsilon:
        for broken in (False, True):
            NoiseSource.add_noise = (lambda self, v, std: original(self, v, std / args.break_factor)) \
                if broken else original
            r = audit(eps, args.delta, mechanism=args.mechanism, trials=args.trials)
            row = {**r.to_dict(), "broken": f"noise std / {args.break_factor:g}" if broken else None,
                   "date": time.strftime("%Y-%m-%d"), "machine": platform.node()}
            print(r.format(), flush=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")
    NoiseSource.add_noise = original


if __name__ == "__main__":
    main()
