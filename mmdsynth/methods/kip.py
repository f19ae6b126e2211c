"""DP-KIP (Vinaroz & Park 2023): a small support set learned by DP-SGD on the KRR loss under the
infinite-width NTK. The support set itself is the (epsilon, delta)-DP output.

``fit`` validates, calibrates sigma for the whole schedule (epochs -> T Poisson-sampled steps at
q = batch_size / N) with the PLD accountant, checks and charges the budget, draws the support
set from public noise N(0, I) with fixed balanced labels (or, with ``start``, from a set distilled from a
release of a share of the same plan), and only then reads private records, through the steps of
:func:`mmdsynth.privacy.dpsgd.gradient_stages` alone, all in one run (:func:`~mmdsynth.privacy.engine.run_plan`:
the engine binds each step's statistic to the records; the planner holds none). State is checkpointed after every
step (support set, Adam, step; the noise and the Poisson sample are fresh from the OS CSPRNG
every step, so there is no generator state to keep unless a testing-only seed fixed them), so an
interrupted run resumes where it stopped without re-spending budget; the checkpoint holds
private state (the support set after private steps) and is deleted when training ends.

Which records a step reads is as secret as the noise (:class:`~mmdsynth.privacy.sampling.PoissonSampler`):
``seed`` fixes public things only (the N(0, I) start); ``sampler_seed`` and ``noise_seed`` exist for
tests, the CLI never sets them, and the ledger says they void the guarantee. Neighbours are
replace-one (N public) as for every other release; ``neighbouring="add_remove"`` is the paper's accounting, which
holds here for zero-out neighbours only (a record replaced by a null record, N public: the clipped sum is divided
by the public expected batch q N), and its ledger entry says so beside the replace-one epsilon of the same sigma.
The result is saved as a release: ``support_x``, ``support_y``,
the kernel spec and the DP-SGD ledger entry.

Inputs are mapped to the kernel's space by a fixed, data-independent affine map: images in
[0, 1] and encoded tables (numbers in [0, 1], one-hot blocks) by x -> (x - 0.5) / 0.5.
"""
from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from .. import choice
from .._io import load_checkpoint, remove_checkpoint, restore_optimizer, save_checkpoint
from ..data.encoding import TableEncoder, check_table_input
from ..data.numeric_sketch import DEFAULT_SHARE as DEFAULT_SKETCH_SHARE
from ..embedding import embedding_stages
from ..errors import ArtifactError, InvalidParameterError
from ..features import FeatureMap, PixelFeatures, RandomConvFeatures
from ..privacy.dpsgd import gradient_stages
from ..kip.kernels import FCReLUKernel
from ..kip.krr import centred_one_hot, krr_accuracy, to_kernel_space
from ..privacy.budget import BudgetFile
from ..privacy.calibration import PrivacyPlan
from ..privacy.engine import Facts, Open, PrivacyEngine, SubsampledSteps, Sums, run_plan
from ..privacy.ledger import PRIVACY_UNIT, Ledger, LedgerEntry
from ..release import META_FILE, Release
from ..statistics.gradients import KernelRecords
from ..validation import check_delta, check_epsilon, check_positive
from .base import as_schema, read_model_folder, write_model_folder
from . import presets
from .contract import Method, epsilon_required, register
from .distill import distill_release
from .tables import (NUMERIC_ENCODINGS, check_shares, encoder_from, encoder_of, reserved_delta, table_shares,
                     table_stages)
from ..runtime import default_device, progress_rate

logger = logging.getLogger(__name__)

CKPT_TENSORS, CKPT_META = "kip_checkpoint.safetensors", "kip_checkpoint.json"
#: where the support set starts: public noise, or distilled from a release of a share of the plan
STARTS = ("noise", "pixels", "random-conv")
DEFAULT_START = "pixels"              # measured: MNIST eps 1 KRR 84.4 against 73.9 from noise (benchmarks/RESULTS.md)
START_RELEASE = "embedding"           # the start's release in the plan (embedding_stages' block name)
START_ITERATIONS, START_NETWORKS = 500, 8


def from_kernel_space(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 + 0.5


@register
class DPKIP(Method):
    """Private data distillation: ``images_per_class`` learned points per class.

    Parameters follow the paper's Tables 5/6 names: ``epochs``, ``batch_size`` (the expected
    Poisson batch, q = batch_size / N), ``lr`` (Adam, or ``optimizer="sgd"``), ``clip`` (C),
    ``reg`` (lambda), kernel ``depth``/``W_std``/``b_std``. ``seed`` fixes the support set's
    public initialisation only. ``noise_seed`` fixes the privacy noise and ``sampler_seed`` the
    Poisson sample (testing only, each on its own: the ledger records that they void the
    guarantee). ``neighbouring``: ``"replace_one"`` (default, N public, like every release) or
    ``"add_remove"`` (the paper's accounting; with N public and the sum divided by q N it holds for zero-out
    neighbours, and the ledger entry prints the replace-one epsilon of the same sigma beside it). Tables share the other methods' preparation
    (:mod:`mmdsynth.methods.tables`): ``schema_share`` releases the bounds / categories a schema leaves
    out, ``numeric_encoding="quantile"`` the numeric columns' CDFs (``numeric_share``), both in the
    same plan as the DP-SGD steps; the default ``"minmax"`` scales by the declared bounds.

    ``start``: where the support set starts. ``"noise"``: N(0, I) from ``seed`` (the paper's), or ``public_init``.
    ``"pixels"`` (the default, None, without ``public_init``) / ``"random-conv"``: ``images_per_class`` records
    per class distilled
    (:func:`~mmdsynth.methods.distill.distill_release`) from the class-conditional mean embedding of the private
    records under :class:`~mmdsynth.features.PixelFeatures` (each class's mean record) or 8 random ConvNets
    (images only), released once with ``start_share`` of the plan (1/sqrt(start_share) times the steps' noise
    multiplier, calibrated with them, one charge) before the first step.
    """

    method = "dp-kip"
    person_level = True            # DP-SGD over persons: a step samples persons and averages each one's rows
    summary = "a small support set learned by DP-SGD under the NTK (DP-KIP distillation)"
    param_help = {
        "optimizer": '"adam" or "sgd" for the support set',
        "depth": "hidden layers of the NTK's fully connected network",
        "W_std": "the NTK's weight standard deviation",
        "b_std": "the NTK's bias standard deviation",
        "dtype": '"float32" or "float64" for the kernel computations',
        "neighbouring": '"replace_one" or "add_remove" (the paper\'s; zero-out neighbours)',
        "accountant": 'how the DP-SGD steps are accounted: "pld" (privacy loss distributions) or "rdp" (looser)',
    }
    param_choices = {"optimizer": ("adam", "sgd"), "dtype": ("float32", "float64"),
                     "neighbouring": ("replace_one", "add_remove"), "accountant": ("pld", "rdp"),
                     "start": STARTS, "numeric_encoding": NUMERIC_ENCODINGS}
    #: the per-kind parameters (None in the signature): images, no default privacy level and the expected batch
    #: 500; user tables, the privacy level of every table default and a batch below a few thousand rows
    kind_defaults = {"image": {"batch_size": 500}, "table": {"epsilon": 1.0, "batch_size": 200}}

    def __init__(self, epsilon: float | None = None, delta: float | None = None, *, n_classes: int | None = None,
                 images_per_class: int = 10, epochs: int = 10, batch_size: int | None = None, lr: float = 1e-2,
                 clip: float = 1e-6, reg: float = 1e-6, optimizer: str = "adam", depth: int = 1,
                 W_std: float = math.sqrt(2.0), b_std: float = 0.1, seed: int | None = None,
                 noise_seed: int | None = None, sampler_seed: int | None = None,
                 neighbouring: str = "replace_one", accountant: str = "pld", progress: bool | None = None,
                 dtype: str = "float32", device: str | None = "cpu", schema_share: float | None = None,
                 numeric_encoding: str = "minmax", numeric_share: float = DEFAULT_SKETCH_SHARE,
                 start: str | None = None, start_share: float = 0.1):
        self.start, self.start_share = start, start_share
        self.epsilon, self.delta, self.n_classes, self.images_per_class = epsilon, delta, n_classes, images_per_class
        self.epochs, self.batch_size, self.lr, self.clip, self.reg = epochs, batch_size, lr, clip, reg
        self.optimizer, self.depth, self.W_std, self.b_std = optimizer, depth, W_std, b_std
        self.seed, self.noise_seed, self.accountant, self.progress, self.dtype = (
            seed, noise_seed, accountant, progress, dtype)
        self.device, self.sampler_seed, self.neighbouring = device, sampler_seed, neighbouring
        self.schema_share, self.numeric_encoding, self.numeric_share = schema_share, numeric_encoding, numeric_share

    #: DP-SGD reads the records at every step: no shards, no resume without the data
    releases_once = False
    #: the output is the support set itself, not a generator
    generative = False

    def fit_summary(self, dataset: str, out) -> list[str]:
        """What `mmdsynth fit` prints when this model is fitted."""
        eps, delta = self.release_.ledger.total()
        steps = self.release_.ledger.entries[-1].plan.get("steps")
        return [f"fitted {self.method} on {dataset}: epsilon={eps:g}, delta={delta:g}; {len(self.support()[0])} "
                f"support points, {steps} DP-SGD steps; saved to {out}"]

    @classmethod
    def dataset_defaults(cls, dataset: str, kind: str) -> dict:
        return presets.dpkip_table(dataset) if kind == "table" else {}

    @property
    def kernel(self) -> FCReLUKernel:
        return FCReLUKernel(self._s.depth, self._s.W_std, self._s.b_std)

    @property
    def private(self) -> bool:
        """False for ``epsilon=math.inf``: the non-private KIP baseline (no noise; benchmark only)."""
        return self._s.epsilon != math.inf

    def _validate(self, n_records: int) -> None:
        if self.private:
            check_epsilon(self._s.epsilon)
        check_delta(self._s.delta)
        for name in ("images_per_class", "epochs", "batch_size"):
            check_positive(getattr(self._s, name), name, integer=True)
        for name in ("lr", "clip", "reg"):
            check_positive(getattr(self._s, name), name)
        check_shares(schema_share=self._s.schema_share, numeric_share=self._s.numeric_share,
                     start_share=self._s.start_share if self._s.start not in (None, "noise") else None)
        try:
            dev = torch.device(self._s.device)
        except (RuntimeError, TypeError) as exc:
            raise InvalidParameterError(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {self._s.device!r}.") from exc
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise InvalidParameterError(f"device={self._s.device!r} but no CUDA GPU is visible; use device='cpu'.")
        if self._s.n_classes is None or int(self._s.n_classes) < 2:
            raise InvalidParameterError(
                f"n_classes must be given (public metadata, >= 2); got {self._s.n_classes!r}. It is never read "
                f"from the private labels: pass n_classes=10 for MNIST.")
        if self._s.batch_size >= n_records:
            raise InvalidParameterError(
                f"batch_size={self._s.batch_size} must be smaller than the number of records ({n_records}): "
                f"it is the expected Poisson batch, q = batch_size / N < 1.")

    def _public_start(self, public_init, shape) -> torch.Tensor | None:
        """The user's public starting support set in kernel space, checked (None: N(0, I))."""
        if public_init is None:
            return None
        m = int(self._s.images_per_class) * int(self._s.n_classes)
        x = np.asarray(public_init, dtype=np.float32)
        if x.shape[0] != m or int(np.prod(x.shape[1:])) != int(np.prod(shape)):
            raise InvalidParameterError(
                f"public_init must hold images_per_class * n_classes = {m} records of shape {list(shape)}, "
                f"ordered class by class; got shape {list(x.shape)}.")
        if not np.isfinite(x).all():
            raise InvalidParameterError("public_init holds non-finite values.")
        return to_kernel_space(torch.as_tensor(x)).to(getattr(torch, self._s.dtype))

    def _start_words(self, public_init) -> str:
        if self._s.start != "noise":
            return (f"{self._s.images_per_class} records per class distilled from the class-conditional mean embedding "
                    f"under {self._s.start} features, released with {self._s.start_share:g} of the plan")
        return "N(0, I) noise" if public_init is None else "a public set given by the user"

    def _start_map(self, shape) -> FeatureMap:
        """The feature map of the start's release (public: from the record shape and ``seed``)."""
        if self._s.start == "pixels":
            return PixelFeatures(int(np.prod(shape)))
        return RandomConvFeatures(shape, n_networks=START_NETWORKS, seed=self._s.seed or 0)   # images: checked in fit

    def _start_parts(self, shape, table_state) -> tuple:
        """What the start's release is built from, all public: (feature map, table encoder or None, the
        release's public facts, the tensors it carries beside the embedding: a table's schema / sketch
        releases, which its encoder is rebuilt from)."""
        encoder, prior, facts = table_state or (None, {}, {})
        return (self._start_map(shape), encoder, {**facts, "record_shape": list(shape), "method": self.method},
                dict(prior))

    def _distil_start(self, release: Release, encoder, iterations: int) -> torch.Tensor:
        """``images_per_class`` records per class distilled from the start's release, in kernel space, class by
        class (:func:`~mmdsynth.methods.distill.distill_release`: post-processing)."""
        small = distill_release(release, int(self._s.images_per_class), iterations=iterations, seed=self._s.seed or 0,
                                device=self._s.device, smooth=False)   # random ConvNets: 2 a step, the maps' default;
        # unblurred, as the start was measured (distillation's colour default was measured on its own sets)
        if encoder is not None:                # distilled rows: their generated IDs are not checked as real ones
            encoder = TableEncoder(encoder.schema, encoder.columns, encoder.numeric_maps, check_ids=False)
        x = encoder.encode(small.x)[0] if encoder is not None else small.x
        return to_kernel_space(torch.as_tensor(np.asarray(x, dtype=np.float32))).to(getattr(torch, self._s.dtype))

    def _rehearse_start(self, parts, engine: PrivacyEngine, n_records: int, dataset: str) -> None:
        """Run the start's post-processing once on a public placeholder release (a zero embedding with the real
        release's spec, facts and carried tensors), before the charge: whatever would fail after the release
        (rebuilding a table's encoder from the release, distillation's checks, encoding the distilled rows) fails
        here, with nothing read from the private data and nothing charged (issue 45, item 5)."""
        fmap, encoder, facts, prior = parts
        engine.multiplier(START_RELEASE)                 # the start's release is in the plan
        n_classes = int(self._s.n_classes)
        placeholder = Release({"embedding": torch.zeros(fmap.out_dim, n_classes, dtype=torch.float64), **prior},
                              fmap.spec(), {"name": dataset, "n_records": n_records, "n_classes": n_classes,
                                            "conditional": True, **facts}, Ledger())
        self._distil_start(placeholder, encoder, iterations=1)

    def _private_start(self, engine: PrivacyEngine, records_facts, parts, dataset: str):
        """The stages of the support set's start from the plan's ``start_share`` (a planner's part): one Gaussian
        release of the private records' class-conditional mean embedding under :meth:`_start_map`
        (:func:`~mmdsynth.embedding.embedding_stages`, the release every kernel method makes; a table's release
        carries the schema / sketch tensors its encoder is rebuilt from) read from the run's records, then
        ``images_per_class`` records per class distilled from it (:meth:`_distil_start`). Returns them."""
        fmap, encoder, facts, prior = parts
        release = yield from embedding_stages(fmap, records_facts, engine, conditional=True,
                                              n_classes=int(self._s.n_classes),
                                              dataset=dataset, encoder=encoder, public_facts=facts,
                                              prior_tensors=prior)
        return self._distil_start(release, encoder, START_ITERATIONS)

    def plan(self, n_records: int, shares: dict | None = None) -> tuple[PrivacyPlan, dict]:
        """The DP-SGD schedule, ceil(epochs * N / batch_size) steps at q = batch_size / N, after the
        one-shot releases a table needs (``shares``: name -> share; each at 1/sqrt(share) times the
        steps' noise multiplier), all in one plan; and the one-shot releases' multipliers by name."""
        steps = math.ceil(self._s.epochs * n_records / self._s.batch_size)
        mults = {k: 1 / float(v) ** 0.5 for k, v in (shares or {}).items()}
        return PrivacyPlan(tuple(mults.values()), sample_rate=self._s.batch_size / n_records, steps=steps,
                           neighbouring=self._s.neighbouring), mults

    # -- fit ------------------------------------------------------------------------------
    def _support_release(self, state: "_KIPState", shape, dataset: str, n_records: int, public_facts) -> Release:
        """The trained support set as the release (a table's schema / sketch tensors beside it), with its public
        facts (the records' ``shape``; a table's: its encoder's width)."""
        encoder, prior, table_facts = state.table or (None, {}, {})
        facts = {"name": dataset, "n_records": n_records, "n_classes": int(self._s.n_classes), "conditional": True,
                 "record_shape": [encoder.dim] if encoder is not None else shape, "method": self.method,
                 **table_facts, **(public_facts or {})}
        return Release({"support_x": state.x.detach().double().cpu(), "support_y": state.labels, **prior},
                       self.kernel.spec(), facts, state.engine.ledger,
                       extra={"kernel_input": "(x - 0.5) / 0.5", "reg": self._s.reg})

    def _fit_settings(self, kind: str, checkpoint: Path | None):
        """The settings of this fit: per-kind defaults for the data's kind (the constructor's attributes stay as
        given), the device (the CLI's default: a GPU when one is visible); resuming, the interrupted run's settings,
        calibration and ledger entry from its ``checkpoint`` folder, whatever was passed now. Returns the
        checkpoint's state (None for a fresh run)."""
        s = self.settings_ = self.settings_for(kind, require_epsilon=False)
        if s.device is None:
            s.device = str(default_device())
        state = None
        if checkpoint is not None:
            state = _KIPState.load(checkpoint, s.device)
            for k, v in self.known_params(state.model_params, f"the checkpoint in {checkpoint}").items():
                if k not in ("progress", "device"):
                    setattr(s, k, v)
        if s.epsilon is None:
            raise epsilon_required(kind)
        return state

    def _choose_start(self, public_init, image_shape, shares: dict) -> None:
        """The support set's start settled and checked before calibration and the charge (the default: the private
        pixels start, or the public set when one is given); a private start's share joins ``shares``.
        ``image_shape``: the records' shape (None for table rows)."""
        s = self._s
        if s.start is None:
            s.start = "noise" if public_init is not None else DEFAULT_START
        if s.start == "noise":
            return
        if public_init is not None:
            raise InvalidParameterError(
                f"public_init and start={s.start!r} both give the starting support set: pass start='noise' "
                f"with a public set (it then replaces the noise), or leave public_init out.")
        if s.start == "random-conv" and (image_shape is None or len(image_shape) != 3):
            raise InvalidParameterError(
                f"start='random-conv' takes images (channels, height, width); the records are "
                f"{'table rows' if image_shape is None else f'of shape {list(image_shape)}'}: use start='pixels'.")
        shares[START_RELEASE] = s.start_share

    def _dpsgd_assumptions(self, n_records: int, persons: bool) -> dict:
        """What the DP-SGD steps' ledger entry assumes (the neighbour relation's sensitivity, the sampling, persons)."""
        s = self._s
        return {"N": int(n_records), "n_classes": int(s.n_classes), "clip": float(s.clip),
                "sensitivity": "clip: every record's clipped gradient has norm <= clip, so replacing one "
                               "moves the sum by <= 2 clip (the accountant's replace-one relation: "
                               "mixtures at +-clip)" if s.neighbouring == "replace_one" else
                               "clip: one record zeroed out (replaced by a null record that adds "
                               "nothing) moves the sum by <= clip; the sum is divided by the public q N, "
                               "so the add/remove accounting holds for zero-out neighbours only, not for "
                               "adding or removing a record",
                "sampling": "Poisson, rate batch_size / N, secret; divided by the expected batch q N",
                **({"persons": "N counts persons; a step samples persons and reads all their rows, each "
                               "row's clipped gradient weighted by 1 / its person's rows, so one person "
                               "adds at most C"} if persons else {})}

    def fit(self, X, y=None, *, label: str | None = None, schema=None, dataset: str = "", out=None,
            budget: BudgetFile | None = None, resume: bool = False, public_facts: dict | None = None,
            privacy_unit: str = PRIVACY_UNIT, public_init=None):
        """Learn the support set with DP-SGD. Images/arrays: ``fit(X, y)`` with ``n_classes``;
        tables: ``fit(df, label=..., schema=...)``. ``out``: folder for checkpoints and the
        result; ``resume=True`` continues an interrupted run there (its calibration and ledger
        are reused; nothing is charged again). ``public_init``: a PUBLIC starting support set
        (images_per_class * n_classes records in the data's scale, ordered class by class)
        instead of N(0, I) noise; it is not charged, so it must not come from the private data.
        Returns self."""
        out = Path(out) if out is not None else None
        ckpt = _checkpointed(out, resume)
        table = isinstance(X, pd.DataFrame)
        state = self._fit_settings("table" if table else "image", out if ckpt else None)
        given = as_schema(schema, label) if table else None
        if table:
            check_table_input(X, given)                   # the columns by name; the rows are the run's to read
        run_plan(X, self._run(state, given, dataset=dataset, out=out, budget=budget, public_facts=public_facts,
                              privacy_unit=privacy_unit, public_init=public_init), y=None if table else y, schema=given)
        return self

    def _run(self, state, schema, *, dataset: str, out: Path | None, budget, public_facts, privacy_unit: str,
             public_init):
        """The fit's planner (run by :func:`~mmdsynth.privacy.engine.run_plan`): the records' public facts (N: the
        rows, or the persons; an image's shape), the plan (a table's releases, the private start, the DP-SGD steps),
        the engine opened (or, resuming, the interrupted run's restored from its checkpoint), a fresh run's start,
        then every DP-SGD step, each a :class:`~mmdsynth.privacy.engine.Step` whose statistic the engine binds to the
        records; then the support set as the release. The planner holds no record."""
        facts = yield Facts()
        n_records, table, shares = facts.n_records, schema is not None, {}
        if table:
            choice.check_enough(choice.PublicFacts(n_records, schema.privacy_unit))
            privacy_unit = self._unit(schema, privacy_unit)     # one person, when the schema names a person column
            self._s.n_classes = schema.n_classes
            shares = table_shares(schema, schema_share=self._s.schema_share, numeric_encoding=self._s.numeric_encoding,
                                  numeric_share=self._s.numeric_share)
            shape = None                                        # a table's: its encoder's width, once prepared
        else:
            shape = list(facts.record_shape)
        self._settle_delta(n_records)                     # public: the rows, or the persons
        self._validate(n_records)
        self._choose_start(public_init, shape, shares)
        plan, mults = self.plan(n_records, shares)
        if state is not None:
            _check_resumed(state.entry, out, n_records, plan, privacy_unit if table else None)
            yield Open(state.engine.epsilon, state.engine.delta, engine=state.engine)
        else:
            # the whole plan (a table's releases, then the DP-SGD steps) calibrated and the budget checked by the
            # engine before any row is read; epsilon = inf: the non-private baseline, no noise
            engine = yield self._opening(plan=plan, multipliers=mults, budget=budget, dataset=dataset,
                                         privacy_unit=privacy_unit, sampler_seed=self._s.sampler_seed,
                                         private=self.private,
                                         reserved_delta=reserved_delta(schema, self._s.delta) if table else 0.0)
            state = yield from self._start_stages(engine, facts, schema, plan, dataset=dataset, shape=shape,
                                                  public_init=public_init)
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                state.save(out)
        records = KernelRecords(state.table[0] if state.table is not None else None, int(self._s.n_classes),
                                self._s.device)
        yield from self._train(state, records, plan, out, n_records)
        self.release_ = self._support_release(state, shape, dataset, n_records, public_facts)
        if out is not None:
            self.save(out)
            remove_checkpoint(out / CKPT_TENSORS, out / CKPT_META)   # the sampler state must not outlive training
        return self

    def _start_stages(self, engine: PrivacyEngine, facts, schema, plan: PrivacyPlan, *, dataset: str, shape,
                      public_init):
        """The stages of a fresh run's start: a table's releases, every check that can fail (the records read and
        checked once, summing nothing), the charge, the private start's release (when there is one) and the DP-SGD
        steps declared. Returns the run's state."""
        s, table, n_records = self._s, shape is None, facts.n_records
        table_state = (yield from table_stages(engine, facts, schema)) if table else None   # private releases
        if table:
            shape = [table_state[0].dim]
        description = (f"DP-KIP support set ({self._s.images_per_class} per class) by DP-SGD on the KRR loss: "
                       f"{plan.describe()}, clip {self._s.clip:g}; start: {self._start_words(public_init)}")
        # every check that can fail runs before the charge (issue 45, item 5): the public start's shape, the
        # records' input domain, and the private start's post-processing rehearsed on a placeholder
        start_x = self._public_start(public_init, shape) if self._s.start == "noise" else None
        yield Sums(KernelRecords(table_state[0] if table else None, int(self._s.n_classes), self._s.device), ())
        if self._s.start != "noise":
            parts = self._start_parts(shape, table_state)
            self._rehearse_start(parts, engine, n_records, dataset)
            engine.charge(description)          # the whole plan, before the start's release reads a record
            start_x = yield from self._private_start(engine, facts, parts, dataset)
        entry = yield SubsampledSteps(
            clip=self._s.clip, n_records=n_records, description=description,
            assumed=self._dpsgd_assumptions(n_records, facts.persons),
            notes=("an interrupted run's checkpoint (kip_checkpoint.*) holds private state (the support set "
                   "after private steps) until it is resumed and finishes; delete it or resume it, never "
                   "publish it",))
        state = _KIPState.start(s, shape, engine, start_x, table_state)
        engine.charge(entry.description)
        return state

    def _train(self, state: "_KIPState", records: KernelRecords, plan: PrivacyPlan, out: Path | None, n: int):
        """The DP-SGD steps (a planner's part): each a :func:`~mmdsynth.privacy.dpsgd.gradient_stages` step over the
        run's ``n`` public records (or persons, when a person is the unit: each step samples persons and reads every
        row of each one, weighted by 1 / their rows), then Adam; the state saved to ``out`` after each."""
        kernel = self.kernel
        y_s = centred_one_hot(state.labels, int(self._s.n_classes), state.x.dtype).to(state.x.device)
        bar = tqdm(total=plan.steps, initial=state.step, disable=not self._s.progress, desc="DP-KIP", unit="step",
                   **progress_rate())
        observe = getattr(self, "_observer", None)     # the audit's attacker: sees every iterate
        if observe is not None:
            observe(state.x.detach().clone())
        while state.step < plan.steps:
            g = yield from gradient_stages(kernel, state.x, y_s, records=records, n=n, reg=self._s.reg,
                                           clip=self._s.clip, private=state.engine.private,
                                           expected_batch=plan.sample_rate * n)
            state.optimizer.zero_grad(set_to_none=True)
            state.x.grad = g
            state.optimizer.step()
            state.step += 1
            if observe is not None:
                observe(state.x.detach().clone())
            bar.update(1)
            if out is not None:
                state.save(out)
        bar.close()

    # -- outputs --------------------------------------------------------------------------
    def _check_fitted(self):
        if not hasattr(self, "release_"):
            raise InvalidParameterError("this DPKIP is not fitted; call fit() or mmdsynth.load().")

    @property
    def encoder_(self) -> TableEncoder | None:
        """The table encoder of the release (schema, column order, released CDFs); None for images."""
        return encoder_of(self.release_) if hasattr(self, "release_") else None

    def support(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The support set in the kernel's space (float64) and its integer labels."""
        self._check_fitted()
        return self.release_.tensors["support_x"], self.release_.tensors["support_y"].long()

    def sample(self, n: int | None = None, *, seed: int | None = None, **_):
        """The support set (post-processing of the DP output): images as numpy ``(X, y)`` in
        the data's scale (not clipped), tables as a DataFrame decoded like the generators'.
        ``n`` must be None or the support size: a support set is not a generator."""
        x, y = self.support()
        if n is not None and int(n) != x.shape[0]:
            logger.warning("DP-KIP returns its %d support points, not %d samples", x.shape[0], n)
        data = from_kernel_space(x).numpy()
        encoder = self.encoder_
        if encoder is not None:
            return encoder.decode(data, y.numpy(), categorical="argmax", rng=np.random.default_rng(seed))
        shape = self.release_.dataset["record_shape"]
        return data.reshape(-1, *shape).astype(np.float32), y.numpy()

    def krr_accuracy(self, x_test, y_test) -> float:
        """Accuracy of KRR with the same kernel, support set as training data, on (x_test, y_test)
        given in the data's scale ([0, 1])."""
        xs, ys = self.support()
        x_t = to_kernel_space(torch.as_tensor(np.asarray(x_test, dtype=np.float32))).double()
        return krr_accuracy(self.kernel, xs, centred_one_hot(ys, int(self._s.n_classes), torch.float64), x_t,
                            torch.as_tensor(np.asarray(y_test)).long(), self._s.reg)

    # -- persistence ---------------------------------------------------------------------------
    def save(self, directory) -> Path:
        self._check_fitted()
        return write_model_folder(directory, self, {})

    @classmethod
    def _from_folder(cls, directory: Path, meta: dict):
        return read_model_folder(cls, directory, meta)


class _KIPState:
    """Support set, optimiser, step, the privacy engine (noise, sampler, ledger) and a table's prepared
    encoder: everything a resume needs."""

    def __init__(self, x: torch.Tensor, labels: torch.Tensor, model, engine: PrivacyEngine, table=None):
        self.x = x.to(model.device).requires_grad_(True)
        self.labels = labels
        self.engine = engine
        self.table = table                 # (encoder, released tensors, public facts) of a table, or None
        self.step = 0
        cls = torch.optim.Adam if model.optimizer == "adam" else torch.optim.SGD   # model: the fit's Settings
        self.optimizer = cls([self.x], lr=model.lr)

    @property
    def entry(self) -> LedgerEntry:
        """The DP-SGD entry (declared after a table's releases, so the last)."""
        return self.engine.entries[-1]

    @classmethod
    def start(cls, model, shape, engine: PrivacyEngine, public_x: torch.Tensor | None = None,
              table=None) -> "_KIPState":
        """Public initialisation: N(0, I) support inputs (or the user's public set), balanced fixed
        labels. ``seed`` fixes only this public start; the sampler and the noise are secret."""
        seed = model.seed if model.seed is not None else int.from_bytes(os.urandom(7), "little")
        g = torch.Generator().manual_seed(seed)
        m = int(model.images_per_class) * int(model.n_classes)
        dtype = getattr(torch, model.dtype)
        x = torch.randn(m, int(np.prod(shape)), generator=g, dtype=dtype) if public_x is None else public_x.clone()
        labels = torch.arange(m) // int(model.images_per_class)
        state = cls(x, labels, model, engine, table)
        state.model_params = model.to_dict()
        return state

    def save(self, directory: Path) -> None:
        tensors = {"x": self.x.detach().cpu().contiguous(), "labels": self.labels}
        sampler, noise = self.engine.sampler.get_state(), self.engine.noise.generator
        if sampler is not None:                 # a testing-only sampler; the secure one has no state
            tensors["sampler"] = sampler
        if noise is not None:
            tensors["noise_rng"] = noise.get_state()
        meta = {"step": self.step, "entries": self.engine.ledger.to_list(), "params": self.model_params}
        if self.table is not None:
            _, prior, facts = self.table
            tensors.update({f"table/{k}": v.contiguous() for k, v in prior.items()})
            meta["table_facts"] = facts
        save_checkpoint(directory / CKPT_TENSORS, directory / CKPT_META, tensors, meta, self.optimizer)

    @classmethod
    def load(cls, directory: Path, device: str = "cpu") -> "_KIPState":
        t, meta = load_checkpoint(directory / CKPT_TENSORS, directory / CKPT_META, "DP-KIP")
        meta["params"].setdefault("neighbouring", "add_remove")     # checkpoints written before replace-one
        meta["params"].setdefault("start", "noise")                 # checkpoints written before the private starts
        model = DPKIP(**{**DPKIP.known_params(meta["params"], f"the checkpoint in {directory}"), "device": device})
        model = model.settings_for("image", require_epsilon=False)
        entries = [LedgerEntry.from_dict(e) for e in meta.get("entries", [meta.get("entry")])]
        engine = PrivacyEngine.resume(entries, noise_seed=model.noise_seed, sampler_seed=model.sampler_seed)
        table = None
        if "table_facts" in meta:           # the table's releases were made before the first step: reuse them
            prior = {k[len("table/"):]: v for k, v in t.items() if k.startswith("table/")}
            facts = meta["table_facts"]
            table = (encoder_from(facts, prior), prior, facts)
        state = cls(t["x"].clone(), t["labels"], model, engine, table)
        state.model_params = meta["params"]
        engine.sampler.set_state(t.get("sampler"))
        if "noise_rng" in t and engine.noise.generator is not None:
            engine.noise.generator.set_state(t["noise_rng"])
        restore_optimizer(state.optimizer, t, meta)
        state.step = int(meta["step"])
        return state


def _checkpointed(out: Path | None, resume: bool) -> bool:
    """Whether ``out`` holds an interrupted DP-KIP run to resume (refused: a finished run there, a checkpoint without
    ``resume``, ``resume`` without a checkpoint)."""
    if out is not None and (out / "release" / META_FILE).exists():
        raise ArtifactError(f"{out} already holds a finished DP-KIP support set; use a new folder.")
    ckpt = out is not None and (out / CKPT_META).exists()
    if ckpt and not resume:
        raise ArtifactError(f"{out} holds an interrupted DP-KIP run: pass resume=True to "
                            f"continue it, or use a new folder.")
    if resume and not ckpt:
        raise ArtifactError(f"nothing to resume: {out} holds no DP-KIP checkpoint.")
    return ckpt


def _check_resumed(entry, out: Path, n_records: int, plan: PrivacyPlan, privacy_unit: str | None) -> None:
    """A checkpoint is resumed with the data it was calibrated for: the same count and plan (and, for a table, the
    same privacy unit)."""
    if entry.n_records != n_records or entry.plan != plan.to_dict():
        raise ArtifactError(f"the checkpoint in {out} was calibrated for {entry.n_records} records and plan "
                            f"{entry.plan}; the data given now has {n_records} records. Resume with the "
                            f"same data.")
    if privacy_unit is not None and entry.privacy_unit != privacy_unit:
        raise ArtifactError(f"the checkpoint in {out} protects {entry.privacy_unit}; this fit protects "
                            f"{privacy_unit}. Resume with the same schema's privacy unit.")
