"""Public encoders for DP-MEPF: pretraining on public data and seeded random encoders. A room of its
own beside ``features/``: it trains and evaluates networks, which the feature maps never do."""
from .pretrain import pretrain_encoder, random_encoder

__all__ = ["pretrain_encoder", "random_encoder"]
