"""The chemistry: SMILES to molecules to graphs and molecule features (RDKit, ogb).

- :mod:`~graphormer_sepnorm.chem.smiles`: parsing, with a reason for every bad row;
- :mod:`~graphormer_sepnorm.chem.featurizers`: molecules to graphs (ZINC tokens, OGB features);
- :mod:`~graphormer_sepnorm.chem.ogb_features`: OGB's atom and bond vocabularies;
- :mod:`~graphormer_sepnorm.chem.mol_features`: molecule features for the head (RDKit 2D
  descriptors from RDKit's own functions, Morgan counts);
- :mod:`~graphormer_sepnorm.chem.parallel`: a whole set featurized, in worker processes where
  it is large;
- :mod:`~graphormer_sepnorm.chem.layout`: those features' widths and columns, without RDKit.

Only the datamodules, prediction and the notebooks' helpers import it; the model, training and
the batches never do (``lint-imports``). Nothing is imported here, so that
:mod:`~graphormer_sepnorm.chem.layout` loads where RDKit is absent.
"""
