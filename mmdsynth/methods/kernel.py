"""DP-NTK (empirical NTK features), DP-MERF (random Fourier features), DP-HP (Hermite polynomial features)."""
from __future__ import annotations

import logging

from ..embedding import check_embedding_args, sampled_embedding_part
from ..errors import InvalidParameterError
from ..features import ENTKFeatures, HermiteFeatures, MixedRFF, RandomConvFeatures, RandomFourierFeatures
from ..features.hermite import hermite_noise_multipliers
from ..features.networks import ARCHS
from ..validation import check_probability
from . import presets
from .base import KernelGeneratorMethod, register
from .tables import TableOptions

logger = logging.getLogger(__name__)
#: categorical_pairs="auto" adds the pairwise marginals when they are at most this many features
MAX_AUTO_PAIR_FEATURES = 20000
#: numeric_categorical: hat-function bins per numeric column in its joint histograms with the categorical columns,
#: fewer (down to MIN_AUTO_CROSS_BINS) when "auto" would otherwise exceed MAX_AUTO_PAIR_FEATURES
CROSS_BINS = 8
MIN_AUTO_CROSS_BINS = 4


@register
class DPNTK(TableOptions, KernelGeneratorMethod):
    """DP-NTK (Yang, Adamczewski, Sutherland, Li, Park, 2023): the mean embedding under
    normalised e-NTK features of a randomly initialised network, released once. Images and tables.

    ``arch``: ``fc_1l`` (fast factorised path), ``fc_2l``, ``cnn_2l`` or ``cnn``;
    ``widths``: one width per hidden layer (``ntk_width`` sets a single one, the paper's
    800 for MNIST); ``ntk_seed``: the network's initialisation (public). Also takes the table options
    (:class:`~mmdsynth.methods.tables.TableOptions`) and the generator's and the run's
    (:class:`~mmdsynth.methods.KernelGeneratorMethod`).
    """

    method = "dp-ntk"
    summary = "the empirical neural tangent kernel of a random network (DP-NTK)"
    param_help = {"ntk_seed": "the random network's initialisation (public)"}
    param_choices = {"arch": tuple(ARCHS)}
    #: images: the training step in bfloat16 where the device computes it in hardware ("auto"). Measured on full
    #: MNIST at eps 1 (benchmarks/log/2026-11-29.md#bf16-amx: one release, 3 generator seeds each way, a CPU with AMX):
    #: the same Table 2 scores as float32 in two thirds of the time. Tables keep float32 (not measured there)
    kind_defaults = {"image": {**KernelGeneratorMethod.kind_defaults["image"], "precision": "auto"},
                     "table": KernelGeneratorMethod.kind_defaults["table"]}

    def __init__(self, epsilon: float | None = None, delta: float | None = None, *, arch: str = "fc_1l",
                 ntk_width: int | None = 800, widths=None, ntk_seed: int = 0, **kwargs):
        super().__init__(epsilon, delta, **kwargs)
        self.arch, self.ntk_width, self.widths, self.ntk_seed = arch, ntk_width, widths, ntk_seed

    @classmethod
    def dataset_defaults(cls, dataset: str, kind: str) -> dict:
        return presets.dpntk_table(dataset) if kind == "table" else {}

    def feature_map(self, input_dim: int, n_classes: int) -> ENTKFeatures:
        widths = self._s.widths if self._s.widths is not None else (self._s.ntk_width,)
        return ENTKFeatures(input_dim, self._s.arch, widths, n_outputs=max(n_classes, 1), seed=self._s.ntk_seed)


@register
class DPMERF(TableOptions, KernelGeneratorMethod):
    """DP-MERF (Harder, Adamczewski, Park, 2021): random Fourier features of a Gaussian
    kernel. Images and tables. ``n_features`` random features; ``length_scale`` is a data-independent
    choice (default sqrt(d)/2 for inputs in [0, 1]), never a median heuristic on private data;
    ``rff_seed``: the features' draw (public). Tables: ``rff_inputs``, ``categorical_pairs`` and
    ``numeric_categorical`` (:meth:`table_feature_map`). Also takes the table options
    (:class:`~mmdsynth.methods.tables.TableOptions`) and the generator's and the run's
    (:class:`~mmdsynth.methods.KernelGeneratorMethod`)."""

    method = "dp-merf"
    summary = "random Fourier features of a Gaussian kernel (DP-MERF)"
    param_help = {
        "rff_seed": "the random features' draw (public)",
        "rff_inputs": 'tables: random features of the "numeric" inputs (the paper\'s) or of "all" of the row',
        "categorical_pairs": 'tables: release per-class pairwise marginals of the categorical columns ("auto": if they '
                             'fit)',
        "numeric_categorical": 'tables: release per-class histograms of each numeric with each categorical column '
                               '("auto": if they fit)',
    }
    param_choices = {"rff_inputs": ("numeric", "all"), "categorical_pairs": ("auto", True, False),
                     "numeric_categorical": ("auto", True, False)}

    def __init__(self, epsilon: float | None = None, delta: float | None = None, *, n_features: int = 10000,
                 length_scale: float | None = None, rff_seed: int = 0, rff_inputs: str = "numeric",
                 categorical_pairs: bool | str = "auto", numeric_categorical: bool | str = "auto", **kwargs):
        super().__init__(epsilon, delta, **kwargs)
        self.n_features, self.length_scale, self.rff_seed = n_features, length_scale, rff_seed
        self.rff_inputs, self.categorical_pairs = rff_inputs, categorical_pairs
        self.numeric_categorical = numeric_categorical

    @classmethod
    def dataset_defaults(cls, dataset: str, kind: str) -> dict:
        return presets.dpmerf_table(dataset) if kind == "table" else {}

    def _validate(self) -> None:
        super()._validate()

    def feature_map(self, input_dim: int, n_classes: int) -> RandomFourierFeatures:
        return RandomFourierFeatures(input_dim, self._s.n_features, self._s.length_scale, seed=self._s.rff_seed)

    def table_feature_map(self, encoder, n_classes: int) -> MixedRFF:
        """Heterogeneous columns (DP-MERF Sec. 4.3): the one-hot part raw (per-class frequencies), random
        Fourier features of the numeric part (``rff_inputs="numeric"``, the paper's; ``"all"``: of the whole
        row), and with ``categorical_pairs`` the per-class pairwise marginals of every two categorical columns.
        Defaults, measured on adult (benchmarks/RESULTS.md): ``rff_inputs`` numeric (random features of the whole
        row lost the numeric marginals and utility), ``categorical_pairs="auto"``: on when the pair block has at
        most ``MAX_AUTO_PAIR_FEATURES`` features (census's 117,792 would dominate the cost), off otherwise with a
        warning; the release's spec says what it captures either way. ``numeric_categorical`` (issue 32) adds per-class
        joint histograms of every numeric column (``CROSS_BINS`` hat functions on [0, 1]) with every categorical
        column, so numeric-categorical dependence is released, not only through the label: "auto" on when they fit in
        ``MAX_AUTO_PAIR_FEATURES`` with at least ``MIN_AUTO_CROSS_BINS`` bins (adult 8 bins, census 5). Measured on adult
        at eps 1 (3 seeds): pairwise dependence error 0.060 vs 0.085 without, ROC 0.854 vs 0.846."""
        sizes = encoder.category_sizes
        pair_dim = sum(a * b for i, a in enumerate(sizes) for b in sizes[i + 1:])
        s = self._s
        pairs = pair_dim <= MAX_AUTO_PAIR_FEATURES if s.categorical_pairs == "auto" else bool(s.categorical_pairs)
        if pair_dim and not pairs and self._s.categorical_pairs == "auto":
            logger.warning("pairwise marginals of the categorical columns would add %d features (> %d): left out, so "
                           "the release holds no dependence between categorical columns beyond the label; "
                           "categorical_pairs=True forces them.", pair_dim, MAX_AUTO_PAIR_FEATURES)
        width = encoder.n_numeric * sum(sizes)          # features per histogram bin
        bins = min(CROSS_BINS, MAX_AUTO_PAIR_FEATURES // width) if width else 0
        cross = (bins >= MIN_AUTO_CROSS_BINS if s.numeric_categorical == "auto" else bool(s.numeric_categorical))
        bins = max(bins, MIN_AUTO_CROSS_BINS) if cross else 0
        if width and not cross and self._s.numeric_categorical == "auto":
            logger.warning("joint histograms of numeric and categorical columns would add %d features even with %d "
                           "bins (> %d): left out, so the release holds no numeric-categorical dependence beyond the "
                           "label; numeric_categorical=True forces them.", width * MIN_AUTO_CROSS_BINS,
                           MIN_AUTO_CROSS_BINS, MAX_AUTO_PAIR_FEATURES)
        return MixedRFF(encoder.n_numeric, len(encoder.category_sizes), sum(encoder.category_sizes),
                        self._s.n_features, self._s.length_scale, seed=self._s.rff_seed, rff_inputs=self._s.rff_inputs,
                        category_sizes=sizes if pairs and len(sizes) > 1 else None,
                        cross_sizes=sizes if cross and width else None, cross_bins=bins)


@register
class DPHP(TableOptions, KernelGeneratorMethod):
    """DP-HP (Vinaroz, Charusaie, Harder, Adamczewski, Park, ICML 2022): Hermite polynomial features
    of a Gaussian kernel (:class:`~mmdsynth.features.HermiteFeatures`), a sum kernel over all
    dimensions (order ``order``) and ``n_product`` product kernels over ``product_dims`` dimensions
    each (order ``product_order``), every block its own Gaussian release in one plan: the sum kernel
    gets ``sum_share`` of the privacy, the product releases the rest. The generator minimises
    ``sum_weight ||d_sum||^2 + product_weight mean_j ||d_product_j||^2``.

    The parameters left as None take the default for the kind of data ``fit`` receives
    (:attr:`kind_defaults`). Images: the authors' MNIST setting at eps 1 (s^2 = 0.005, i.e. ``length_scale``
    0.0707, gamma = ``sum_weight`` 20, C = 100 / 20, 2 product dimensions, 10 epochs of batch 200 with one
    product release each, 3,000 iterations, Adam 0.01 x0.9 every 300; Fashion-MNIST: ``length_scale=0.387,
    sum_weight=10``). Tables: the adult preset's (``length_scale`` 0.3, sum weight 1, product order 5 over
    5 dimensions, at most the encoded inputs, product weight 0.1, 20 product releases with 0.4 of the privacy,
    2,000 iterations, x0.9 every 100, epsilon 1); the rows as encoded (numeric columns in [0, 1] through their
    released CDF or their public bounds, then one-hot blocks). ``length_scale`` is public (a number, or one per
    input dimension), never a median of the private data. Also takes the table options
    (:class:`~mmdsynth.methods.tables.TableOptions`) and the generator's and the run's
    (:class:`~mmdsynth.methods.KernelGeneratorMethod`).
    """

    method = "dp-hp"
    summary = "Hermite polynomial features of a Gaussian kernel (DP-HP)"
    param_help = {"hp_seed": "which input dimensions the product features combine (public)",
                  "product_length_scale": "the product features' length scale (default: length_scale)"}
    #: the per-kind parameters (None in the signature). Images: the authors' MNIST setting (length scale 0.07,
    #: sum weight 20). User tables: the adult preset's kernel and schedule (:func:`~mmdsynth.methods.presets.
    #: dphp_table`; its code size is adult's, so it is left out, and its product dimensions, 5, become None: as
    #: many, at most the table's encoded inputs, a public shape)
    kind_defaults = {
        "image": {"length_scale": 0.0707, "n_product": 10, "product_dims": 2, "product_order": 20, "sum_share": 0.8,
                  "sum_weight": 20.0, "product_weight": 1.0, "iterations": 3000, "lr_step": 300,
                  "precision": "float32"},
        "table": {"epsilon": 1.0, **{k: presets.dphp_table("adult")[k] for k in (
            "length_scale", "n_product", "product_order", "sum_share", "sum_weight", "product_weight", "iterations",
            "lr_step")}, "product_dims": None, "precision": "float32"},
    }
    #: product dimensions of a table fit that leaves them to the method (None): the adult preset's
    TABLE_PRODUCT_DIMS = 5

    def __init__(self, epsilon: float | None = None, delta: float | None = None, *, order: int = 100, length_scale=None,
                 n_product: int | None = None, product_dims: int | None = None, product_order: int | None = None,
                 product_length_scale=None, sum_share: float | None = None, sum_weight: float | None = None,
                 product_weight: float | None = None, hp_seed: int = 0, iterations: int | None = None,
                 batch_size: int = 200, lr: float = 0.01, lr_step: int | None = None, **kwargs):
        super().__init__(epsilon, delta, iterations=iterations, batch_size=batch_size, lr=lr, lr_step=lr_step,
                         **kwargs)
        self.order, self.length_scale, self.n_product, self.product_dims = order, length_scale, n_product, product_dims
        self.product_order, self.product_length_scale = product_order, product_length_scale
        self.sum_share, self.sum_weight, self.product_weight, self.hp_seed = sum_share, sum_weight, product_weight, hp_seed

    @classmethod
    def dataset_defaults(cls, dataset: str, kind: str) -> dict:
        return presets.dphp_table(dataset) if kind == "table" else presets.dphp_image(dataset)

    def block_multipliers(self) -> dict[str, float]:
        return hermite_noise_multipliers(int(self._s.n_product), float(self._s.sum_share))

    def feature_map(self, input_dim: int, n_classes: int) -> HermiteFeatures:
        dims = self._s.product_dims if self._s.product_dims is not None else min(self.TABLE_PRODUCT_DIMS, input_dim)
        return HermiteFeatures(input_dim, self._s.order, self._s.length_scale, self._s.n_product, dims,
                               self._s.product_order, self._s.product_length_scale, self._s.sum_share, self._s.sum_weight,
                               self._s.product_weight, seed=self._s.hp_seed)


@register
class DPRandConv(KernelGeneratorMethod):
    """DP distribution matching (NDPDC's statistic; :class:`~mmdsynth.features.RandomConvFeatures`): the mean
    embedding of ``n_networks`` randomly initialised ConvNets (``width`` filters, ``depth`` blocks, by default 3 on
    28 x 28 and 32 x 32 images and 2 on 8 x 8 digits; ``conv_seed``: their initialisation, public; ``conv_augment``:
    a fixed public view of the image per network; ``conv_pool``: the last map averaged to that many cells a side),
    each network's output at unit norm, released once. Images only.
    ``sample_rate`` (NDPDC's sampling; :func:`~mmdsynth.embedding.release_sampled_embedding`): each network reads
    its own secret Poisson sample of the records (that share of them), one subsampled Gaussian step per network,
    calibrated together: ``n_networks`` networks for the compute of ``sample_rate * n_networks`` full passes, so
    hundreds of networks fit where a full release affords a few dozen. With it, ``neighbouring="add_remove"`` is the
    accounting NDPDC reports (about half the noise of the default replace-one; m divides as a public count, so it
    holds for zero-out neighbours, a record replaced by a null record, not for adding or removing one: the ledger
    entry says so and prints the replace-one epsilon of the same sigma beside it).
    The release serves a generator like the others, and `mmdsynth distill` (a small set per class, NDPDC's use of
    it: the defaults, 32 networks and ``distill`` matching 2 of them a step, are the recipe measured best in
    ``benchmarks/RESULTS.md``; the views added nothing on MNIST there). The generator's defaults are the recipe
    measured on MNIST at eps 1: 1,500 iterations of 250 generated images, each step matching 2 of the networks
    (``blocks_per_step``; an unbiased estimate of the whole loss), learning rate x 0.9 every 500 iterations."""

    method = "dp-randconv"
    summary = "random ConvNets' features (NDPDC's distribution matching)"
    param_help = {
        "n_networks": "how many random ConvNets embed the images",
        "conv_width": "filters per layer of each ConvNet",
        "conv_depth": "convolution blocks of each ConvNet",
        "conv_seed": "the ConvNets' initialisation (public)",
        "conv_augment": "each network sees a fixed public view (crop, flip) of every image",
        "conv_pool": "average each network's last map to this many cells a side (none: the whole map)",
        "sample_rate": "each network reads its own secret Poisson sample of this share of the records",
        "neighbouring": '"replace_one" or "add_remove" (with sample_rate; zero-out neighbours)',
        "blocks_per_step": "the generator matches this many random networks a step (DM's stochastic steps, "
                           "n_networks / B times cheaper; not measured against every network); none: all",
    }
    param_choices = {"neighbouring": ("replace_one", "add_remove")}
    data_kinds = ("image",)
    #: the generator's recipe measured on MNIST at eps 1 (benchmarks/RESULTS.md, "Images"): small batches of
    #: generated images matched against 2 random networks a step; DP-NTK's batch of 5,000 against all 32 networks
    #: would cost about 320 times as much per step
    kind_defaults = {"image": {"batch_size": 250, "lr_step": 500, "precision": "float32"}}

    def __init__(self, epsilon: float | None = None, delta: float | None = None, *, n_networks: int = 32, conv_width: int = 64,
                 conv_depth: int | None = None, conv_seed: int = 0, conv_augment: bool = False,
                 conv_pool: int | None = None, sample_rate: float | None = None, neighbouring: str = "replace_one",
                 blocks_per_step: int | None = RandomConvFeatures.default_blocks_per_step, iterations: int = 1500,
                 **kwargs):
        super().__init__(epsilon, delta, iterations=iterations, **kwargs)
        self.blocks_per_step = blocks_per_step
        self.n_networks, self.conv_width, self.conv_depth, self.conv_seed = n_networks, conv_width, conv_depth, conv_seed
        self.conv_augment, self.conv_pool, self.sample_rate = conv_augment, conv_pool, sample_rate
        self.neighbouring = neighbouring

    def _validate(self) -> None:
        super()._validate()
        if self._s.neighbouring == "add_remove" and self._s.sample_rate is None:
            raise InvalidParameterError("neighbouring='add_remove' is the accounting of the subsampled release: give "
                                        "sample_rate too (1.0 reads every record in every step).")
        if self._s.sample_rate is not None:
            check_probability(self._s.sample_rate, "sample_rate")
            if int(self._s.n_networks) < 2:
                raise InvalidParameterError(f"sample_rate draws one sample per network; n_networks={self._s.n_networks}"
                                            f" gives one step: use n_networks >= 2, or sample_rate=None.")
            if self._s.early_stopping:
                raise InvalidParameterError("early_stopping's proxy is a full-data release; with sample_rate use "
                                            "early_stopping=False.")

    def _array_release(self, fmap, facts, *, n_classes, proxy, dataset: str, budget, public_facts: dict):
        if self._s.sample_rate is None:
            return (yield from super()._array_release(fmap, facts, n_classes=n_classes, proxy=proxy, dataset=dataset,
                                                      budget=budget, public_facts=public_facts))
        if not facts.in_memory:
            raise InvalidParameterError("sample_rate releases read the images in memory, not shards: load them as "
                                        "an array, or use sample_rate=None.")
        check_embedding_args(n_classes is not None, n_classes, None)
        return (yield from sampled_embedding_part(
            fmap, facts, lambda plan, _: self._opening(plan=plan, budget=budget, dataset=dataset,
                                                       privacy_unit=self._privacy_unit),
            q=float(self._s.sample_rate), neighbouring=self._s.neighbouring, n_classes=n_classes, dataset=dataset,
            public_facts=public_facts))

    def feature_map(self, input_dim: int, n_classes: int):
        raise InvalidParameterError(f"{self.method} features images (n, channels, height, width); these records are "
                                    f"flat ({input_dim} values each): reshape them to images, or use dp-ntk / dp-merf.")

    def image_feature_map(self, shape: tuple, n_classes: int) -> RandomConvFeatures:
        if len(shape) != 3:
            return self.feature_map(int(shape[0]), n_classes)
        return RandomConvFeatures(shape, self._s.n_networks, self._s.conv_width, self._s.conv_depth, seed=self._s.conv_seed,
                                  augment=self._s.conv_augment, pool=self._s.conv_pool)
