"""RDKit's descriptor values as the shortcuts promise them: to the last bit, ROUNDED ones close."""

import numpy as np

from graphormer_sepnorm.chem.rdkit_shortcuts import ROUNDED


def assert_rdkits(got, expected, names, context=None):
    """``got`` equals RDKit's ``expected`` (NaN where NaN), within 1e-13 relative for ROUNDED."""
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    rounded = np.array([name in ROUNDED for name in names])
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    close = np.isclose(got, expected, rtol=1e-13, atol=0.0, equal_nan=True)
    ok = np.where(rounded, close, same)
    assert ok.all(), (context, [(n, g, e) for n, g, e, k in zip(names, got, expected, ok,
                                                                  strict=True) if not k])
