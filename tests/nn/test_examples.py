"""The reference modules' ``Examples`` blocks run and print what they say."""

import doctest
import importlib

import pytest

REFERENCE = ["attention", "bias_encoders", "config", "layer", "model", "node_encoders", "sepnorm"]


@pytest.mark.parametrize("name", REFERENCE)
def test_examples_run(name):
    module = importlib.import_module(f"graphormer_sepnorm.nn.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0 or name == "config"


def test_reference_files_are_small_and_free_of_the_cpu_backend():
    from pathlib import Path

    import graphormer_sepnorm.nn as nn_package

    root = Path(nn_package.__file__).parent
    reference = [root / f"{name}.py" for name in REFERENCE]
    # 1,000 until 2026-11-28; attention's `attend` seam and the token rows' route took 20 more
    assert sum(len(p.read_text().splitlines()) for p in reference) < 1030
    for path in reference:
        text = path.read_text()
        assert "nn.cpu" not in text and "device.type" not in text, path
