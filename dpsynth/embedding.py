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

import numpy as np
import torch

from .engines import Source, as_source
from .errors import DataValidationError, InvalidParameterError
from .features.base import FeatureMap
from .privacy.budget import BudgetFile
from .early_stopping import release_proxy
from .privacy.calibration import PrivacyPlan, calibrate_sigma, compose_plan
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


class ClassSums:
    """The statistic a mean embedding sums, for :meth:`~dpsynth.engines.Source.total`: of one batch of
    records, ``{"sums": sum_i phi(x_i) e_{y_i}^T as (C, D) float64, "counts": per-class record counts}``
    (unconditional, ``n_classes`` None: ``sums`` is (1, D), no counts). A batch is ``(X, y)`` arrays, or
    a DataFrame that ``encoder`` (a :class:`~dpsynth.data.encoding.TableEncoder`) turns into them. The
    records are checked here (finite numbers, labels in 0..n_classes-1) wherever the batch is read:
    in process or on a worker (``validate=False``: not checked; every row is still bounded by the map's
    :meth:`~FeatureMap.bounded`, non-finite ones to zero)."""

    def __init__(self, feature_map: FeatureMap, n_classes: int | None, *, encoder=None,
                 batch_size: int | None = None, validate: bool = True):
        self.feature_map, self.n_classes, self.encoder, self.batch_size = feature_map, n_classes, encoder, batch_size
        self.validate = validate
        self.device = None

    def to(self, device) -> "ClassSums":
        """Compute on ``device`` (a worker's GPU); the sums come back on the CPU."""
        self.feature_map, self.device = self.feature_map.to(device), device
        return self

    def __call__(self, batch) -> dict:
        X, y = self.encoder.encode(batch) if self.encoder is not None else batch
        Xa = check_features(X) if self.validate else np.asarray(X.detach().cpu() if hasattr(X, "detach") else X)
        y_t = None
        if self.n_classes is not None:
            ya = check_labels(y, Xa.shape[0])  # how many classes are present is private: never checked
            if ya.max() >= self.n_classes:
                raise DataValidationError(f"labels must lie in 0..{self.n_classes - 1} for n_classes="
                                          f"{self.n_classes}; found {int(ya.max())}.")
            y_t = torch.as_tensor(ya)
        X_t = torch.as_tensor(Xa, dtype=torch.float32)
        if self.device is not None:
            X_t, y_t = X_t.to(self.device), (y_t.to(self.device) if y_t is not None else None)
        out = {"sums": self.feature_map.class_sums(X_t, y_t, self.n_classes, self.batch_size).cpu()}
        if y_t is not None:
            out["counts"] = torch.bincount(y_t.cpu(), minlength=self.n_classes).to(torch.float64)
        return out


def public_assumptions(m: int, n_classes: int | None, public_facts: dict | None = None) -> dict:
    """What a release's calibration takes as public, for its ledger entries: the record count m,
    the number of classes, and for tables the numeric bounds of the encoder's schema (declared, or
    inferred with budget)."""
    out = {"m": int(m)}
    if n_classes is not None:
        out["n_classes"] = int(n_classes)
    table = (public_facts or {}).get("table")
    if table:
        cols = table.get("schema", {}).get("columns", [])
        out["numeric bounds (declared or privately inferred)"] = {
            c["name"]: c["bounds"] for c in cols if c.get("bounds") is not None}
    return out


def release_plan(feature_map: FeatureMap | None = None, *, proxy_multiplier: float | None = None,
                 shares: dict | None = None, blocks: dict | None = None) -> tuple[PrivacyPlan, dict[str, float]]:
    """The plan of every Gaussian release :func:`release_mean_embedding` makes, and each one's
    noise multiplier relative to the base sigma: one per block of the feature map
    (:meth:`FeatureMap.parts`; DP-MEPF: phi1, phi2; a map of unknown parts: "embedding") at its
    :meth:`FeatureMap.noise_multipliers` (1, except DP-HP's product blocks),
    the early-stopping proxy at ``proxy_multiplier`` when given, and the releases named in
    ``shares`` (class proportions, schema statistics) at their share of the privacy. ``blocks``
    (name -> relative multiplier) stands in for the map when it cannot be built yet (a table's
    encoder waits for private schema inference)."""
    if blocks is None:
        blocks = feature_map.noise_multipliers() if feature_map is not None else {"embedding": 1.0}
    relative = dict(blocks)
    if proxy_multiplier is not None:
        relative["proxy"] = float(proxy_multiplier)
    return compose_plan(relative, {k: v for k, v in (shares or {}).items() if v})


def release_mean_embedding(feature_map: FeatureMap, X, y=None, *, epsilon: float, delta: float,
                           n_classes: int | None = None, accountant: str = "pld", seed: int | None = None,
                           dataset: str = "", budget: BudgetFile | None = None,
                           plan: PrivacyPlan | None = None, noise_multiplier: float | None = None,
                           batch_size: int | None = None, public_facts: dict | None = None,
                           proportions_share: float | None = None, multipliers: dict | None = None,
                           noise: NoiseSource | None = None, prior_entries: tuple = (),
                           prior_tensors: dict | None = None,
                           privacy_unit: str = PRIVACY_UNIT, proxy_map: FeatureMap | None = None,
                           proxy_multiplier: float = 10.0, encoder=None) -> Release:
    """Privatise the (class-conditional) mean embedding of ``X`` with the Gaussian mechanism.

    Order of work: validate parameters, calibrate sigma from (epsilon, delta) and the
    plan (or take ``noise_multiplier`` already calibrated for a joint plan), check the
    budget file; only then read the private data. ``n_classes`` is public and required
    when ``y`` is given. ``X`` may also be a :class:`~dpsynth.engines.Source` (shards read on its
    engine: streamed, or on Ray; labels in the shards; m is its declared ``n_records``, checked
    against the rows read) or, with ``encoder`` (a :class:`~dpsynth.data.encoding.TableEncoder`), a
    DataFrame or a table Source whose rows the encoder turns into records; either is
    class-conditional when ``n_classes`` is given. Only sums over records are computed from the data
    (:class:`ClassSums`); the noise is drawn here, once, after they are added up.

    A feature map of several blocks (:meth:`FeatureMap.parts`, e.g. DP-MEPF's phi1 and phi2,
    each of norm <= 1) makes one Gaussian release per block, each with sensitivity
    2 * bound / m; the noisy blocks are stored together as the tensor ``embedding``.

    ``proxy_map`` (DP early stopping): also release the unconditional mean embedding of these
    (public network's) features with ``proxy_multiplier`` times the base sigma
    (:func:`~dpsynth.early_stopping.release_proxy`), stored as ``proxy``.

    ``proportions_share`` (in (0, 1)): also release the class proportions
    ``(1/m) sum_i e_{y_i}`` (sensitivity sqrt(2)/m under replace-one), as DP-MERF does
    for imbalanced data, with ``proportions_share`` of the privacy (1/sigma^2 adds up over
    releases; :func:`release_plan`).

    All releases form one plan calibrated to (epsilon, delta) together, recorded as ledger
    entries sharing one budget id. Part of a larger plan (e.g. with private schema inference
    before it): the caller calibrates ``noise_multiplier`` for ``plan`` (:func:`release_plan`),
    passes the multipliers of this function's releases (relative to it), the same ``noise``
    source, and the ledger entries already released under the plan (``prior_entries``: their
    budget id is reused, the budget is charged once, here) with their noisy tensors
    (``prior_tensors``, saved in the same release).

    ``privacy_unit`` says what one record is (recorded in every ledger entry; presets say that
    the guarantee covers their preprocessed training split). Checks on the private data never
    decide whether a release happens beyond the input domain (finite numbers, labels in
    0..n_classes-1): a dataset whose labels hold one class is released like any other.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    conditional = (n_classes is not None) if isinstance(X, Source) or encoder is not None else (y is not None)
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
    if (multipliers is None) != (plan is None) or (multipliers is not None and noise_multiplier is None):
        raise InvalidParameterError("a joint plan is given as plan, its calibrated noise_multiplier and the "
                                    "multipliers of this call's releases together (see release_plan()).")
    if multipliers is None:
        plan, multipliers = release_plan(feature_map, proxy_multiplier=proxy_multiplier if proxy_map else None,
                                         shares={"class_proportions": proportions_share})
    parts = feature_map.parts()
    needed = [n for n, _, _ in parts] + (["proxy"] if proxy_map else []) + \
        (["class_proportions"] if proportions_share is not None else [])
    if any(k not in multipliers for k in needed):
        raise InvalidParameterError(f"the plan's multipliers {sorted(multipliers)} must name every release "
                                    f"{needed}; build them with release_plan().")
    sigma = noise_multiplier if noise_multiplier is not None else calibrate_sigma(epsilon, delta, plan, accountant)
    if budget is not None:
        budget.check(epsilon, delta)
    noise = noise or NoiseSource(seed)  # before any private row is touched

    # ---- private data from here on -------------------------------------------------
    source = as_source(X, y if conditional else None)
    totals = source.total(ClassSums(feature_map, n_classes if conditional else None, encoder=encoder,
                                    batch_size=batch_size))
    m = source.n_records                 # public: the declared count, checked against the rows read
    warn_delta_vs_n(delta, m)
    sums = totals["sums"]
    mu = sums.T.contiguous() / m if conditional else sums[0] / m
    what = "class-conditional mean embedding" if conditional else "mean embedding"
    what = f"{what} under {feature_map.spec()['name']} features"
    tensors, released = dict(prior_tensors or {}), []          # released: (description, noise multiplier, sensitivity)
    if proportions_share is not None:
        sigma_props = sigma * multipliers["class_proportions"]
        tensors["class_proportions"] = gaussian_mechanism(totals["counts"] / m, 2 ** 0.5 / m, sigma_props, noise)
        released.append((f"class proportions ({proportions_share:g} of the plan's privacy)", sigma_props,
                         2 ** 0.5 / m, {"sensitivity": "sqrt(2) / m (one label changes)"}))
    blocks, start = [], 0
    for name, width, bound in parts:
        s_block = sigma * multipliers[name]
        blocks.append(gaussian_mechanism(mu[start:start + width], 2.0 * bound / m, s_block, noise))
        block = f", block {name} (rows {start}:{start + width} of 'embedding')" if len(parts) > 1 else ""
        released.append((f"{what}{block}", s_block, 2.0 * bound / m,
                         {"feature_norm_bound": bound, "sensitivity": "2 * feature_norm_bound / m"}))
        start += width
    tensors["embedding"] = blocks[0] if len(blocks) == 1 else torch.cat(blocks, 0)
    if proxy_map is not None:
        s_proxy = sigma * multipliers["proxy"]
        tensors["proxy"], proxy_sens = release_proxy(proxy_map, source, s_proxy, noise, batch_size)
        proxy_spec = proxy_map.spec()
        released.append((f"DP early-stopping proxy: mean embedding under {proxy_spec['name']} features of "
                         f"the public network {proxy_spec.get('encoder', '')}", s_proxy, proxy_sens,
                         {"feature_norm_bound": proxy_map.norm_bound, "sensitivity": "2 * feature_norm_bound / m",
                          "public network": proxy_spec.get("encoder", "")}))
    # ---- end of private data ------------------------------------------------------------

    common = dict(epsilon=epsilon, delta=delta, accountant=accountant, plan=plan.to_dict(),
                  noise_source=noise.policy, dataset=dataset, n_records=m, neighbouring="replace_one",
                  privacy_unit=privacy_unit)
    budget_id = {"budget_id": prior_entries[0].budget_id} if prior_entries else {}
    common["computation"] = source.describe()
    entries = []
    public = public_assumptions(m, n_classes if conditional else None, public_facts)
    for desc, s_release, sens, assumed in released:
        entries.append(LedgerEntry(mechanism="gaussian", description=desc, noise_multiplier=float(s_release),
                                   sensitivity=sens, assumed={**public, **assumed}, **common, **budget_id))
        budget_id = {"budget_id": entries[0].budget_id}          # same plan, same budget: paid for once
    entries = tuple(prior_entries) + tuple(entries)
    if budget is not None:
        budget.charge(epsilon, delta, what + (f" ({len(released)} Gaussian releases in one plan)"
                                              if len(released) > 1 else ""),
                      entries[-1].budget_id)
    facts = {"name": dataset, "n_records": m, "n_classes": n_classes, "conditional": conditional}
    facts.update(public_facts or {})
    logger.info("released %s: sigma=%.4g (%d Gaussian releases)", what, sigma, len(entries) - len(prior_entries))
    extra = {"proxy_spec": proxy_spec} if proxy_map is not None else {}
    return Release(tensors, feature_map.spec(), facts, Ledger(entries), extra)
