"""C kernels built at first use (:mod:`.build`), and the drop-rate resolution they share.

Dropout masks compare 16-bit random slices with a threshold, so a drop probability ``p`` is
rounded to :func:`drop_levels` 65,536ths (0.1 becomes 0.100006); :func:`keep_scale` is the
exact inverse keep rate of that rounded probability, so expectations are preserved.
"""

LEVELS = 1 << 16
"""The resolution of drop rates; drop probabilities are multiples of ``1 / LEVELS``."""


def drop_levels(p: float) -> int:
    """``p`` in 65,536ths: a mask element is dropped for that many of the 65,536 values."""
    return round(p * LEVELS)


def keep_scale(p: float) -> float:
    """The exact inverse keep rate of masks with drop probability ``p``."""
    return LEVELS / (LEVELS - drop_levels(p))
