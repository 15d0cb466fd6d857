"""Optimizers for BOOST models: LORO, the low-rank Riemannian optimizer, and its learning-rate schedule."""

from boost.training.optim.cosine_restart import cosine_restart_factor
from boost.training.optim.factor_pairs import FactorPair, factor_pairs
from boost.training.optim.loro import LORO

__all__ = ["LORO", "FactorPair", "factor_pairs", "cosine_restart_factor"]
