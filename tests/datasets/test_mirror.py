import hashlib
from pathlib import Path

import pytest

from graphormer_sepnorm.datasets import (
    MIRROR_ENV,
    DatasetUnavailableError,
    MolHIVDataModule,
    ZINCDataModule,
)
from graphormer_sepnorm.datasets.mirror import copy_from_mirror, resolve_mirror


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def mirror(tiny_mirror) -> Path:
    return tiny_mirror


def test_zinc_copies_from_mirror_and_never_writes_into_it(mirror, tmp_path):
    before = snapshot(mirror)
    dm = ZINCDataModule(root=str(tmp_path / "root"), mirror=str(mirror), batch_size=4)
    dm.setup("fit")
    assert [len(dm.splits[s]) for s in ("train", "val", "test")] == [12, 4, 4]
    assert (tmp_path / "root/ZINC/raw/train.pickle").is_file()
    assert (tmp_path / "root/ZINC/subset/processed/train.pt").is_file()
    assert snapshot(mirror) == before


def test_molhiv_copies_from_mirror_via_environment(mirror, tmp_path, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, str(mirror))
    before = snapshot(mirror)
    dm = MolHIVDataModule(root=str(tmp_path), batch_size=4)
    dm.setup("fit")
    assert [len(dm.splits[s]) for s in ("train", "val", "test")] == [12, 4, 4]
    assert dm.splits["train"][1].y.tolist() == [[1.0]]
    assert (tmp_path / "ogbg_molhiv/processed/geometric_data_processed.pt").is_file()
    assert snapshot(mirror) == before
    assert not (mirror / "ogbg_molhiv/processed").exists()


def test_explicit_mirror_argument_wins_over_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(MIRROR_ENV, "/from/env")
    assert resolve_mirror(str(tmp_path)) == tmp_path
    assert resolve_mirror(None) == Path("/from/env")
    monkeypatch.delenv(MIRROR_ENV)
    assert resolve_mirror(None) is None


def test_incomplete_mirror_is_reported(tmp_path):
    (tmp_path / "m/ZINC/raw").mkdir(parents=True)
    (tmp_path / "m/ZINC/raw/train.index").write_text("0\n")
    dm = ZINCDataModule(root=str(tmp_path / "root"), mirror=str(tmp_path / "m"))
    with pytest.raises(DatasetUnavailableError, match="lacks ZINC/raw/train.pickle"):
        dm.setup("fit")


def test_root_inside_mirror_is_refused(mirror):
    with pytest.raises(DatasetUnavailableError, match="inside the mirror"):
        copy_from_mirror(mirror, "ZINC/raw", mirror / "ZINC/raw/copy", ["train.pickle"])


def test_no_data_no_mirror_no_network_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv(MIRROR_ENV, raising=False)

    def offline(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr("torch_geometric.datasets.zinc.download_url", offline)
    monkeypatch.setattr("ogb.graphproppred.dataset_pyg.decide_download", offline)
    monkeypatch.setattr("ogb.graphproppred.dataset_pyg.download_url", offline)
    for dm in (ZINCDataModule(root=str(tmp_path)), MolHIVDataModule(root=str(tmp_path))):
        with pytest.raises(DatasetUnavailableError, match="--data.mirror") as err:
            dm.setup("fit")
        assert MIRROR_ENV in str(err.value) and "network is unreachable" in str(err.value)
