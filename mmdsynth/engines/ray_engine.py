"""Sums over shards on Ray: one task per shard, reduced once per shard on the driver.

Each task reads its shard, runs the statistic over its batches and returns ``(shard id, partial
sums, row count)``; it never sees noise (noise is drawn on the driver after the reduce, by the
caller). The driver keeps one result per shard id: a retried task (Ray re-runs a task whose
worker died, ``max_retries``) yields one result like any other, and a shard id that came back
twice is an error, never a second count. Workers use a GPU when the cluster has one.

Ray is an extra: ``pip install 'mmdsynth[ray]'``.
"""
from __future__ import annotations

import logging
import resource

from ..errors import DataValidationError, MmdsynthError, InvalidParameterError
from . import Engine, Source, shard_partial

#: how often Ray re-runs a shard whose worker process died before giving up
MAX_RETRIES = 3


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise InvalidParameterError("engine='ray' needs Ray: pip install 'mmdsynth[ray]'.") from exc
    return ray


def _run_shard(source: Source, i: int, statistic, use_gpu: bool):
    """The task body: shard ``i``'s partial sums, on the worker's GPU when it was given one."""
    if use_gpu and hasattr(statistic, "to"):
        statistic = statistic.to("cuda")
    part, rows = shard_partial(source, i, statistic)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return i, _cpu(part), rows, peak_mib


def _cpu(part):
    if isinstance(part, dict):
        return {k: _cpu(v) for k, v in part.items()}
    return part.cpu() if hasattr(part, "cpu") else part


class RayEngine(Engine):
    """``address``: a running cluster ("auto", "ray://host:10001", ...); None starts a local one with
    ``workers`` CPUs (default: all). Each shard task takes one CPU (and one GPU when the cluster has
    GPUs)."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None):
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise InvalidParameterError(f"ray workers must be an integer >= 1; got {workers!r}.")
        if address is not None and workers is not None:
            raise InvalidParameterError("ray workers sets the size of a LOCAL cluster; a cluster at an address has "
                                        "its own workers: pass one of address / workers.")
        self.address, self.workers = address, workers
        self.last_run: dict = {}

    def _init(self):
        ray = _ray()
        if not ray.is_initialized():
            kwargs = {"address": self.address} if self.address else {"num_cpus": self.workers}
            ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING, **kwargs)
        return ray

    def partials(self, source, statistic):
        ray = self._init()
        resources = ray.cluster_resources()
        use_gpu = resources.get("GPU", 0) >= 1
        task = ray.remote(num_cpus=1, num_gpus=1 if use_gpu else 0, max_retries=MAX_RETRIES,
                          retry_exceptions=False)(_run_shard)
        source_ref, stat_ref = ray.put(source), ray.put(statistic)
        pending = {task.remote(source_ref, i, stat_ref, use_gpu): i for i in range(source.n_shards)}
        results, peaks = {}, []
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                ref = done[0]
                shard = pending.pop(ref)
                try:
                    i, part, rows, peak = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if isinstance(getattr(exc, "cause", None), Exception) else exc
                    if isinstance(cause, MmdsynthError):
                        raise type(cause)(f"{cause} (shard {source.shard_name(shard)}; nothing was released)") from None
                    raise DataValidationError(f"reading shard {source.shard_name(shard)} failed on a Ray worker: "
                                              f"{cause}; nothing was released.") from None
                except ray.exceptions.RayError as exc:      # the worker died MAX_RETRIES + 1 times, ...
                    raise DataValidationError(
                        f"the Ray task for shard {source.shard_name(shard)} failed {MAX_RETRIES + 1} times "
                        f"({type(exc).__name__}); nothing was released. Check the workers' memory and logs.") from None
                if i != shard or i in results:
                    raise RuntimeError(f"shard {i} came back twice or under another id; nothing was released.")
                results[i] = (part, rows)
                peaks.append(peak)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
        self.last_run = {"shards": source.n_shards, "workers": int(resources.get("CPU", 0)),
                         "gpu": use_gpu, "peak_worker_rss_mib": round(max(peaks), 1) if peaks else None}
        return results
