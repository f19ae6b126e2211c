"""A per-dataset budget file: records every release, refuses one over the total.

The file is JSON. Charges compose by summation (basic composition), which is
valid for any mix of mechanisms; a plan calibrated jointly (e.g. DP-MEPF's three
releases) is one charge at its joint (epsilon, delta).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from pathlib import Path

from .._legacy import written_by_old
from .._version import __version__
from ..errors import ArtifactError, PrivacyBudgetError
from ..validation import check_delta, check_epsilon

_SLACK = 1e-12  # float round-off when many charges add up to exactly the total


class BudgetFile:
    """Total (epsilon, delta) for one dataset and the charges made against it."""

    def __init__(self, path, dataset: str, epsilon: float, delta: float):
        self.path = Path(path)
        self.dataset = dataset
        self.epsilon = check_epsilon(epsilon, "total epsilon")
        self.delta = check_delta(delta, "total delta")
        self.charges: list[dict] = []

    # -- persistence -------------------------------------------------------
    @classmethod
    def new_for_fit(cls, path, dataset: str, epsilon: float, *, delta_times: float = 1.0) -> "BudgetFile":
        """A new budget file whose total delta is ``delta_times`` the delta of the fit checked against it first (a
        delta left out is settled inside the fit's run from its public count, :func:`~mmdsynth.choice.default_delta`):
        written at that check, when the fit's engine is calibrated, before any row is read; nothing is written by a
        fit refused before."""
        if Path(path).exists():
            return cls.open(path, dataset, epsilon)
        budget = cls.__new__(cls)
        budget.path, budget.dataset, budget.delta, budget.charges = Path(path), dataset, None, []
        budget._delta_times = float(delta_times)
        budget.epsilon = check_epsilon(epsilon, "total epsilon")
        return budget

    @classmethod
    def open(cls, path, dataset: str | None = None, epsilon: float | None = None,
             delta: float | None = None) -> "BudgetFile":
        """Open an existing file, or create one when ``epsilon`` and ``delta`` are given."""
        path = Path(path)
        if path.exists():
            try:
                data = json.loads(path.read_text())
                if data.get("format") is None and str(data.get("library_version", "")).startswith("0.1"):
                    written_by_old(path)                  # budget files carry a format tag since the rename
                budget = cls(path, data["dataset"], data["epsilon"], data["delta"])
                budget.charges = list(data["charges"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ArtifactError(f"budget file {path} is not a valid mmdsynth budget file: {exc}") from exc
            if dataset is not None and dataset != budget.dataset:
                raise PrivacyBudgetError(
                    f"budget file {path} belongs to dataset {budget.dataset!r}, not {dataset!r}; "
                    f"use one budget file per dataset."
                )
            if epsilon is not None and abs(float(epsilon) - budget.epsilon) > _SLACK:
                raise PrivacyBudgetError(
                    f"budget file {path} declares a total epsilon of {budget.epsilon:g}; "
                    f"it cannot be changed to {epsilon:g} after releases were made."
                )
            return budget
        if epsilon is None or delta is None or dataset is None:
            raise PrivacyBudgetError(
                f"no budget file at {path}; give dataset, epsilon and delta to create one."
            )
        budget = cls(path, dataset, epsilon, delta)
        budget.save()
        return budget

    def save(self) -> None:
        data = {
            "dataset": self.dataset,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "charges": self.charges,
            "format": "mmdsynth-budget",
            "library_version": __version__,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".budget-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2)
        os.replace(tmp, self.path)

    # -- accounting --------------------------------------------------------
    @property
    def spent(self) -> tuple[float, float]:
        return (sum(c["epsilon"] for c in self.charges), sum(c["delta"] for c in self.charges))

    @property
    def remaining(self) -> tuple[float, float]:
        eps, delta = self.spent
        return max(self.epsilon - eps, 0.0), max(self.delta - delta, 0.0)

    def check(self, epsilon: float, delta: float) -> None:
        """Raise ``PrivacyBudgetError`` if a charge of (epsilon, delta) would not fit. A file made by
        :meth:`new_for_fit` takes ``delta_times`` x ``delta`` as its total and is written now, unless the charge would
        not fit (then nothing is written and its total stays unsettled)."""
        total_delta = self.delta if self.delta is not None else check_delta(self._delta_times * delta, "total delta")
        eps_spent, delta_spent = self.spent
        if eps_spent + epsilon > self.epsilon + _SLACK or delta_spent + delta > total_delta + _SLACK:
            rem_eps, rem_delta = max(self.epsilon - eps_spent, 0.0), max(total_delta - delta_spent, 0.0)
            raise PrivacyBudgetError(
                f"release at epsilon={epsilon:g}, delta={delta:g} would exceed the budget of dataset "
                f"{self.dataset!r} ({self.path}): total epsilon={self.epsilon:g}, delta={total_delta:g}; "
                f"already spent epsilon={eps_spent:g}, delta={delta_spent:g} in {len(self.charges)} "
                f"release(s); remaining epsilon={rem_eps:g}, delta={rem_delta:g}. Ask for at most the "
                f"remaining budget, or reuse an existing release (training on it costs nothing)."
            )
        if self.delta is None:                       # a new file's total settled by the fit it admits
            self.delta = total_delta
            self.save()

    def charge(self, epsilon: float, delta: float, description: str, budget_id: str = "") -> None:
        """Record a release; refuses (and writes nothing) if it would exceed the total."""
        epsilon = check_epsilon(epsilon)
        delta = check_delta(delta)
        self.check(epsilon, delta)
        self.charges.append({
            "epsilon": epsilon,
            "delta": delta,
            "description": description,
            "budget_id": budget_id,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        })
        self.save()
