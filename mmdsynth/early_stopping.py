"""DP early stopping (DP-MEPF Sec. 3.2): a private proxy of sample quality, and checkpoint scoring.

Generated-sample quality can get worse with long training against a fixed noisy embedding
(it overfits the noise). Choosing the checkpoint with the best FID would read the private data
again, so the data's proxy embedding, the mean of [phi1 | phi2] (each block unit norm) of a PUBLIC
network's pooled features, is released once, with more noise (DP-MEPF: 10x the embedding's sigma),
in the same privacy plan as the embedding. Checkpoints are scored by their squared distance to it
(post-processing: no private data, no budget).

:func:`release_proxy` is data-touching function #3 of the design: small, named and tested on
worst-case neighbours. It takes a noise multiplier that was calibrated for the whole plan before
any private record was read.
"""
from __future__ import annotations

import torch

from .engines import as_source
from .features.base import FeatureMap
from .statistics.embedding import ClassSums
from .privacy.engine import GaussianRelease, PrivacyEngine, Sums


def proxy_stages(proxy_map: FeatureMap, m: int, batch_size: int | None = None, *,
                 description: str = "DP early-stopping proxy", assumed: dict | None = None):
    """The stage of the proxy's release (a planner's part, run by :meth:`~mmdsynth.privacy.engine.PrivacyEngine.run`):
    the noisy proxy embedding (P,) of the ``m`` (public) private records, the plan's ``"proxy"`` release. Returns it.

    The proxy is ``(1/m) sum_i phi(x_i)`` over all records (unconditional) with every record's row
    bounded block by block (:meth:`FeatureMap.bounded`), so replacing one record moves it by at most
    ``2 * proxy_map.norm_bound / m`` (m is public): that is the sensitivity the engine noises it at.
    """
    rows = batch_size or proxy_map.release_rows(m)
    noisy, = yield Sums(ClassSums(proxy_map, None, batch_size=rows, validate=False), (GaussianRelease(
        "proxy", 2.0 * proxy_map.norm_bound / m, description,
        assumed or {"m": m, "sensitivity": "2 * feature_norm_bound / m"}, lambda t: t["sums"][0] / m),))
    return noisy


def release_proxy(proxy_map: FeatureMap, X, engine: PrivacyEngine, batch_size: int | None = None, *,
                  description: str = "DP early-stopping proxy", assumed: dict | None = None) -> torch.Tensor:
    """The noisy proxy embedding (P,) of the private records ``X`` (an array, or a
    :class:`~mmdsynth.engines.Source` of shards, summed on its engine), released by ``engine`` as the
    plan's ``"proxy"`` release: :func:`proxy_stages` run alone."""
    source = as_source(X)
    return engine.run(source, proxy_stages(proxy_map, source.n_records, batch_size, description=description,
                                           assumed=assumed))


@torch.no_grad()
def proxy_distance(proxy_map: FeatureMap, target: torch.Tensor, generator, n: int, rng: torch.Generator,
                   batch_size: int = 500) -> float:
    """||target - (1/n) sum_i phi(g(z_i, y_i))||^2 for ``n`` generated samples with labels balanced
    over the generator's classes (post-processing of the released proxy ``target``)."""
    was_training = generator.training
    generator.eval()
    labels = torch.arange(n) % generator.n_classes
    acc = torch.zeros_like(target, dtype=torch.float64)
    for chunk in labels.split(batch_size):
        acc += proxy_map(generator.generate(chunk, rng)).double().sum(0).to(acc.device)
    generator.train(was_training)
    return float(((target.to(acc.device, torch.float64) - acc / n) ** 2).sum())
