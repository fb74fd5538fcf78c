import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _cpu_unless_marked_gpu(request, monkeypatch):
    """On a machine with a GPU, the tests written for the CPU still run on the CPU.

    Lightning's ``accelerator='auto'`` (the configs') would pick the GPU; here CUDA is hidden
    from every test not marked ``gpu``, and from the processes they start.
    """
    if request.node.get_closest_marker("gpu") is not None or not torch.cuda.is_available():
        return
    from lightning.pytorch.accelerators import CUDAAccelerator

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: False))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture(scope="session")
def tiny_mirror(tmp_path_factory) -> Path:
    """A data mirror (never written) with tiny ZINC and ogbg-molhiv in their real layouts."""
    from tiny_data import write_ogb_molhiv, write_zinc_raw

    folder = tmp_path_factory.mktemp("mirror")
    write_zinc_raw(folder / "ZINC" / "raw")
    write_ogb_molhiv(folder / "ogbg_molhiv")
    return folder


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread is faster, and spares a shared, loaded machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
