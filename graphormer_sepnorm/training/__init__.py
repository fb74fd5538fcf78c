"""Lightning training: the module and the learning-rate schedule."""

from graphormer_sepnorm.training.module import GraphormerModule
from graphormer_sepnorm.training.schedule import warmup_polynomial_decay

__all__ = ["GraphormerModule", "warmup_polynomial_decay"]
