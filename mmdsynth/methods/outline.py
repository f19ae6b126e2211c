"""What a table fit will release and cost, said before any row is read (issue 81, item 5): the plan's releases with
each one's share of the privacy plan, and an estimate of the fit's memory and time, all from public facts (the
schema, the public count of records, epsilon, delta, the method's settings). ``mmdsynth fit`` prints it before the
plan is charged, and refuses, with the setting that would fit, a fit whose memory estimate exceeds what the machine
has free; ``model.plan_outline(schema, facts)`` returns it in Python.

Shares are of the plan's privacy loss: a zCDP plan's rho (the marginal methods and the hybrid), or, for a plan of
Gaussian releases calibrated together (DP-MERF's), each release's 1 / multiplier^2 over their sum (k Gaussian
releases compose as one whose 1 / sigma^2 is the sum of theirs). A stage whose number of rounds depends on earlier
noisy results (AIM's) is one line with its total share.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import InvalidParameterError

#: the memory a fitting process holds before the method's own arrays: the interpreter, torch, pandas, the table as
#: read (measured: 0.45 GB for a 2,500-row table)
BASE_BYTES = 450 * 2 ** 20


@dataclass(frozen=True)
class PlanOutline:
    """A fit's releases ((what, share of the plan) in the order they are made), its memory estimate in bytes, its
    time estimate in seconds on a 2-core machine like the one the rates were measured on (None: not estimated),
    and what to change if the memory does not fit (``advice``)."""

    method: str
    records: str
    releases: tuple = ()
    memory_bytes: int = BASE_BYTES
    seconds: float | None = None
    advice: str = ""
    notes: tuple = field(default=())
    #: how far the measured times of the method's fits fell from its estimate (the suite's cells)
    spread: str = "expect 0.5-2x"

    def lines(self) -> list[str]:
        """The outline in words, one release a line (what `mmdsynth fit` prints before it reads a row)."""
        out = [f"plan: {self.method} on {self.records}; the releases and their shares of the privacy plan:"]
        out += [f"  {100 * share:5.1f} %  {what}" for what, share in self.releases]
        out += [f"  {note}" for note in self.notes]
        time = f", about {_duration(self.seconds)} on an idle 2-core machine (a rate measured on this project's suite; " \
            f"{self.spread})" \
            if self.seconds is not None else ""
        out.append(f"estimate: about {_size(self.memory_bytes)} of memory{time}")
        return out

    def check_memory(self, available: int | None = None) -> None:
        """Refuse (before anything is read or charged) a fit whose memory estimate exceeds ``available`` bytes (by
        default what the machine has free now), naming the estimate and the setting that lowers it."""
        free = available_memory() if available is None else available
        if free is not None and self.memory_bytes > free:
            raise InvalidParameterError(
                f"this {self.method} fit needs about {_size(self.memory_bytes)} of memory and the machine has "
                f"{_size(free)} free; nothing was read or charged. {self.advice or 'Free memory, or use a machine with more.'}")


def shares_of(multipliers: dict) -> dict:
    """Each Gaussian release's share of a plan calibrated together, from its noise multiplier (1 / m^2 over the
    sum)."""
    inverse = {name: 1.0 / float(m) ** 2 for name, m in multipliers.items()}
    total = sum(inverse.values())
    return {name: v / total for name, v in inverse.items()}


#: the words for a release's name in a plan's shares (the names the engines and the ledger use)
RELEASE_WORDS = {
    "embedding": "the class-conditional kernel mean embedding (random features)",
    "class_proportions": "the class proportions",
    "numeric_sketch": "the numeric columns' quantiles (their CDFs)",
    "schema": "the schema's categories and bounds (inferred with budget)",
    "rows_per_person": "the histogram of rows per person",
}


def release_words(name: str) -> str:
    return RELEASE_WORDS.get(name, name.replace("_", " "))


def available_memory() -> int | None:
    """The bytes the machine has free now (Linux: MemAvailable; elsewhere the physical memory; None: unknown)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _size(n: float) -> str:
    return f"{n / 2 ** 30:.1f} GB" if n >= 2 ** 30 else f"{n / 2 ** 20:.0f} MB"


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"
