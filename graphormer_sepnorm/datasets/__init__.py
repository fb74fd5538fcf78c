"""Lightning datamodules: ZINC, ZINC-subset, OGB MolHIV, and users' SMILES CSV files."""

from graphormer_sepnorm.datasets.base import GraphDataModule
from graphormer_sepnorm.datasets.mirror import MIRROR_ENV, DatasetUnavailableError
from graphormer_sepnorm.datasets.molhiv import MolHIVDataModule
from graphormer_sepnorm.datasets.smiles_csv import SmilesCSVDataModule
from graphormer_sepnorm.datasets.zinc import ZINCDataModule

__all__ = [
    "MIRROR_ENV",
    "DatasetUnavailableError",
    "GraphDataModule",
    "MolHIVDataModule",
    "SmilesCSVDataModule",
    "ZINCDataModule",
]
