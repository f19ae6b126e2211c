"""`mmdsynth budget`: calibrate sigma for a plan (or epsilon from sigma). A calculator: it reads no data."""
from __future__ import annotations

import argparse
import json

from ..errors import InvalidParameterError
from ._common import _floats


def cmd_budget(args) -> int:
    from ..privacy import PrivacyPlan, calibrate_sigma, classical_sigma, epsilon_for_sigma

    if (args.sample_rate is None) != (args.steps is None):
        raise InvalidParameterError("--sample-rate and --steps go together (DP-SGD); give both or neither.")
    if args.sample_rate is not None:
        if args.releases is not None or args.multipliers is not None:
            raise InvalidParameterError("give either --releases/--multipliers or --sample-rate/--steps, not both.")
        plan = PrivacyPlan((), sample_rate=args.sample_rate, steps=args.steps, neighbouring=args.neighbouring)
    else:
        mults = args.multipliers or [1.0] * (args.releases or 1)
        if args.releases is not None and len(mults) != args.releases:
            raise InvalidParameterError(
                f"--releases {args.releases} but --multipliers lists {len(mults)} value(s); they must agree."
            )
        plan = PrivacyPlan(tuple(mults))
    if args.sigma is not None:
        eps = epsilon_for_sigma(args.sigma, args.delta, plan, args.accountant)
        out = {"sigma": args.sigma, "delta": args.delta, "epsilon": eps}
        text = f"epsilon = {eps:.4f} for sigma = {args.sigma:g} at delta = {args.delta:g}"
    else:
        if args.epsilon is None:
            raise InvalidParameterError("--epsilon is required (or give --sigma to get epsilon).")
        sigma = calibrate_sigma(args.epsilon, args.delta, plan, args.accountant)
        out = {"epsilon": args.epsilon, "delta": args.delta, "sigma": sigma,
               "release_sigmas": [m * sigma for m in plan.multipliers]}
        text = f"sigma = {sigma:.4f}"
        if len(plan.multipliers) > 1:
            text += "  (per release: " + ", ".join(f"{s:.4f}" for s in out["release_sigmas"]) + ")"
        if not plan.subsampled and len(plan.multipliers) == 1 and args.epsilon < 1:
            text += f"  [classical sqrt(2 ln(1.25/delta))/epsilon: {classical_sigma(args.epsilon, args.delta):.4f}]"
    out.update({"accountant": args.accountant, "plan": plan.describe()})
    if args.json:
        print(json.dumps(out))
    else:
        print(f"plan: {plan.describe()}; accountant: {args.accountant}")
        print(text)
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("budget", help="calibrate the noise multiplier sigma (or epsilon from --sigma)")
    s.add_argument("--epsilon", type=float, help="the privacy budget of the whole plan (or give --sigma)")
    s.add_argument("--delta", type=float, required=True, help="the plan's delta, always given (e.g. 1e-5)")
    s.add_argument("--releases", type=int, help="number of one-shot Gaussian releases (default 1)")
    s.add_argument("--multipliers", type=_floats, help="noise multiple of each release, e.g. 1,1,10")
    s.add_argument("--sample-rate", type=float, help="DP-SGD Poisson sampling rate q = batch / n")
    s.add_argument("--steps", type=int, help="DP-SGD number of steps T")
    s.add_argument("--neighbouring", default="replace_one", choices=["replace_one", "add_remove"],
                   help="neighbouring relation for DP-SGD (default replace_one, like every release: N public; "
                        "add_remove reproduces the DP-SGD papers' accounting)")
    s.add_argument("--accountant", default="pld", choices=["pld", "rdp", "exact"],
                   help="pld (tight, default), rdp (looser), exact (closed form; no subsampling)")
    s.add_argument("--sigma", type=float, help="compute epsilon for this sigma instead")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_budget)
    return s
