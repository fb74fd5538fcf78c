import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


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
