"""``init_from``: a fit starts from another checkpoint's model weights (fine-tuning)."""

import lightning.pytorch as pl
import pytest
import torch
from graphs import random_graph
from torch.utils.data import DataLoader

from graphormer_sepnorm.checkpoints import stamp
from graphormer_sepnorm.data import GraphormerCollator, add_shortest_paths
from graphormer_sepnorm.nn.config import GraphormerConfig
from graphormer_sepnorm.training import GraphormerModule
from graphormer_sepnorm.training.init_from import init_model_from

TINY = GraphormerConfig(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=4,
                        multi_hop_max_dist=5)
INFO = {"task": "regression", "target_names": ["y"], "atom_feature_dims": [5, 3],
        "edge_feature_dims": [4, 2]}
pytestmark = pytest.mark.usefixtures("one_thread")


def module(info=INFO, config=TINY, **kwargs) -> GraphormerModule:
    return GraphormerModule(info, config, total_steps=10, warmup_steps=1, **kwargs)


def save(source: GraphormerModule, path):
    ckpt = {"state_dict": source.state_dict(), "hyper_parameters": dict(source.hparams)}
    torch.save(stamp(ckpt), path)
    return path


def model_state(m: GraphormerModule) -> dict:
    return {k: v.clone() for k, v in m.model.state_dict().items()}


class StartWeights(pl.Callback):
    """The model's weights when training starts (after setup and any checkpoint restore)."""

    def on_train_start(self, trainer, pl_module):
        self.state = model_state(pl_module)


def fit(m: GraphormerModule, tmp_path, steps=1, ckpt_path=None) -> StartWeights:
    graphs = add_shortest_paths([random_graph(4 + i % 5, i, p=0.4, y=float(i))
                                 for i in range(8)])
    start = StartWeights()
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path, callbacks=[start])
    trainer.fit(m, DataLoader(graphs, batch_size=4, collate_fn=GraphormerCollator(5)),
                ckpt_path=ckpt_path)
    if ckpt_path is None:
        trainer.save_checkpoint(tmp_path / "fitted.ckpt")
    return start


def test_other_head_and_feature_dims_start_fresh(tmp_path):
    source = module()
    path = save(source, tmp_path / "pretrained.ckpt")
    # three targets, another atom vocabulary, other dropouts: only these may differ
    info = dict(INFO, target_names=["a", "b", "c"], atom_feature_dims=[7, 3])
    target = module(info, TINY.replace(dropout=0.3, sync_batch_norm=False))
    fresh = model_state(target)
    report = init_model_from(target.model, path)
    reshaped = {line.split(":")[0] for line in report.reshaped}
    assert {"head.weight", "head.bias"} < reshaped  # and the atom embedding table(s)
    assert all(name.startswith(("head.", "atom_encoder.")) for name in reshaped)
    assert not report.absent and len(report.loaded) == len(fresh) - len(reshaped)
    pretrained, now = model_state(source), model_state(target)
    for name in report.loaded:
        assert torch.equal(now[name], pretrained[name]), name
    for name in reshaped:
        assert torch.equal(now[name], fresh[name]), name
    assert "kept fresh (shape differs): " in str(report)
    assert "head.weight: [1, 16] -> [3, 16]" in str(report)


def test_another_architecture_is_refused_naming_the_fields(tmp_path):
    path = save(module(), tmp_path / "pretrained.ckpt")
    target = module(config=TINY.replace(num_layers=3, sepnorm=False))
    with pytest.raises(ValueError, match=r"num_layers \(checkpoint 2, this model 3\); "
                                         r"sepnorm \(checkpoint True, this model False\)"):
        init_model_from(target.model, path)
    with pytest.raises(FileNotFoundError, match="init_from: checkpoint not found"):
        init_model_from(target.model, tmp_path / "missing.ckpt")


def test_fit_starts_from_init_from_and_says_so(tmp_path, capsys):
    source = module()
    path = save(source, tmp_path / "pretrained.ckpt")
    start = fit(module(init_from=str(path)), tmp_path)
    assert "init_from" in capsys.readouterr().out
    expected = model_state(source)
    assert all(torch.equal(start.state[k], expected[k]) for k in expected)
    scratch = fit(module(init_from="none"), tmp_path)
    assert not torch.equal(scratch.state["head.weight"], expected["head.weight"])


def test_a_checkpoint_restore_overrides_init_from(tmp_path):
    path = save(module(), tmp_path / "pretrained.ckpt")
    fit(module(init_from=str(path)), tmp_path, steps=2)
    fitted = tmp_path / "fitted.ckpt"
    saved = {k.removeprefix("model."): v
             for k, v in torch.load(fitted, weights_only=True)["state_dict"].items()
             if k.startswith("model.")}
    # a resumed fit loads init_from at setup, then the restore puts the run's weights back
    resumed = fit(module(init_from=str(path)), tmp_path / "resumed", steps=3, ckpt_path=fitted)
    assert all(torch.equal(resumed.state[k], saved[k]) for k in saved)
    # a module loaded from a checkpoint keeps those weights when it is fitted further
    loaded = GraphormerModule.load_from_checkpoint(fitted)
    assert loaded.hparams["init_from"] == str(path)
    again = fit(loaded, tmp_path / "again", steps=1)
    assert all(torch.equal(again.state[k], saved[k]) for k in saved)


def test_a_head_reading_molecule_features_starts_fresh_on_a_pretrained_encoder(tmp_path):
    path = save(module(), tmp_path / "pretrained.ckpt")
    info = dict(INFO, mol_feature_dim=6)
    target = module(info, TINY.replace(head_hidden_dim=8))
    assert target.config.mol_feature_dim == 6
    report = init_model_from(target.model, path)
    assert sorted(report.absent) == ["head.1.bias", "head.1.weight", "head.4.bias",
                                     "head.4.weight"]
    assert {line.split(":")[0] for line in report.reshaped} == set()
    assert all(not name.startswith("head.") for name in report.loaded)
    assert len(report.loaded) == len(model_state(module())) - 2  # all but the linear head
