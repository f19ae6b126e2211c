"""`mmdsynth inspect`: a release's ledger (refusing a model folder whose release was replaced)."""
from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

from ._common import release_folder
from ._types import existing_path

def cmd_inspect(args) -> int:
    from ..release import Release

    draft = _draft_ledger(Path(args.path))
    if draft is not None:                                 # a schema drafted by `mmdsynth schema`: what it spent
        return _inspect_draft(draft, args)
    path = release_folder(args.path)
    model_json = path.parent / "model.json"
    if path.name == "release" and model_json.exists():     # a model folder: its release must be the pinned one
        from .._io import read_sealed_json
        from ..release import check_release_pin

        check_release_pin(path, read_sealed_json(model_json, "model").get("release"), f"model in {path.parent}")
    release = Release.load(path, tensors=False)           # headers only: no torch to import
    if args.json:
        print(json.dumps({"dataset": release.dataset, "feature_spec": release.feature_spec,
                          "ledger": release.ledger.to_list(),
                          "tensors": {k: list(v.shape) for k, v in release.tensors.items()}}, indent=2))
        return 0
    if args.ledger:
        print(f"release: {path}")
        print(f"dataset: {json.dumps(release.dataset)}")
        print(f"feature map: {json.dumps(release.feature_spec)}")
        print("tensors: " + ", ".join(f"{k} {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}"
                                      for k, v in release.tensors.items()))
        eps, delta = release.ledger.total()
        print(f"privacy spent: epsilon={eps:g}, delta={delta:g}")
        print(release.ledger.format())
        return 0
    print(release_summary(release, path, model_json if model_json.exists() else None))
    return 0


def _draft_ledger(path: Path) -> Path | None:
    """The ledger of a drafted schema ``path`` names (the draft's .json or its .ledger.json), or None."""
    from .._io import LEDGER_SUFFIX

    if not path.is_file() or not path.name.endswith(".json"):
        return None
    if path.name.endswith(LEDGER_SUFFIX):
        return path
    beside = path.with_name(path.stem + LEDGER_SUFFIX)
    return beside if beside.is_file() else None


def _inspect_draft(ledger_path: Path, args) -> int:
    from .._io import SCHEMA_LEDGER_FORMAT, read_sealed_json
    from ..errors import ArtifactError
    from ..privacy.ledger import Ledger

    meta = read_sealed_json(ledger_path, "schema ledger")
    if meta.get("format") != SCHEMA_LEDGER_FORMAT:
        raise ArtifactError(f"{ledger_path} is not the ledger of a drafted schema (format={meta.get('format')!r}).")
    ledger = Ledger.from_list(meta["ledger"])
    if args.json:
        print(json.dumps({"schema": meta.get("schema"), "ledger": ledger.to_list()}, indent=2))
        return 0
    eps, delta = ledger.total()
    print(f"schema draft {ledger_path.parent / str(meta.get('schema'))} (`mmdsynth schema`): "
          f"{len(ledger.entries)} release(s) of the private rows")
    print(f"privacy spent: epsilon={eps:g}, delta={delta:g}; a fit on the same rows spends on top of this "
          f"(one --budget file keeps the total)")
    print(ledger.format() if args.ledger else "\n".join(f"  {e.description}" for e in ledger.entries))
    return 0


#: the summary's width: every line fits it (a path longer than a line gets one of its own), and lines are broken
#: between words, never inside one (issue 46)
WIDTH = 100


def _short(text: str, width: int) -> str:
    """``text`` in ``width`` characters, cut between words (with " ...") when it is longer."""
    return text if len(text) <= width else textwrap.shorten(text, width, placeholder=" ...")


def _wrap(text: str, indent: int = 2) -> str:
    """``text`` broken between words into lines of at most :data:`WIDTH`, the continuations indented; a word
    longer than a line (a path) is kept whole, and paths and names are not broken at their hyphens."""
    return textwrap.fill(text, WIDTH, subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False)


def release_summary(release, path: Path, model_json: Path | None = None) -> str:
    """What a person wants from `inspect` in ten seconds: what was released from which data, what it spent, each
    release's noise in one row, and (for a model folder) how far training went."""
    from ..privacy.ledger import replace_one_words, zero_out_plan

    facts, entries = release.dataset, release.ledger.entries
    eps, delta = release.ledger.total()
    n, classes = facts.get("n_records"), facts.get("n_classes")
    method = facts.get("method")
    persons = bool(entries) and entries[0].privacy_unit.startswith("one person")
    lines = [f"{method + ' ' if method else ''}release of {facts.get('name') or 'user data'} ({n:,} "
             f"{'persons' if persons else 'records'}"
             + (f", {classes} classes" if classes else "") + f") in {path}"]
    if entries:
        e = entries[0]
        zero_out = [x for x in entries if zero_out_plan(x.plan)]
        if zero_out:       # add/remove accounting with the sums divided by the public m: zero-out neighbours
            ro = zero_out[-1]
            lines.append(f"privacy spent: epsilon={eps:g}, delta={delta:g} (add/remove accounting, which holds for "
                         f"zero-out neighbours with m public, NOT for adding or removing a record; one record = "
                         f"{e.privacy_unit})")
            lines.append(f"replace-one neighbours, the same noise: {replace_one_words(ro)}")
        else:
            lines.append(f"privacy spent: epsilon={eps:g}, delta={delta:g} ({e.neighbouring.replace('_', '-')} "
                         f"neighbours; one record = {e.privacy_unit})")
        sources = sorted({x.noise_source.split(" (")[0] for x in entries})
        lines.append(f"noise: {', '.join(sources)}; accountant {e.accountant}")
        lines.append("")
        lines.append(f"  {'#':>2}  {'released':<58} {'sigma':>9} {'sensitivity':>12} {'noise std':>10}")
        for i, x in enumerate(entries, 1):
            lines.append(f"  {i:>2}  {_short(x.description, 58):<58} {x.noise_multiplier:>9.4g} {x.sensitivity:>12.4g} "
                         f"{x.noise_std:>10.4g}")
            if x.plan.get("sample_rate") is not None and x.plan.get("steps"):
                lines.append(f"      {x.mechanism}: {x.plan['steps']:,} steps, each reading a secret Poisson sample "
                             f"at rate {x.plan['sample_rate']:g}; each step's noise std above")
    else:
        lines.append("privacy spent: nothing (no ledger entries)")
    spec = release.feature_spec
    lines.append("")
    lines.append(f"features: {spec.get('name', '?')} ("
                 + ", ".join(f"{k} {v}" for k, v in spec.items() if k not in ("name", "chunk_size", "fast", "captures")
                             and not isinstance(v, (dict, list)) or k in ("widths", "image_shape")) + ")")
    if spec.get("captures"):                      # what the embedding holds, in words (tables): whole, on its own
        lines.append(f"captures: {spec['captures']}")
    lines.append("tensors: " + ", ".join(f"{k} {'x'.join(map(str, v.shape))}" for k, v in release.tensors.items()))
    if model_json is not None:
        from .._io import read_sealed_json

        meta = read_sealed_json(model_json, "model")
        done, loss = meta.get("iterations_done"), meta.get("final_loss")
        if done is not None:
            lines.append(f"model: {done} training iterations" + (f", final loss {loss:.4g}" if loss is not None else "")
                         + " (post-processing: no privacy spent)")
    lines.append("")
    lines.append("every ledger field: --ledger; everything as JSON: --json")
    return "\n".join(line if len(line) <= WIDTH else _wrap(line, len(line) - len(line.lstrip()) + 2)
                     for line in lines)


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("inspect", help="summarise a release: what it spent, with which noise")
    s.add_argument("path", type=existing_path, help="a release folder (or a folder holding release/)")
    s.add_argument("--json", action="store_true", help="print the dataset facts, feature spec, ledger and tensor "
                   "shapes as one JSON object (for scripts)")
    s.add_argument("--ledger", action="store_true", help="print every field of every ledger entry (the default is a "
                   "short summary)")
    s.set_defaults(func=cmd_inspect)
    return s
