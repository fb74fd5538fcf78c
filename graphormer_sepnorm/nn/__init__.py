"""Neural-network modules: encoders, biased attention, layers, SepNorm and the model."""

from graphormer_sepnorm.nn.attention import BiasedMultiheadAttention
from graphormer_sepnorm.nn.bias_encoders import AttentionBias, EdgePathEncoder, SpatialEncoder
from graphormer_sepnorm.nn.layer import GraphormerLayer
from graphormer_sepnorm.nn.model import Graphormer
from graphormer_sepnorm.nn.node_encoders import AtomEncoder, DegreeEncoder, FeatureEmbedding
from graphormer_sepnorm.nn.sepnorm import GraphTokenBatchNorm, SepNorm, ShareNorm, build_norm

__all__ = [
    "AtomEncoder",
    "AttentionBias",
    "BiasedMultiheadAttention",
    "DegreeEncoder",
    "EdgePathEncoder",
    "FeatureEmbedding",
    "GraphTokenBatchNorm",
    "Graphormer",
    "GraphormerLayer",
    "SepNorm",
    "ShareNorm",
    "SpatialEncoder",
    "build_norm",
]
