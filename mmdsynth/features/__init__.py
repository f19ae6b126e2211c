"""Feature maps with one interface (see base.FeatureMap)."""
from .base import FEATURE_MAPS, FeatureMap, build_feature_map
from .entk import ENTKFeatures
from .hermite import HermiteFeatures
from .perceptual import PerceptualFeatures, PooledFeatures
from .pixels import PixelFeatures
from .randconv import RandomConvFeatures
from .rff import MixedRFF, RandomFourierFeatures

__all__ = ["ENTKFeatures", "HermiteFeatures", "FEATURE_MAPS", "FeatureMap", "MixedRFF", "PerceptualFeatures", "PixelFeatures", "PooledFeatures", "RandomConvFeatures",
           "RandomFourierFeatures",
           "build_feature_map"]
