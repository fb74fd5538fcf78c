"""The reference model: encoders, biased attention, SepNorm, layers and the model.

The CPU backend (:mod:`graphormer_sepnorm.nn.cpu`) computes the same model faster on a CPU;
:func:`~graphormer_sepnorm.nn.backends.set_backend` chooses between them.
"""

from graphormer_sepnorm.nn.attention import BiasedMultiheadAttention
from graphormer_sepnorm.nn.backends import Backend, set_backend
from graphormer_sepnorm.nn.bias_encoders import AttentionBias, EdgePathEncoder, SpatialEncoder
from graphormer_sepnorm.nn.config import GraphormerConfig
from graphormer_sepnorm.nn.layer import GraphormerLayer
from graphormer_sepnorm.nn.model import Graphormer
from graphormer_sepnorm.nn.node_encoders import AtomEncoder, DegreeEncoder, FeatureEmbedding
from graphormer_sepnorm.nn.sepnorm import GraphTokenBatchNorm, SepNorm, ShareNorm, build_norm

__all__ = [
    "AtomEncoder",
    "AttentionBias",
    "Backend",
    "BiasedMultiheadAttention",
    "DegreeEncoder",
    "EdgePathEncoder",
    "FeatureEmbedding",
    "GraphTokenBatchNorm",
    "Graphormer",
    "GraphormerConfig",
    "GraphormerLayer",
    "SepNorm",
    "ShareNorm",
    "SpatialEncoder",
    "build_norm",
    "set_backend",
]
