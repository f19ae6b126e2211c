"""Feature maps with one interface (see base.FeatureMap)."""
from .base import FEATURE_MAPS, FeatureMap, build_feature_map
from .rff import RandomFourierFeatures

__all__ = ["FEATURE_MAPS", "FeatureMap", "RandomFourierFeatures", "build_feature_map"]
