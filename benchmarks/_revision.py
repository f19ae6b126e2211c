"""A module of this checkout beside the same file at another revision, for the paired speed scripts
(`calibration_speed.py`, `audit_power_speed.py`, `frechet_speed.py`): both versions run in one process, in turn."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_at(name: str, rev: str | None, imports: dict[str, str]):
    """The module ``name`` (dotted, e.g. ``mmdsynth.audit.attack``) as this checkout has it (``rev`` None) or as its
    file was at ``rev``, its relative imports (the keys of ``imports``) pointed at the installed package (the values)."""
    if rev is None:
        return importlib.import_module(name)
    file = name.replace(".", "/") + ".py"
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{file}"], capture_output=True, text=True,
                          check=True).stdout
    for old, new in imports.items():
        text = text.replace(old, new)
    path = Path(tempfile.mkdtemp()) / f"{name.rsplit('.', 1)[-1]}_{rev}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def paired(doc: str, name: str, imports: dict[str, str]):
    """(the parsed ``--base`` / ``--rounds`` arguments, the module here, the module at ``--base``)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the revision to compare with")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    return args, module_at(name, None, imports), module_at(name, args.base, imports)


def in_turn(r: int, here, base) -> tuple:
    """The two versions in round ``r``'s order (base first in even rounds)."""
    return (("base", base), ("here", here)) if r % 2 == 0 else (("here", here), ("base", base))
