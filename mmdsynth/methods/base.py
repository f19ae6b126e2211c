"""Release-once-train-anywhere methods: fit / sample / save / load.

``fit`` does two things in order: (1) privatise the mean embedding of the
private data under the method's feature map, with the DP early-stopping proxy when
``early_stopping`` is on, all in one plan (the only step that reads private data, via
:func:`mmdsynth.embedding.release_mean_embedding`), saving the release first when an
output folder is given; (2) train a generator against the release (post-processing),
selecting the checkpoint closest to the proxy. A fitted model folder holds::

    release/            release.json + release.safetensors (noisy embedding(s), proxy, ledger)
    checkpoint.*        training state (resume without spending budget)
    model.json          method, settings, generator spec, training summary, selection scores
    generator.safetensors        the generator `sample` uses (the selected checkpoint)
    generator_final.safetensors  with early stopping: the last checkpoint
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from safetensors.torch import load_file, save_file

from .._io import check_file_digest, read_sealed_json, sealed, sha256_file
from .._legacy import current_tag
from .._version import __version__
from .. import choice
from ..data.encoding import TableEncoder
from ..data.numeric_sketch import DEFAULT_SHARE as DEFAULT_SKETCH_SHARE
from ..data.private_schema import SchemaInference
from ..data.schema import Schema
from ..data.shards import ShardedTable
from ..embedding import check_embedding_args, embedding_stages, mean_embedding_part, release_plan
from ..errors import ArtifactError, InvalidParameterError, unknown_name
from ..features.base import FeatureMap, build_feature_map
from ..generators import GENERATORS, build_generator, default_generator_spec
from ..privacy.budget import BudgetFile
from ..privacy.calibration import ACCOUNTANTS
from ..privacy.engine import Facts, run_plan
from ..privacy.ledger import PRIVACY_UNIT
from ..release import META_FILE, Release, check_release_pin, release_pin
from ..training import (PRECISIONS, Selection, TrainConfig, checkpoint_generator_spec, checkpoint_iteration, default_device,
                        has_checkpoint, loss_trend, step_dtype, train_generator)
from ..validation import check_delta, check_epsilon, check_positive
from .contract import METHODS, Method, as_schema, epsilon_required, register  # noqa: F401  (re-exported)
from .tables import check_shares, encoder_of, reserved_delta, table_shares, table_stages

logger = logging.getLogger(__name__)

MODEL_META = "model.json"
GENERATOR_FILE = "generator.safetensors"
FINAL_GENERATOR_FILE = "generator_final.safetensors"   # with DP early stopping: the last checkpoint
STAGING = ".staging"       # where a save writes before moving its files into place


#: a table generator's time per training step on 2 cores (benchmarks/log/2026-12-04.md#plan-outline: DP-MERF's table
#: default, 2,000 steps, took 18-41 s on the suite's 2,500-4,300-record tables, one thread)
GENERATOR_STEP_SECONDS = 0.011


class KernelGeneratorMethod(Method):
    """Shared machinery of the release-once methods (DP-NTK, DP-MERF, DP-HP, DP-MEPF, DP-RandConv): they differ
    in the feature map and their own parameters.

    The parameters every one of them takes: ``epsilon`` (required for images; tables: 1.0) and ``delta``;
    ``n_classes`` (public; a table's comes from its schema); the generator's training, ``iterations``,
    ``batch_size`` (images 5,000, tables 200), Adam ``lr`` decayed by ``lr_decay`` every ``lr_step``
    iterations (images 1,500, tables 100), ``generator`` ("auto" or a spec) and ``code_dim``, ``conditional``;
    the training step's ``precision`` ("float32", "bfloat16" autocast, or "auto": bfloat16 where the device computes it
    in hardware; training only, never the release);
    the run, ``seed`` (public randomness: the generator's), ``noise_seed`` (the privacy noise: tests only,
    the ledger says it voids the guarantee), ``accountant``, ``device``, ``checkpoint_every`` and ``progress``
    (None: a bar when stderr is a terminal or in a notebook). A parameter left as None takes the default for
    the kind of data ``fit`` receives (:attr:`kind_defaults`); ``settings_`` holds what the fit used.
    Methods that take tables add :class:`~mmdsynth.methods.tables.TableOptions`; DP-MEPF adds its loss and DP
    early stopping. Options of the shared code that a method does not take keep the values in
    ``_shared_defaults`` (read as attributes; not parameters).
    """

    method = ""
    #: the values of the per-kind parameters (None in the signature): images (MNIST-sized: the DP-NTK authors'
    #: batch and schedule; no default privacy level) and user tables (``fit --csv``: the privacy level, and a
    #: batch and schedule sized for thousands of rows)
    kind_defaults = {"image": {"batch_size": 5000, "lr_step": 1500, "precision": "float32"},
                     "table": {"epsilon": 1.0, "batch_size": 200, "lr_step": 100, "precision": "float32"}}

    #: the options of the shared code that not every method exposes, at the values it uses for a method that does
    #: not: DP-MEPF's generator loss ("direct": ||mu_P - mu_Q||^2, or the moving average "mavg" learned at
    #: mavg_lr), the generator's Adam beta1, DP early stopping (a proxy released with proxy_multiplier times the
    #: noise, checkpoints scored against it), and the table options (TableOptions). A method that takes one
    #: declares it in its own signature; read as attributes either way (``model.loss``)
    _shared_defaults = {"loss": "direct", "mavg_lr": 1e-3, "beta1": 0.9, "blocks_per_step": None,
                        "early_stopping": False, "proxy_encoder": None, "proxy_multiplier": 10.0, "select_every": None,
                        "select_samples": 2000,
                        "proportions_share": 0.1, "schema_share": None, "numeric_encoding": "quantile",
                        "numeric_share": DEFAULT_SKETCH_SHARE}
    param_help = {
        "lr_decay": "the learning rate is multiplied by this every lr_step iterations",
        "generator": 'the generator: "auto" (the method\'s choice for the data) or a spec, e.g. {"name": "conv"}',
        "conditional": "one class-conditional generator (true) or one generator of inputs for all classes (false)",
        "accountant": 'how the plan is accounted: "pld" (privacy loss distributions), "rdp" (looser) or "exact"',
        "precision": 'the generator\'s training step: "float32", "bfloat16" autocast (faster on CPUs with bfloat16 '
                     'instructions and on GPUs), or "auto" (bfloat16 where the device computes it in hardware, else '
                     'float32); the release is always computed in full precision',
    }
    param_choices = {"accountant": ACCOUNTANTS, "precision": PRECISIONS}

    def __init__(self, epsilon: float | None = None, delta: float | None = None, *, n_classes: int | None = None,
                 iterations: int = 2000, batch_size: int | None = None, lr: float = 0.01, lr_decay: float = 0.9,
                 lr_step: int | None = None, generator: str | dict = "auto", conditional: bool = True, seed: int = 0,
                 noise_seed: int | None = None, accountant: str = "pld", device: str | None = None,
                 checkpoint_every: int = 200, progress: bool | None = None, code_dim: int | None = None,
                 precision: str | None = None):
        self.epsilon, self.delta, self.n_classes = epsilon, delta, n_classes
        self.iterations, self.batch_size, self.lr, self.lr_decay, self.lr_step = (
            iterations, batch_size, lr, lr_decay, lr_step)
        self.generator, self.conditional, self.seed, self.noise_seed = generator, conditional, seed, noise_seed
        self.accountant, self.device, self.checkpoint_every, self.progress = (
            accountant, device, checkpoint_every, progress)
        self.code_dim, self.precision = code_dim, precision

    # -- hooks ---------------------------------------------------------------------------
    def feature_map(self, input_dim: int, n_classes: int) -> FeatureMap:
        raise NotImplementedError

    def image_feature_map(self, shape: tuple, n_classes: int) -> FeatureMap:
        """The map for array records of ``shape`` (images (c, h, w) or flat (d,))."""
        return self.feature_map(int(np.prod(shape)), n_classes)

    def table_feature_map(self, encoder: TableEncoder, n_classes: int) -> FeatureMap:
        return self.feature_map(encoder.dim, n_classes)

    def block_multipliers(self) -> dict[str, float]:
        """The feature map's released blocks and their relative noise multipliers
        (:meth:`FeatureMap.noise_multipliers`), known before any data: plans that must be calibrated
        before the map can be built (private schema inference) use them."""
        return {"embedding": 1.0}

    def default_proxy_encoder(self) -> str | None:
        """The PUBLIC network whose pooled features make the early-stopping proxy when
        ``proxy_encoder`` is not given (DP-MEPF: its own encoder; others: none)."""
        return None

    def proxy_map(self, shape) -> FeatureMap | None:
        """DP early stopping's proxy features (:class:`~mmdsynth.features.PooledFeatures` of a public
        encoder), or None without early stopping."""
        if not self._s.early_stopping:
            return None
        from ..features.perceptual import PooledFeatures

        encoder = self._s.proxy_encoder or self.default_proxy_encoder()
        if encoder is None:
            raise InvalidParameterError(
                "early_stopping=True needs a PUBLIC network for its proxy: pass proxy_encoder=PATH (an encoder "
                "from `mmdsynth pretrain-encoder` on a public dataset)."
            )
        return PooledFeatures(encoder, shape)

    #: the data are read once (sums released), so a fit can stream shards and resume from the release alone
    releases_once = True
    takes_shards = True
    person_level = True
    #: the output is a generator (sample any n), not a fixed set
    generative = True

    def fit_summary(self, dataset: str, out) -> list[str]:
        """What `mmdsynth fit` prints when this model is fitted."""
        from ..training import describe_trend

        eps, delta = self.release_.ledger.total()
        lines = [f"fitted {self.method} on {dataset}: epsilon={eps:g}, delta={delta:g}; {len(self.losses_)} "
                 f"iterations{self._steps_note()}, final loss {self.losses_[-1]:.4g}; saved to {out}",
                 describe_trend(self.loss_trend_).replace("more iterations", "a larger --iterations with --resume")]
        if getattr(self, "selection_", None):
            sel = self.selection_
            lines.append(f"DP early stopping: iteration {sel['best_iteration']} has the lowest proxy distance of "
                         f"{len(sel['scores'])} scored; `sample` uses it (--checkpoint final: the last one)")
        return lines

    def _steps_note(self) -> str:
        """The training step's arithmetic, when the device chose it (``precision="auto"``)."""
        dtype = getattr(self, "step_dtype_", None)
        if self._s.precision != "auto" or dtype is None:
            return ""
        why = "this device computes bfloat16 in hardware" if dtype == "bfloat16" else "no bfloat16 hardware here"
        return f" in {dtype} (precision auto: {why})"

    # -- parameters ----------------------------------------------------------------------
    def fit_params(self) -> dict:
        """The settings saved with the release (the per-kind ones resolved), so that ``mmdsynth fit --resume --out
        DIR`` can rebuild the model from the folder alone (public: chosen before any data was read)."""
        return {k: v for k, v in self._s.to_dict().items() if k not in ("device", "progress")}

    def train_config(self) -> TrainConfig:
        # by name: every TrainConfig field is a same-named setting (an option the method does not take: the
        # class attribute, e.g. loss="direct")
        return TrainConfig(**{f.name: getattr(self._s, f.name) for f in fields(TrainConfig)}).validate()

    def configured(self, kind: str):
        """This method's settings resolved and checked for data of ``kind`` (``settings_``), nothing read or
        released: the configuration another method's plan composes (the hybrid's kernel part). Returns self."""
        self._resolve(kind)
        self._validate()
        return self

    def _resolve(self, kind: str, **learned) -> None:
        """``settings_``: the parameters as a fit on data of ``kind`` uses them (:meth:`settings_for`), with
        ``learned`` public facts (a table's n_classes from its schema). The constructor's attributes stay as
        given."""
        self.defaults_for(kind)                       # refuses a kind the method does not take, naming it
        settings = self.settings_for(kind, require_epsilon=False)
        for k, v in learned.items():
            setattr(settings, k, v)
        if settings.epsilon is None:
            raise epsilon_required(kind)
        self.settings_ = settings

    def _validate(self) -> None:
        check_epsilon(self._s.epsilon)
        check_delta(self._s.delta)
        shares = {"proportions_share": self._s.proportions_share, "schema_share": self._s.schema_share,
                  "numeric_share": self._s.numeric_share if self._s.numeric_encoding == "quantile" else None}
        check_shares(**shares)
        if sum(float(v or 0) for v in shares.values()) >= 1:
            raise InvalidParameterError(
                f"the shares {', '.join(f'{k}={v}' for k, v in shares.items() if v)} add up to 1 or more, leaving "
                f"nothing for the embedding; lower them (e.g. 0.1 each).")
        self.train_config()
        if self._s.early_stopping:
            check_positive(self._s.proxy_multiplier, "proxy_multiplier")
            check_positive(self._s.select_samples, "select_samples", integer=True)
            if self._s.select_every is not None:
                check_positive(self._s.select_every, "select_every", integer=True)
        if self._s.conditional and (self._s.n_classes is None or int(self._s.n_classes) < 2):
            raise InvalidParameterError(
                f"n_classes must be given for a class-conditional model (public metadata, >= 2); got "
                f"{self._s.n_classes!r}. It is never read from the private labels. Pass n_classes=10 for "
                f"MNIST, or conditional=False for an unconditional generator."
            )

    # -- fit ------------------------------------------------------------------------------
    def fit(self, X, y=None, *, label: str | None = None, schema=None, dataset: str = "", out=None,
            budget: BudgetFile | None = None, resume: bool = False, public_facts: dict | None = None,
            privacy_unit: str = PRIVACY_UNIT, train: bool = True):
        """Release the private embedding (once), then train the generator (``train=False``: stop after the release,
        which ``out`` keeps for :func:`~mmdsynth.methods.distill.distill_release` or a later ``resume=True``).
        Returns self.

        Images/arrays: ``fit(X, y)`` with ``n_classes`` given. Tables: ``fit(df, label="income",
        schema=...)`` with a :class:`~mmdsynth.data.Schema` (or a path to its JSON) declaring
        bounds and categories; the class proportions are released too (``proportions_share``
        of the privacy) and generated labels follow them. Data in many files: a
        :class:`~mmdsynth.data.ShardedTable` (its schema and label inside) or
        :class:`~mmdsynth.data.ShardedArrays`, read in bounded memory and summed on its engine
        (streamed, or on Ray); see :meth:`release`.

        ``out``: a folder; the release is saved there before training, with checkpoints.
        ``resume=True`` with a folder that already holds a release reuses it and the last
        checkpoint: no private data is read and no budget is spent. ``public_facts`` are stored
        in the release (e.g. the preset and split seed a benchmark table came from).
        ``privacy_unit`` says what one record of ``X`` is, for the ledger (presets pass theirs:
        the guarantee covers their preprocessed training split).
        """
        out = Path(out) if out is not None else None
        has_release = out is not None and (out / "release" / META_FILE).exists()
        if has_release and not resume:
            raise ArtifactError(
                f"{out} already holds a release; fitting again would spend privacy budget a second "
                f"time. Pass resume=True to continue training from it, or a new folder."
            )
        if resume and not has_release:
            raise ArtifactError(f"nothing to resume: {out} holds no release. Run without resume first.")
        if has_release:
            self.release_ = Release.load(out / "release")
            logger.info("resume: reusing the release in %s (no privacy spent)", out / "release")
            facts, learned = self.release_.dataset, {}
            if self.n_classes is None:
                learned["n_classes"] = facts.get("n_classes")
            if self.epsilon is None:                 # nothing is released again: the release's own privacy level
                learned["epsilon"] = self.release_.ledger.total()[0]
            if self.delta is None:
                learned["delta"] = self.release_.ledger.total()[1]
            self._resolve("table" if facts.get("table") else "image", **learned)
            self._learn(out, resume, train)
            return self
        self._fit_run(X, y, label, schema, dataset, budget, public_facts, privacy_unit, out, train)
        return self

    def release(self, X, y=None, *, label: str | None = None, schema=None, dataset: str = "",
                budget: BudgetFile | None = None, public_facts: dict | None = None,
                privacy_unit: str = PRIVACY_UNIT) -> Release:
        """Step 1 of :meth:`fit` alone: the one private release (all of its plan), without training; kept as
        ``release_`` (so :meth:`distill` can use it) and returned.
        ``X`` as for :meth:`fit`, or a :class:`~mmdsynth.data.ShardedTable` / :class:`~mmdsynth.data.ShardedArrays`
        (summed on its engine: streamed, or on Ray)."""
        self._fit_run(X, y, label, schema, dataset, budget, public_facts, privacy_unit, None, False)
        return self.release_

    def _fit_run(self, X, y, label, schema, dataset: str, budget, public_facts, privacy_unit: str, out,
                 train: bool) -> None:
        """A fresh fit's one run (:func:`~mmdsynth.privacy.engine.run_plan`): the input's form checked here (its
        type, a table's columns and, under a complete schema, every row once, before anything is charged), then the
        rows handed to the run, whose planner is the rest of the fit: the plan from public facts, the release, and
        what is learned from it (:meth:`_released`: saved in ``out``, the generator trained unless ``train`` is
        False)."""
        if not _is_table(X):
            self._public_facts, self._privacy_unit = dict(public_facts or {}), privacy_unit
            self._resolve("image")
            run_plan(X, self._array_fit(dataset, budget, (out, train)), y=y if self._s.conditional else None)
            return
        self._resolve("table")                        # first: a method that takes no tables says so
        self._check_table_settings()
        self._run_table(X, label, schema, dataset=dataset, out=out, budget=budget, public_facts=public_facts,
                        privacy_unit=privacy_unit, train=train)

    def _check_table_settings(self) -> None:
        """The settings a table fit refuses before anything is read."""
        if not self._s.conditional:
            raise InvalidParameterError("tables are modelled class-conditionally: use conditional=True.")
        if self._s.early_stopping:
            raise InvalidParameterError("DP early stopping scores image generators (its proxy is a public image "
                                        "network's features); for tables use early_stopping=False.")

    def table_planner(self, schema: Schema, *, dataset: str = "", out=None, budget: BudgetFile | None = None,
                      public_facts: dict | None = None, privacy_unit: str = PRIVACY_UNIT, facts=None,
                      train: bool = True):
        """A table fit's planner, for :func:`~mmdsynth.privacy.engine.run_plan` on the table's rows (the method
        contract's: :func:`mmdsynth.fit` runs it after choosing the method from the rows' public ``facts``, which it
        then passes here): every refusal its settings and the schema can give is made here, before a row is read;
        the release saved in ``out`` and the generator trained from it (``train`` False: the release alone)."""
        out = Path(out) if out is not None else None
        if out is not None and (out / "release" / META_FILE).exists():
            raise ArtifactError(f"{out} already holds a release; fitting again would spend privacy budget a second "
                                f"time. Pass resume=True to continue training from it, or a new folder.")
        self._public_facts = dict(public_facts or {})
        self._resolve("table")
        self._check_table_settings()
        self._privacy_unit = self._unit(schema, privacy_unit)   # one person, when the schema names a person column
        return self._table_fit(schema, dataset, budget, (out, train), facts)

    def _learn(self, out: Path | None, resume: bool, train: bool) -> None:
        """What a fit learns once its release is made (post-processing): the release saved in ``out`` before
        training (it holds the budget), the generator trained unless ``train`` is False, the model saved."""
        self._validate()
        if not train:
            return
        self._train(out, resume)
        if out is not None:
            self.save(out)

    def _released(self, release: Release, then) -> Release:
        """The run's release kept (``release_``), saved in the folder ``out`` when given and learned from
        (``then``: (out, train), :meth:`_learn`)."""
        self.release_ = release
        out, train = then
        if out is not None:
            release.save(out / "release")
        self._learn(out, False, train)
        return release

    def _array_fit(self, dataset: str, budget, then):
        """The planner of a fit on array records (run by :func:`~mmdsynth.privacy.engine.run_plan`): the records'
        public facts, the plan of the mean embedding (and the early-stopping proxy), the release, then
        :meth:`_released`."""
        facts = yield Facts()
        self._settle_delta(facts.n_records)         # the count: rows, or the shards' declared count
        self._validate()
        shape = facts.record_shape                  # public: each record's shape
        if len(shape) not in (1, 3):
            raise InvalidParameterError(
                f"X must hold images (n, channels, height, width) or flat records (n, d); got shape "
                f"{(facts.n_records, *shape)}."
            )
        if not facts.in_memory and self._s.conditional != facts.labelled:
            raise InvalidParameterError(
                f"the shards {'hold' if facts.labelled else 'hold no'} labels: use conditional={facts.labelled}"
                f"{'' if facts.labelled else ' (or shards with a y array)'}.")
        if self._s.conditional and not facts.labelled:
            raise InvalidParameterError("y is required for a class-conditional model (or conditional=False).")
        n_classes = int(self._s.n_classes) if self._s.conditional else 1
        fmap = self.image_feature_map(shape, n_classes)
        proxy = self.proxy_map(shape) if len(shape) == 3 else None
        if self._s.early_stopping and proxy is None:
            raise InvalidParameterError("DP early stopping scores image generators (its proxy is a public image "
                                        "network's features); these records are not images: early_stopping=False.")
        release = yield from self._array_release(
            fmap, facts, n_classes=n_classes if self._s.conditional else None, proxy=proxy, dataset=dataset,
            budget=budget, public_facts={"record_shape": list(shape), "method": self.method,
                                         "fit_params": self.fit_params(), **self._public_facts})
        return self._released(release, then)

    def _array_release(self, fmap: FeatureMap, facts, *, n_classes: int | None, proxy: FeatureMap | None,
                       dataset: str, budget, public_facts: dict):
        """The stages of the release of array records (a planner's part): the plan opened, then the one-shot mean
        embedding (:func:`~mmdsynth.embedding.embedding_stages`). A method with another release of the same statistic
        (dp-randconv's ``sample_rate``) overrides this."""
        conditional = n_classes is not None
        check_embedding_args(conditional, n_classes, None)
        return (yield from mean_embedding_part(
            fmap, facts, lambda plan, mults: self._opening(plan=plan, multipliers=mults, budget=budget,
                                                           dataset=dataset, privacy_unit=self._privacy_unit),
            proxy_multiplier=self._s.proxy_multiplier, conditional=conditional, n_classes=n_classes,
            public_facts=public_facts, proxy_map=proxy, dataset=dataset))

    def _table_plan(self, schema):
        """The plan of a table's releases and each one's noise multiplier (public: the schema and the settings):
        what the schema leaves to infer, the numeric columns' sketch, the rows per person under a unit, the class
        proportions and the embedding's blocks."""
        shares = table_shares(schema, schema_share=self._s.schema_share, numeric_encoding=self._s.numeric_encoding,
                              numeric_share=self._s.numeric_share)
        return release_plan(blocks=self.block_multipliers(),
                            shares={**shares, "class_proportions": self._s.proportions_share})

    def plan_outline(self, schema, facts):
        """The releases of a fit on a table of ``schema`` with ``facts`` (:class:`~mmdsynth.choice.PublicFacts`) and
        each one's share of the plan, with memory and time estimates: public facts only, nothing read."""
        from .outline import BASE_BYTES, PlanOutline, release_words, shares_of

        self._resolve("table")
        schema = as_schema(schema, getattr(schema, "label", None))
        self.settings_.n_classes = schema.n_classes
        self._settle_delta(facts.n_records)
        self._validate()
        _, mults = self._table_plan(schema)
        n, d = int(facts.n_records or 0), len(schema.columns)
        steps = int(self._s.iterations)
        memory = BASE_BYTES + 24 * n * (d + 1) + 8 * int(getattr(self._s, "n_features", 0) or 0) * \
            (schema.n_classes + int(self._s.batch_size))
        return PlanOutline(self.method, facts.records,
                           tuple((release_words(k), v) for k, v in sorted(shares_of(mults).items(),
                                                                          key=lambda kv: kv[0] == "embedding")),
                           int(memory), GENERATOR_STEP_SECONDS * steps + 2e-5 * n * d,
                           "Lower the generator's batch (batch_size=, --batch-size) or its features "
                           "(n_features=, --n-features).")

    def _table_fit(self, schema, dataset: str, budget, then, facts=None):
        """The planner of a fit on a table (run by :func:`~mmdsynth.privacy.engine.run_plan`): the table's public
        facts (its count: rows, declared, or persons), every release of the fit in one plan, calibrated before any
        row is read; the table's releases (schema, sketch, rows per person), then the embedding under the feature map
        built on their encoder; then :meth:`_released`."""
        facts = facts or (yield Facts())
        choice.check_enough(choice.PublicFacts(facts.n_records, schema.privacy_unit))
        self.settings_.n_classes = schema.n_classes  # public: the declared label categories
        self._settle_delta(facts.n_records)          # the public count: rows, declared, or persons
        self._validate()
        plan, mults = self._table_plan(schema)
        engine = yield self._opening(plan=plan, multipliers=mults, budget=budget, dataset=dataset,
                                     privacy_unit=self._privacy_unit,
                                     reserved_delta=reserved_delta(schema, self._s.delta),
                                     # a DataFrame under a complete schema: its rows checked once, after the
                                     # calibration (a schema still to complete: checked as its release reads them)
                                     check=None if SchemaInference.of(schema) else TableEncoder(schema))
        encoder, prior, table_facts = yield from table_stages(engine, facts, schema)
        release = yield from embedding_stages(
            self.table_feature_map(encoder, encoder.schema.n_classes), facts, engine, conditional=True,
            n_classes=encoder.schema.n_classes, encoder=encoder, dataset=dataset,
            proportions_share=self._s.proportions_share,
            public_facts={"record_shape": [encoder.dim], "method": self.method, "fit_params": self.fit_params(),
                          **table_facts, **self._public_facts},
            prior_tensors=prior)
        return self._released(release, then)

    @property
    def encoder_(self) -> TableEncoder | None:
        """The table encoder of the release (schema, column order, released CDFs); None for images."""
        return encoder_of(self.release_) if hasattr(self, "release_") else None

    @property
    def proportions_(self) -> torch.Tensor | None:
        """Released class proportions, floored at 1e-3 and renormalised (post-processing)."""
        p = self.release_.tensors.get("class_proportions") if hasattr(self, "release_") else None
        if p is None:
            return None
        p = p.double().clamp(min=1e-3)
        return p / p.sum()

    def _generator_spec(self) -> dict:
        shape = self.release_.dataset["record_shape"]
        n_classes = int(self.release_.dataset["n_classes"] or 1)
        code = {"code_dim": self._s.code_dim} if self._s.code_dim else {}
        encoder = self.encoder_
        if encoder is not None:
            return {"name": "table", "n_numeric": encoder.n_numeric, "category_sizes": encoder.category_sizes,
                    "n_classes": n_classes, **code}
        if self._s.generator == "auto":
            return {**default_generator_spec(shape, n_classes), **code}
        if isinstance(self._s.generator, str):
            return {"name": self._s.generator, "image_shape": shape, "n_classes": n_classes}
        return {"image_shape": shape, "n_classes": n_classes, **self._s.generator}

    def _train(self, out: Path | None, resume: bool) -> None:
        for c in self.noisy_classes():
            logger.warning("class %r: released count %.4g is within the noise (std %.4g records); its share of the "
                           "synthetic rows follows the noise. Training weights each class by its released "
                           "proportion squared, so it cannot dominate.", c["class"], c["released_count"],
                           c["noise_std"])
        spec = self._generator_spec()
        done = checkpoint_iteration(out) if resume and has_checkpoint(out) else None
        if done is not None and done > self._s.iterations:
            raise InvalidParameterError(
                f"iterations={self._s.iterations} is fewer than the {done} the checkpoint in {out} already trained; "
                f"resuming would do nothing. Give iterations > {done} to train longer (no privacy is spent), or "
                f"use the model as it is.")
        saved = resume and has_checkpoint(out)
        if saved:
            # continue the generator the checkpoint holds, even if this version's defaults differ;
            # a checkpoint without a spec predates the options in the class's LEGACY_SPEC
            legacy = getattr(GENERATORS.get(spec["name"]), "LEGACY_SPEC", {})
            spec = checkpoint_generator_spec(out) or {k: v for k, v in spec.items() if k not in legacy}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self._s.seed)
            self.generator_ = build_generator(spec, saved=saved)
        fmap = build_feature_map(self.release_.feature_spec)
        selection = self._selection()
        self.losses_ = train_generator(
            self.generator_, fmap, self.release_.tensors["embedding"], self.train_config(),
            conditional=self._s.conditional, label_proportions=self.proportions_, checkpoint_dir=out,
            resume=resume and has_checkpoint(out), device=self._s.device, selection=selection,
        )
        self.loss_trend_ = loss_trend(self.losses_)
        self.step_dtype_ = step_dtype(self._s.precision, default_device(self._s.device))
        self.generator_.cpu().eval()
        self.selection_ = selection.to_dict() if selection is not None else None
        if selection is not None and selection.best_state is not None:
            self.final_generator_ = self.generator_
            self.generator_ = build_generator(self.final_generator_.spec())
            self.generator_.load_state_dict(selection.best_state)
            self.generator_.eval()

    def noisy_classes(self) -> list[dict]:
        """Classes whose released count is within two noise standard deviations of zero (post-processing
        of the release: its class proportions and their ledger entry). Their synthetic share follows the
        noise; training weights each class by its proportion squared, so they cannot dominate the loss."""
        p = self.release_.tensors.get("class_proportions") if hasattr(self, "release_") else None
        entry = next((e for e in self.release_.ledger.entries if e.description.startswith("class proportions")),
                     None) if p is not None else None
        if entry is None:
            return []
        m = int(self.release_.dataset["n_records"])
        std = entry.noise_std * m
        encoder = self.encoder_
        names = encoder.schema.label_categories if encoder is not None else [str(c) for c in range(len(p))]
        return [{"class": str(names[c]), "released_count": round(float(p[c]) * m, 2), "noise_std": round(std, 2)}
                for c in range(len(p)) if float(p[c]) * m < 2 * std]

    def _selection(self) -> Selection | None:
        """Checkpoint selection against the release's early-stopping proxy, if it holds one."""
        proxy = self.release_.tensors.get("proxy")
        if proxy is None:
            return None
        every = self._s.select_every or max(1, self._s.iterations // 20)
        return Selection(build_feature_map(self.release_.extra["proxy_spec"]), proxy, every, self._s.select_samples,
                         seed=self._s.seed)

    # -- sample ---------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "generator_"):
            raise InvalidParameterError(f"this {type(self).__name__} is not fitted; call fit() or mmdsynth.load().")

    def sample(self, n: int, *, labels=None, seed: int | None = None, batch_size: int = 10000,
               checkpoint: str = "selected"):
        """``n`` synthetic records. Images/arrays: numpy ``(X, y)`` with labels balanced over
        classes (each class n // C or n // C + 1 times, shuffled) unless given. Tables: a
        DataFrame with the original columns and dtypes, labels drawn from the released
        class proportions.

        ``checkpoint``: with DP early stopping, ``"selected"`` (default) samples the checkpoint
        with the lowest proxy distance, ``"final"`` the last one; without it both are the last."""
        self._check_fitted()
        n = int(check_positive(n, "n", integer=True))
        if checkpoint not in ("selected", "final"):
            raise InvalidParameterError(f"checkpoint must be 'selected' or 'final'; got {checkpoint!r}.")
        gen = getattr(self, "final_generator_", self.generator_) if checkpoint == "final" else self.generator_
        seed = seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        rng = torch.Generator().manual_seed(seed)
        encoder = self.encoder_
        if labels is None and encoder is not None:
            labels = gen.draw_labels(n, rng, self.proportions_)
        elif labels is None:
            labels = (torch.arange(n) % gen.n_classes)[torch.randperm(n, generator=rng)]
        else:
            labels = torch.as_tensor(np.asarray(labels), dtype=torch.long)
            if labels.shape != (n,) or labels.min() < 0 or labels.max() >= gen.n_classes:
                raise InvalidParameterError(f"labels must be {n} integers in 0..{gen.n_classes - 1}.")
        dev = default_device(self.device)
        gen.to(dev).eval()
        with torch.no_grad():
            xs = [gen.generate(lb, rng).cpu() for lb in labels.split(batch_size)]
        gen.cpu()
        x = torch.cat(xs).numpy()
        if encoder is not None:
            return encoder.decode(x, labels.numpy(), rng=np.random.default_rng(seed))
        return x, (labels.numpy() if self._s.conditional else None)

    def distill(self, per_class: int, **kwargs):
        """``per_class`` records per class learned to match this model's release (post-processing: no private
        data, no budget; the set carries the release's ledger). ``kwargs``: those of
        :func:`~mmdsynth.methods.distill.distill_release` (``iterations``, ``lr``, ``seed``, ``device``)."""
        from .distill import distill_release

        if not hasattr(self, "release_"):
            raise InvalidParameterError(f"this {type(self).__name__} holds no release yet; call fit() or release() "
                                        f"first, or mmdsynth.load() a fitted folder.")
        return distill_release(self.release_, per_class, **kwargs)

    # -- persistence ------------------------------------------------------------------------
    def save(self, directory) -> Path:
        """Write the release (if not there yet), generator weights and model.json."""
        self._check_fitted()

        def weights(folder: Path) -> None:
            gens = {GENERATOR_FILE: self.generator_}
            if hasattr(self, "final_generator_"):
                gens[FINAL_GENERATOR_FILE] = self.final_generator_
            for name, gen in gens.items():
                save_file({k: v.detach().cpu().contiguous() for k, v in gen.state_dict().items()}, str(folder / name))
        return write_model_folder(directory, self, {
            "generator_spec": self.generator_.spec(), "final_loss": self.losses_[-1] if self.losses_ else None,
            "iterations_done": len(self.losses_), "selection": getattr(self, "selection_", None),
            "loss_trend": getattr(self, "loss_trend_", None)}, payload=weights)

    @classmethod
    def _from_folder(cls, directory: Path, meta: dict):
        model = read_model_folder(cls, directory, meta)
        model.generator_ = build_generator(meta["generator_spec"], saved=True)
        model.generator_.load_state_dict(load_file(str(directory / GENERATOR_FILE)))
        model.generator_.eval()
        files = meta.get("files")          # None: written before model.json listed its files
        if FINAL_GENERATOR_FILE in files if files is not None else (directory / FINAL_GENERATOR_FILE).exists():
            model.final_generator_ = build_generator(meta["generator_spec"], saved=True)
            model.final_generator_.load_state_dict(load_file(str(directory / FINAL_GENERATOR_FILE)))
            model.final_generator_.eval()
        model.selection_ = meta.get("selection")
        model.losses_ = [meta["final_loss"]] if meta.get("final_loss") is not None else []
        model.loss_trend_ = meta.get("loss_trend")
        return model


def write_model_folder(directory, model, meta: dict, payload=None) -> Path:
    """A fitted model folder, for every method: the release (if not there yet), then the files
    ``payload(folder)`` writes (e.g. generator weights), then ``model.json`` (method, params,
    ``meta``, the sha256 of every payload file and of itself), written last because its presence
    marks the folder complete.

    Crash safety: the payload and model.json are written to a staging folder first (a full disk
    or any error there leaves the previous model untouched, and the staging folder is removed),
    then moved into place, model.json last. A kill between those moves leaves files that do not
    match the model.json beside them: :func:`load` refuses that folder, naming the file, and
    ``fit(..., resume=True)`` rewrites it from the checkpoint without spending privacy."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "release" / META_FILE).exists():
        model.release_.save(directory / "release")
    staging = directory / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        if payload is not None:
            payload(staging)
        files = {f.name: sha256_file(f) for f in sorted(staging.iterdir())}
        # params: the constructor's, as given (None: the default for the data's kind), so that load() rebuilds the
        # same object; settings: as the fit used them (per-kind defaults resolved), so model.json says what ran
        settings = {"settings": model.settings_.to_dict()} if hasattr(model, "settings_") else {}
        meta = sealed({"format": "mmdsynth-model", "library_version": __version__, "method": model.method,
                       "params": model.get_params(), **settings, **meta, "files": files,
                       "release": release_pin(directory / "release")})
        (staging / MODEL_META).write_text(json.dumps(meta, indent=2))
        for name in files:
            os.replace(staging / name, directory / name)
        os.replace(staging / MODEL_META, directory / MODEL_META)
        if FINAL_GENERATOR_FILE not in files:      # the previous model may have had one; this one has not
            (directory / FINAL_GENERATOR_FILE).unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def read_model_folder(cls, directory: Path, meta: dict):
    """The method object rebuilt from ``model.json``'s params (those of a 0.1 file that the method no longer takes:
    :meth:`~mmdsynth.methods.contract.Method.known_params`), with its release loaded and its settings resolved for
    the release's kind of data."""
    where = f"{directory / MODEL_META}"
    model = cls(**cls.known_params(meta["params"], where))
    model.release_ = Release.load(directory / "release")
    kind = "table" if model.release_.dataset.get("table") else "image"
    model.settings_ = model.settings_for(kind, require_epsilon=False)
    for k, v in cls.known_params(meta.get("settings") or {}, where).items():   # as the fit used them
        setattr(model.settings_, k, v)
    return model


def _is_table(X) -> bool:
    return isinstance(X, (pd.DataFrame, ShardedTable))


def load(directory):
    """Load a fitted model folder written by ``fit(out=...)``, ``save`` or ``mmdsynth fit``."""
    directory = Path(directory)
    path = directory / MODEL_META
    if not path.exists():
        hint = " It holds a release but no trained generator: fit again with resume=True (no privacy spent)." \
            if (directory / "release" / META_FILE).exists() else ""
        raise ArtifactError(f"no fitted model in {directory}: {MODEL_META} is missing.{hint}")
    meta = read_sealed_json(path, "model")
    for name, digest in meta.get("files", {}).items():
        check_file_digest(directory / name, digest, f"model in {directory} (fit again with resume=True to "
                                                     f"rewrite it without spending privacy)")
    if current_tag(meta.get("format"), path) != "mmdsynth-model":
        raise ArtifactError(f"{path} is not an mmdsynth model (format={meta.get('format')!r}).")
    if meta.get("method") not in METHODS:
        raise unknown_name("method", str(meta.get("method")), METHODS)
    check_release_pin(directory / "release", meta.get("release"), f"model in {directory}")
    return METHODS[meta["method"]]._from_folder(directory, meta)
