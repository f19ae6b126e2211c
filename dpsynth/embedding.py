"""Mean embeddings and their one-shot private release (data-touching function #1).

For features with ``||phi(x)|| <= B`` and labels one-hot encoded, the
class-conditional embedding ``mu = (1/m) sum_i phi(x_i) e_{y_i}^T`` (a D x C
matrix) changes by at most ``2B/m`` in Frobenius norm when one record is
replaced (DP-NTK Prop. 3.1); the unconditional ``(1/m) sum_i phi(x_i)`` too.
``m`` is the public number of records; dividing by private class counts would
change the sensitivity and is not done.
"""
from __future__ import annotations

import logging

import torch

from .errors import DataValidationError, InvalidParameterError
from .features.base import FeatureMap
from .privacy.budget import BudgetFile
from .privacy.calibration import PrivacyPlan, calibrate_sigma, shared_plan
from .privacy.ledger import PRIVACY_UNIT, Ledger, LedgerEntry
from .privacy.mechanisms import NoiseSource, gaussian_mechanism
from .release import Release
from .validation import check_delta, check_epsilon, check_features, check_labels, warn_delta_vs_n

logger = logging.getLogger(__name__)


def mean_embedding(feature_map: FeatureMap, X: torch.Tensor, y: torch.Tensor | None = None,
                   n_classes: int | None = None, batch_size: int | None = None) -> torch.Tensor:
    """(1/m) sum_i phi(x_i) e_{y_i}^T as a (D, C) float64 matrix; (D,) if ``y`` is None.

    Streams over ``X`` in batches (:meth:`FeatureMap.class_sums`; default batch
    ``feature_map.batch_rows()``, about 96 MiB of working memory); memory is
    O(batch_size * per-record working floats + D * C).
    """
    sums = feature_map.class_sums(X, y, n_classes, batch_size)                  # (C, D) float64
    return (sums.T.contiguous() if y is not None else sums[0]) / X.shape[0]


def release_mean_embedding(feature_map: FeatureMap, X, y=None, *, epsilon: float, delta: float,
                           n_classes: int | None = None, accountant: str = "pld", seed: int | None = None,
                           dataset: str = "", budget: BudgetFile | None = None,
                           plan: PrivacyPlan | None = None, noise_multiplier: float | None = None,
                           batch_size: int | None = None, public_facts: dict | None = None,
                           proportions_share: float | None = None, multipliers: dict | None = None,
                           noise: NoiseSource | None = None, prior_entries: tuple = (),
                           privacy_unit: str = PRIVACY_UNIT) -> Release:
    """Privatise the (class-conditional) mean embedding of ``X`` with the Gaussian mechanism.

    Order of work: validate parameters, calibrate sigma from (epsilon, delta) and the
    plan (or take ``noise_multiplier`` already calibrated for a joint plan), check the
    budget file; only then read the private data. ``n_classes`` is public and required
    when ``y`` is given. ``X`` may be a callable returning ``(X, y)`` (e.g. encoding a
    private table), called only after calibration; the release is then class-conditional
    when ``n_classes`` is given.

    ``proportions_share`` (in (0, 1)): also release the class proportions
    ``(1/m) sum_i e_{y_i}`` (sensitivity sqrt(2)/m under replace-one), as DP-MERF does
    for imbalanced data. The two Gaussian releases form one plan calibrated to
    (epsilon, delta) together; the proportions get ``proportions_share`` of the
    privacy (1/sigma^2 adds up over releases): noise multipliers
    sigma/sqrt(1 - share) for the embedding and sigma/sqrt(share) for the proportions.

    Part of a larger plan (e.g. with private schema inference before it): the caller
    calibrates ``noise_multiplier`` for ``plan``, passes the multipliers of this function's
    releases (``{"class_proportions": ..., "embedding": ...}``, relative to it), the same
    ``noise`` source, and the ledger entries already released under the plan
    (``prior_entries``: their budget id is reused, the budget is charged once, here).

    ``privacy_unit`` says what one record is (recorded in every ledger entry; presets say that
    the guarantee covers their preprocessed training split). Checks on the private data never
    decide whether a release happens beyond the input domain (finite numbers, labels in
    0..n_classes-1): a dataset whose labels hold one class is released like any other.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    conditional = (n_classes is not None) if callable(X) else (y is not None)
    if conditional and (n_classes is None or int(n_classes) < 2):
        raise InvalidParameterError(
            f"n_classes must be given (public knowledge, >= 2) for a class-conditional release; got "
            f"{n_classes!r}. It is never read from the private labels."
        )
    if proportions_share is not None:
        if not conditional or not 0 < float(proportions_share) < 1:
            raise InvalidParameterError(
                f"proportions_share must be a number in (0, 1) and needs labels; got {proportions_share!r}."
            )
    if multipliers is not None and (plan is None or noise_multiplier is None):
        raise InvalidParameterError("multipliers need the joint plan and its calibrated noise_multiplier.")
    if proportions_share is not None and multipliers is None:
        share = float(proportions_share)
        plan, multipliers = shared_plan({"class_proportions": share, "embedding": 1 - share})
    multipliers = multipliers or {}
    plan = plan or PrivacyPlan((1.0,))
    sigma = noise_multiplier if noise_multiplier is not None else calibrate_sigma(epsilon, delta, plan, accountant)
    if budget is not None:
        budget.check(epsilon, delta)
    noise = noise or NoiseSource(seed)  # before any private row is touched

    # ---- private data from here on -------------------------------------------------
    if callable(X):
        X, y = X()
    Xa = check_features(X)
    m = Xa.shape[0]
    X_t = torch.as_tensor(Xa, dtype=torch.float32)
    y_t = None
    if conditional:
        ya = check_labels(y, m)   # how many classes are present is private: never checked
        if ya.max() >= n_classes:
            raise DataValidationError(
                f"labels must lie in 0..{n_classes - 1} for n_classes={n_classes}; found {int(ya.max())}."
            )
        y_t = torch.as_tensor(ya)
    warn_delta_vs_n(delta, m)
    sensitivity = 2.0 * feature_map.norm_bound / m
    mu = mean_embedding(feature_map, X_t, y_t, n_classes, batch_size)
    tensors = {}
    sigma_emb = sigma * multipliers.get("embedding", 1.0)
    if proportions_share is not None:
        sigma_props = sigma * multipliers["class_proportions"]
        counts = torch.bincount(y_t, minlength=n_classes).to(torch.float64)
        tensors["class_proportions"] = gaussian_mechanism(counts / m, 2 ** 0.5 / m, sigma_props, noise)
    tensors["embedding"] = gaussian_mechanism(mu, sensitivity, sigma_emb, noise)
    # ---- end of private data ------------------------------------------------------------

    what = "class-conditional mean embedding" if conditional else "mean embedding"
    entry = LedgerEntry(
        mechanism="gaussian", description=f"{what} under {feature_map.spec()['name']} features",
        epsilon=epsilon, delta=delta, noise_multiplier=float(sigma_emb), sensitivity=sensitivity,
        accountant=accountant, plan=plan.to_dict(), noise_source=noise.policy, dataset=dataset, n_records=m,
        neighbouring="replace_one", privacy_unit=privacy_unit,
        **({"budget_id": prior_entries[0].budget_id} if prior_entries else {}),
    )
    entries = (entry,)
    if proportions_share is not None:  # same plan, same budget_id: paid for once
        entries = (LedgerEntry(
            mechanism="gaussian", description=f"class proportions ({proportions_share:g} of the plan's privacy)",
            epsilon=epsilon, delta=delta, noise_multiplier=float(sigma_props),
            sensitivity=2 ** 0.5 / m, accountant=accountant, plan=plan.to_dict(), noise_source=noise.policy,
            dataset=dataset, n_records=m, budget_id=entry.budget_id, neighbouring="replace_one",
            privacy_unit=privacy_unit), entry)
    entries = tuple(prior_entries) + entries
    if budget is not None:
        budget.charge(epsilon, delta, entry.description, entry.budget_id)
    facts = {"name": dataset, "n_records": m, "n_classes": n_classes, "conditional": conditional}
    facts.update(public_facts or {})
    logger.info("released %s: sigma=%.4g sensitivity=%.3g", what, sigma, sensitivity)
    return Release(tensors, feature_map.spec(), facts, Ledger(entries))
