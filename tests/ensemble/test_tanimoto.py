"""The Tanimoto kernel of log1p counts, by count levels, against the L1 formula."""

import torch

from graphormer_sepnorm.ensemble.tanimoto import log_count_tanimoto, minmax_similarity


def _log_counts(rows: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 4, (rows, 300), generator=generator)
    counts *= torch.rand(rows, 300, generator=generator) < 0.1  # sparse, like Morgan counts
    counts[0, :5] = torch.tensor([60, 17, 9, 2, 1])  # a few high levels
    counts[-1] = 0  # an empty fingerprint
    return torch.log1p(counts.double())


def test_levels_equal_the_l1_formula_in_float64():
    a, b = _log_counts(9, 0), _log_counts(13, 1)
    expected = minmax_similarity(a, b)
    got = log_count_tanimoto(a, b)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert got[-1, -1] == 1.0  # two empty fingerprints are identical
    torch.testing.assert_close(log_count_tanimoto(a, a).diagonal(), torch.ones(9, dtype=a.dtype))


def test_float16_training_side_rounds_back_to_its_counts():
    # the GP keeps its training features in float16: the kernel is that of the counts
    a, b = _log_counts(9, 2), _log_counts(13, 3)
    got = log_count_tanimoto(a.float(), b.half().float())
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, minmax_similarity(a, b).float(), rtol=1e-6, atol=1e-6)
