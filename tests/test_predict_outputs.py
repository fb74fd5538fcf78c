"""Prediction leaves nothing half-made: outputs appear only when the whole input is done."""

import os
from pathlib import Path

import pytest
import torch
from test_predict import make_module, save

from graphormer_sepnorm.chem.featurizers import ZincFeaturizer
from graphormer_sepnorm.predict import main

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return save(make_module(ZincFeaturizer(max_atoms=100)), tmp_path_factory.mktemp("c") / "t.ckpt")


def leftovers(folder: Path) -> list[str]:
    """Temporary files a run left behind."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".partial"))


def test_strict_stops_at_first_bad_row_and_writes_nothing(tmp_path, ckpt, capsys):
    src = tmp_path / "m.smi"
    src.write_text("CCO\nCCN\nnot_a_smiles\nCCC\n")
    out, emb = tmp_path / "o.csv", tmp_path / "e.npy"
    assert main([str(src), "-o", str(out), "--checkpoint", str(ckpt), "--strict",
                 "--embeddings", str(emb)]) == 1
    err = capsys.readouterr().err
    assert "line 3:" in err and "not_a_smiles" in err and "no output written" in err
    assert not out.exists() and not emb.exists() and leftovers(tmp_path) == []


def test_strict_row_number_counts_earlier_chunks(tmp_path, ckpt):
    from graphormer_sepnorm.prediction.runner import StrictError, predict_file

    src = tmp_path / "m.smi"
    src.write_text("CCO\nCCN\nCCC\nbad(\n")
    with pytest.raises(StrictError, match="line 4:"):
        predict_file(src, tmp_path / "o.csv", str(ckpt), strict=True, chunk_size=2,
                     num_workers=0, progress=False)
    assert not (tmp_path / "o.csv").exists() and leftovers(tmp_path) == []
    # lines as fit counts them: the header is line 1, in .smi and CSV files alike
    src.write_text("smiles\nCCO\nCCN\nbad(\n")
    with pytest.raises(StrictError, match="line 4:"):
        predict_file(src, tmp_path / "o.csv", str(ckpt), strict=True, chunk_size=2,
                     num_workers=0, progress=False)
    table = tmp_path / "m.csv"
    table.write_text("name,smiles\na,CCO\nb,CCN\nc,CCC\nd,bad(\n")
    with pytest.raises(StrictError, match="line 5:"):
        predict_file(table, tmp_path / "o.csv", str(ckpt), strict=True, chunk_size=2,
                     num_workers=0, progress=False)


@pytest.mark.parametrize("stop", [RuntimeError, KeyboardInterrupt])
def test_failure_midway_leaves_no_output(tmp_path, ckpt, monkeypatch, capsys, stop):
    """An exception or Ctrl-C after a chunk was written: no output, the old file untouched."""
    from graphormer_sepnorm.prediction.engine import Predictor as Engine
    from graphormer_sepnorm.prediction.runner import predict_file

    real = Engine.predict_stream

    def failing(self, chunks, *args, **kwargs):
        yield next(iter(real(self, chunks, *args, **kwargs)))
        raise stop("boom")

    monkeypatch.setattr(Engine, "predict_stream", failing)
    src = tmp_path / "m.smi"
    src.write_text("CCO\nCCN\nCCC\nCCCC\n")
    out, emb = tmp_path / "o.csv", tmp_path / "e.npy"
    out.write_text("old\n")
    if stop is KeyboardInterrupt:
        assert main([str(src), "-o", str(out), "--checkpoint", str(ckpt), "--overwrite",
                     "--embeddings", str(emb), "--no-progress"]) == 130
        assert "interrupted: stopped after row 4" in capsys.readouterr().err
    else:
        with pytest.raises(RuntimeError) as info:
            predict_file(src, out, str(ckpt), overwrite=True, embeddings=emb, chunk_size=2,
                         num_workers=0, progress=False)
        assert "stopped after row 2" in "".join(info.value.__notes__)
    assert out.read_text() == "old\n" and not emb.exists() and leftovers(tmp_path) == []


def test_output_is_a_plainly_created_file(tmp_path, ckpt):
    src = tmp_path / "m.smi"
    src.write_text("CCO\n")
    out = tmp_path / "o.csv"
    assert main([str(src), "-o", str(out), "--checkpoint", str(ckpt)]) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask and leftovers(tmp_path) == []
