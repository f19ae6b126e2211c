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
import math

import torch

from .early_stopping import proxy_stages
from .engines import Source, SourceFacts, as_source
from .errors import DataValidationError, InvalidParameterError
from .features.base import FeatureMap
from .statistics.embedding import ClassSums, SampledBlockSums
from .privacy.budget import BudgetFile
from .privacy.calibration import PrivacyPlan, compose_plan
from .privacy.engine import Facts, GaussianRelease, Open, PrivacyEngine, Step, SubsampledSteps, Sums, run_plan
from .privacy.ledger import PRIVACY_UNIT
from .release import Release
from .validation import check_probability, warn_delta_vs_n

__all__ = ["ClassSums", "mean_embedding", "public_assumptions", "release_mean_embedding", "release_plan",
           "release_sampled_embedding"]

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


def release_mean_embedding(feature_map: FeatureMap, X, y=None, *, epsilon: float | None = None,
                           delta: float | None = None, n_classes: int | None = None, accountant: str = "pld",
                           seed: int | None = None, dataset: str = "", budget: BudgetFile | None = None,
                           batch_size: int | None = None, public_facts: dict | None = None,
                           proportions_share: float | None = None, privacy_unit: str = PRIVACY_UNIT,
                           proxy_map: FeatureMap | None = None, proxy_multiplier: float = 10.0, encoder=None,
                           engine: PrivacyEngine | None = None, prior_tensors: dict | None = None) -> Release:
    """Privatise the (class-conditional) mean embedding of ``X`` with the Gaussian mechanism.

    Order of work: validate parameters; declare the plan (:func:`release_plan`) and let a
    :class:`~mmdsynth.privacy.engine.PrivacyEngine` calibrate it and check the budget (or take
    ``engine``, already calibrated for a larger plan this call is part of, e.g. after private schema
    inference); only then read the private data. ``n_classes`` is public and required
    when ``y`` is given. ``X`` may also be a :class:`~mmdsynth.engines.Source` (shards read on its
    engine: streamed, or on Ray; labels in the shards; m is its declared ``n_records``, checked
    against the rows read) or, with ``encoder`` (a :class:`~mmdsynth.data.encoding.TableEncoder`), a
    DataFrame or a table Source whose rows the encoder turns into records; either is
    class-conditional when ``n_classes`` is given. Only sums over records are computed from the data
    (:class:`~mmdsynth.statistics.embedding.ClassSums`); the engine adds the noise, once, after they are
    added up, records every ledger entry and charges the budget once.

    A feature map of several blocks (:meth:`FeatureMap.parts`, e.g. DP-MEPF's phi1 and phi2,
    each of norm <= 1) makes one Gaussian release per block, each with sensitivity
    2 * bound / m; the noisy blocks are stored together as the tensor ``embedding``.

    ``proxy_map`` (DP early stopping): also release the unconditional mean embedding of these
    (public network's) features with ``proxy_multiplier`` times the base sigma
    (:func:`~mmdsynth.early_stopping.release_proxy`), stored as ``proxy``.

    ``proportions_share`` (in (0, 1)): also release the class proportions
    ``(1/m) sum_i e_{y_i}`` (sensitivity sqrt(2)/m under replace-one), as DP-MERF does
    for imbalanced data, with ``proportions_share`` of the privacy (1/sigma^2 adds up over
    releases; :func:`release_plan`).

    With ``engine``, ``epsilon``/``delta``/``accountant``/``seed``/``budget`` are the engine's;
    ``prior_tensors`` are tensors it already released (saved in the same release).

    ``privacy_unit`` says what one record is (recorded in every ledger entry; presets say that
    the guarantee covers their preprocessed training split). Checks on the private data never
    decide whether a release happens beyond the input domain (finite numbers, labels in
    0..n_classes-1): a dataset whose labels hold one class is released like any other.
    """
    conditional = (n_classes is not None) if isinstance(X, Source) or encoder is not None else (y is not None)
    check_embedding_args(conditional, n_classes, proportions_share)
    options = dict(conditional=conditional, n_classes=n_classes, encoder=encoder, batch_size=batch_size,
                   public_facts=public_facts, proportions_share=proportions_share, proxy_map=proxy_map,
                   dataset=dataset, prior_tensors=prior_tensors)
    if engine is not None:                       # a part of a larger plan, its engine already calibrated
        source = as_source(X, y if conditional else None)
        return engine.run(source, embedding_stages(feature_map, SourceFacts.of(source, X), engine, **options))
    if epsilon is None or delta is None:
        raise InvalidParameterError("epsilon and delta are required (or an engine calibrated for a larger plan).")

    def opening(plan, mults):
        return Open(epsilon, delta, plan, options=dict(multipliers=mults, accountant=accountant, budget=budget,
                                                       noise_seed=seed, dataset=dataset, privacy_unit=privacy_unit))
    return run_plan(X, _with_facts(lambda facts: mean_embedding_part(
        feature_map, facts, opening, proxy_multiplier=proxy_multiplier, **options)), y=y if conditional else None)


def _with_facts(part):
    """A run's whole plan (:func:`~mmdsynth.privacy.engine.run_plan`) of one ``part``, a function of the input's
    public facts that returns its stages (the engine opened first); returns what they return."""
    facts = yield Facts()
    return (yield from part(facts))


def mean_embedding_part(feature_map: FeatureMap, facts, opening, *, proxy_multiplier: float | None = None,
                        proportions_share: float | None = None, **options):
    """The one-shot mean embedding as a planner's part (:func:`release_mean_embedding`, a kernel method's fit): its
    plan (:func:`release_plan`: the blocks, the proxy at ``proxy_multiplier`` times the base noise where
    ``options`` has a ``proxy_map``, the class proportions at ``proportions_share``) opened by ``opening(plan,
    multipliers)`` (the :class:`~mmdsynth.privacy.engine.Open` stage of the caller's engine), then
    :func:`embedding_stages` with ``options``. Returns the :class:`~mmdsynth.release.Release`."""
    plan, mults = release_plan(feature_map, proxy_multiplier=proxy_multiplier if options.get("proxy_map") else None,
                               shares={"class_proportions": proportions_share})
    engine = yield opening(plan, mults)
    return (yield from embedding_stages(feature_map, facts, engine, proportions_share=proportions_share, **options))


def embedding_stages(feature_map: FeatureMap, facts, engine: PrivacyEngine, *, conditional: bool,
                     n_classes: int | None = None,
                     encoder=None, batch_size: int | None = None, public_facts: dict | None = None,
                     proportions_share: float | None = None, proxy_map: FeatureMap | None = None, dataset: str = "",
                     prior_tensors: dict | None = None):
    """The stages of :func:`release_mean_embedding` on the rows ``facts`` describe (a planner's part, run by
    :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run`; ``engine``: its plan, checked to hold every release before a
    row is read, then charged once the stages ran): the class proportions and the embedding's blocks from one read
    of the rows, then the proxy. Returns the :class:`~mmdsynth.release.Release`; ``conditional``: the labels' columns
    (``n_classes`` public: the source's labels, or the label an ``encoder`` reads from a table)."""
    _check_in_plan(engine, feature_map, proxy_map is not None, proportions_share is not None)
    m = facts.n_records                  # public: the declared count, checked against the rows read
    statistic = ClassSums(feature_map, n_classes if conditional else None, encoder=encoder,
                          batch_size=batch_size or feature_map.release_rows(m))
    if m < 1:                            # no record: refused by the rows' own check (its message names the input)
        yield Sums(statistic, ())
        raise DataValidationError("the data holds no record; pass at least one.")
    warn_delta_vs_n(engine.delta, m)
    what = "class-conditional mean embedding" if conditional else "mean embedding"
    what = f"{what} under {feature_map.spec()['name']} features"
    public = public_assumptions(m, n_classes if conditional else None, public_facts)
    tensors = dict(prior_tensors or {})
    n_before = len(engine.entries)
    noisy = yield Sums(statistic, tuple(_embedding_releases(feature_map.parts(), m, conditional, what, public,
                                                            proportions_share)))
    if proportions_share is not None:
        tensors["class_proportions"], noisy = noisy[0], noisy[1:]
    tensors["embedding"] = noisy[0] if len(noisy) == 1 else torch.cat(noisy, 0)
    extra = {}
    if proxy_map is not None:
        tensors["proxy"] = yield from _proxy(proxy_map, m, batch_size, public)
        extra = {"proxy_spec": proxy_map.spec()}
    n_released = len(engine.entries) - n_before
    engine.charge(what + (f" ({n_released} Gaussian releases in one plan)" if n_released > 1 else ""))
    facts = {"name": engine.dataset or dataset, "n_records": m, "n_classes": n_classes, "conditional": conditional}
    facts.update(public_facts or {})
    logger.info("released %s: sigma=%.4g (%d Gaussian releases)", what, engine.sigma, n_released)
    return Release(tensors, feature_map.spec(), facts, engine.ledger, extra)


def _proxy(proxy_map: FeatureMap, m: int, batch_size, public: dict):
    """DP early stopping's proxy stage: the unconditional mean embedding under the public network's features
    (:func:`~mmdsynth.early_stopping.proxy_stages`, at its own multiplier in the plan)."""
    spec = proxy_map.spec()
    return proxy_stages(
        proxy_map, m, batch_size,
        description=f"DP early-stopping proxy: mean embedding under {spec['name']} features of "
                    f"the public network {spec.get('encoder', '')}",
        assumed={**public, "feature_norm_bound": proxy_map.norm_bound,
                 "sensitivity": "2 * feature_norm_bound / m", "public network": spec.get("encoder", "")})


def check_embedding_args(conditional: bool, n_classes, proportions_share) -> None:
    """The public arguments of :func:`release_mean_embedding`, checked before a plan is made."""
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


def _check_in_plan(engine: PrivacyEngine, feature_map: FeatureMap, proxy: bool, proportions: bool) -> None:
    """Every release :func:`release_mean_embedding` makes is in ``engine``'s plan, the map's blocks at the ratios of
    its own multipliers (a plan that would not match the releases is refused before a row is read)."""
    parts = feature_map.parts()
    for name in [n for n, _, _ in parts] + (["proxy"] if proxy else []) + (["class_proportions"] if proportions
                                                                            else []):
        engine.multiplier(name)                                   # every release is in the plan
    declared = feature_map.noise_multipliers()                    # the map's blocks keep their ratios in it
    ratios = [engine.multiplier(name) / declared[name] for name, _, _ in parts]
    if max(ratios) - min(ratios) > 1e-9 * max(ratios):
        raise InvalidParameterError(f"the plan's block multipliers {[engine.multiplier(n) for n, _, _ in parts]} do "
                                    f"not keep the feature map's ratios {declared}: the plan would not match the "
                                    f"releases.")


def _embedding_releases(parts, m: int, conditional: bool, what: str, public: dict,
                        proportions_share) -> list[GaussianRelease]:
    """The Gaussian releases of a mean embedding of ``m`` public records: the class proportions (when their share is
    given), then one per block of the feature map (``parts``: name, width, norm bound), each the block's rows of the
    summed embedding divided by m."""

    def mean(totals: dict, start: int, stop: int) -> torch.Tensor:
        """The mean embedding's rows start:stop (one block), divided by the public m (only that block's rows)."""
        sums = totals["sums"]
        return sums.T[start:stop] / m if conditional else sums[0][start:stop] / m

    declared = []
    if proportions_share is not None:
        declared.append(GaussianRelease(
            "class_proportions", 2 ** 0.5 / m, f"class proportions ({proportions_share:g} of the plan's privacy)",
            {**public, "sensitivity": "sqrt(2) / m (one label changes)"}, lambda t: t["counts"] / m))
    start = 0
    for name, width, bound in parts:
        block = f", block {name} (rows {start}:{start + width} of 'embedding')" if len(parts) > 1 else ""
        declared.append(GaussianRelease(
            name, 2.0 * bound / m, f"{what}{block}",
            {**public, "feature_norm_bound": bound, "sensitivity": "2 * feature_norm_bound / m"},
            lambda t, a=start, b=start + width: mean(t, a, b).contiguous()))
        start += width
    return declared


def release_sampled_embedding(feature_map: FeatureMap, X, y=None, *, epsilon: float, delta: float, sample_rate: float,
                              n_classes: int | None = None, accountant: str = "pld", seed: int | None = None,
                              sampler_seed: int | None = None, dataset: str = "", budget: BudgetFile | None = None,
                              public_facts: dict | None = None, privacy_unit: str = PRIVACY_UNIT,
                              neighbouring: str = "replace_one") -> Release:
    """Release the (class-conditional) mean embedding one block at a time, each block from its own Poisson
    sample of the records (data-touching function #1b; NDPDC's sampling: one random network per step).

    For a map of T = ``n_blocks`` independent blocks (dp-randconv's networks), step t draws each record with
    probability q = ``sample_rate`` from the engine's secret sampler, sums v(x) = sqrt(T) * block_t(x) (norm
    <= 1 per record, by :func:`~mmdsynth.statistics.bounds.bounded_rows`) into the record's class column, and
    the engine adds N(0, sigma^2 I): T subsampled Gaussian steps with clip 1, calibrated together before any
    record is read, exactly as DP-SGD's (adding or removing a record moves a step's sum by <= 1, replacing one
    by <= 2; the accountant prices the sampling). Block t of the stored ``embedding`` is the noisy sum / (q m
    sqrt(T)): an unbiased estimate of the same (1/m) sum_i phi(x_i) e_{y_i}^T that
    :func:`release_mean_embedding` releases (m public), so distillation and generators use it unchanged.

    Each step reads about q m records, so T blocks cost q T passes over the data instead of T: many more
    networks for the same compute. At the same number of blocks the noise in the estimate is about what one
    full release has (the subsampled Gaussian's sigma grows as about q sqrt(T)); the gain is more blocks, not
    less noise. ``X``: images or records in memory (not shards); ``y`` with ``n_classes`` (public) for the
    class-conditional release. ``sampler_seed`` fixes the sample for tests only (the ledger says so).
    ``neighbouring``: "replace_one" (default, as every release) or "add_remove" (the accounting NDPDC and DP-SGD
    papers use; m still divides as a public count, as DP-KIP's expected batch does, so it holds for zero-out
    neighbours, a record replaced by a null record with m unchanged, not for adding or removing one: the ledger
    entry says so and prints the replace-one epsilon of the same sigma): about half the noise.
    """
    n_blocks = int(feature_map.n_blocks)
    if n_blocks < 2:
        raise InvalidParameterError(f"a subsampled release draws one sample per block of the feature map; "
                                    f"{feature_map.spec()['name']} has {n_blocks}. Use release_mean_embedding.")
    q = check_probability(sample_rate, "sample_rate")
    conditional = y is not None
    check_embedding_args(conditional, n_classes, None)
    if isinstance(X, Source):
        raise InvalidParameterError("a subsampled release reads records in memory; pass arrays, or use "
                                    "release_mean_embedding (sample_rate=None) for shards.")

    def opening(plan, _):
        return Open(epsilon, delta, plan, options=dict(accountant=accountant, budget=budget, noise_seed=seed,
                                                       sampler_seed=sampler_seed, dataset=dataset,
                                                       privacy_unit=privacy_unit))
    return run_plan(X, _with_facts(lambda facts: sampled_embedding_part(
        feature_map, facts, opening, q=q, neighbouring=neighbouring, n_classes=n_classes if conditional else None,
        dataset=dataset, public_facts=public_facts)), y=y)


def sampled_embedding_part(feature_map: FeatureMap, facts, opening, *, q: float, neighbouring: str,
                           n_classes: int | None, dataset: str = "", public_facts: dict | None = None):
    """The subsampled release as a planner's part (:func:`release_sampled_embedding`, dp-randconv's fit): its plan
    (one Poisson-subsampled step at rate ``q`` per block, under ``neighbouring``) opened by ``opening(plan, None)``,
    then :func:`sampled_stages`. Returns the :class:`~mmdsynth.release.Release`."""
    engine = yield opening(PrivacyPlan((), q, int(feature_map.n_blocks), neighbouring), None)
    return (yield from sampled_stages(feature_map, facts, engine, n_cols=int(n_classes or 1), q=q,
                                      n_classes=n_classes, dataset=dataset, public_facts=public_facts))


def sampled_stages(feature_map: FeatureMap, facts, engine: PrivacyEngine, *, n_cols: int, q: float,
                   n_classes: int | None, dataset: str = "", public_facts: dict | None = None):
    """The stages of :func:`release_sampled_embedding` (a planner's part, run by
    :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run`): the declared steps, then one subsampled
    :class:`~mmdsynth.privacy.engine.Step` per block of ``feature_map`` (the engine draws the step's records, secret,
    and its noise; the records are checked at the first step, :class:`~mmdsynth.statistics.embedding.SampledBlockSums`:
    finite features, labels in 0..n_cols-1). Block t of the release is the noisy sum / (q m sqrt(n_blocks)). Returns
    the :class:`~mmdsynth.release.Release`."""
    m, conditional = facts.n_records, n_classes is not None     # m public (replace-one neighbours)
    n_blocks = int(feature_map.n_blocks)
    what = ("class-conditional mean embedding" if conditional else "mean embedding") + \
        f" under {feature_map.spec()['name']} features"
    public = {**public_assumptions(m, n_classes, public_facts), "clip": 1.0,
              "sensitivity": "a step's sum of sqrt(n_blocks) * block features, each of norm <= 1"}
    yield SubsampledSteps(clip=1.0, description=f"{what}, one block per Poisson-subsampled step ({n_blocks} steps at "
                                                f"rate {q:g}; stored as noisy sum / (q m sqrt(n_blocks)))",
                          assumed=public, n_records=m, mechanism="subsampled-gaussian")
    warn_delta_vs_n(engine.delta, m)
    scale = n_blocks ** 0.5
    chunk = feature_map.release_rows(math.ceil(q * m))     # a step draws about q m: one public shape for its chunks
    blocks = []
    for t in range(n_blocks):
        noisy = yield Step(m, SampledBlockSums(feature_map, t, n_cols, scale, chunk), 1.0)
        blocks.append(noisy.T / (q * m * scale))
    embedding = torch.cat(blocks, 0)
    tensors = {"embedding": embedding if conditional else embedding[:, 0].contiguous()}
    engine.charge(f"{what} ({n_blocks} subsampled steps)")
    out = {"name": engine.dataset or dataset, "n_records": m, "n_classes": n_classes, "conditional": conditional,
           "sample_rate": q}
    out.update(public_facts or {})
    logger.info("released %s by %d subsampled steps: sigma=%.4g", what, n_blocks, engine.sigma)
    return Release(tensors, feature_map.spec(), out, engine.ledger, {})
