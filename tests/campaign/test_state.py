"""The state folder: resume points cut per replica and joined back exactly; best models."""

import pytest
import torch

from graphormer_sepnorm.campaign.state import FIELDS, JobState, join_checkpoint, split_checkpoint
from graphormer_sepnorm.experiment import append_row, read_rows


def packed_checkpoint(replicas: int = 3) -> dict:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(replicas, 4, 5, generator=gen)
    return {"state_dict": {"model.w": weight, "model.bn": torch.arange(replicas),
                           "task.mean": torch.tensor([1.5])},
            "optimizer_states": [{"state": {0: {"step": torch.tensor(7.0),
                                                "exp_avg": torch.randn(replicas, 4, 5,
                                                                       generator=gen),
                                                "exp_avg_sq": torch.rand(replicas, 4, 5,
                                                                         generator=gen)}},
                                  "param_groups": [{"lr": 1e-3, "params": [0]}]}],
            "loops": {"fit_loop": {"x": 1}}, "global_step": 7, "epoch": 2}


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key, value in a.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, b[key]) and value.dtype == b[key].dtype, key
        elif isinstance(value, dict):
            assert_same(value, b[key])
        elif isinstance(value, list):
            for x, y in zip(value, b[key], strict=True):
                assert_same(x, y) if isinstance(x, dict) else None
        else:
            assert value == b[key], key


@pytest.mark.parametrize("replicas", [1, 3])
def test_split_and_join_give_the_checkpoint_back(replicas):
    ckpt = packed_checkpoint(3)
    meta, parts = split_checkpoint(ckpt, replicas)
    assert len(parts) == replicas
    if replicas == 3:  # replica 1's own weights and moments, nothing of the others
        assert torch.equal(parts[1]["state_dict/model.w"], ckpt["state_dict"]["model.w"][1])
        assert parts[1]["state_dict/model.w"].untyped_storage().nbytes() == 4 * 20
        assert torch.equal(meta["state_dict"]["task.mean"], torch.tensor([1.5]))
    assert_same(join_checkpoint(meta, parts), ckpt)


def test_bfloat16_moments_are_a_rounding_of_the_float32_ones():
    ckpt = packed_checkpoint()
    meta, parts = split_checkpoint(ckpt, 3, torch.bfloat16)
    assert parts[0]["optimizer/0/0/exp_avg"].dtype == torch.bfloat16
    assert parts[0]["state_dict/model.w"].dtype == torch.float32  # weights stay exact
    back = join_checkpoint(meta, parts)["optimizer_states"][0]["state"][0]
    original = ckpt["optimizer_states"][0]["state"][0]
    assert back["exp_avg"].dtype == torch.float32
    torch.testing.assert_close(back["exp_avg_sq"], original["exp_avg_sq"], rtol=2**-8, atol=0)
    assert not torch.equal(back["exp_avg"], original["exp_avg"])


def test_resume_points_replace_each_other_and_the_recipe_is_checked(tmp_path):
    job = JobState(tmp_path / "job", ["--config", "a.yaml"])
    assert job.read_resume() is None and job.phase == "fit"
    first = packed_checkpoint()
    job.write_resume(first, 3, torch.float32)
    second = packed_checkpoint() | {"global_step": 9}
    job.write_resume(second, 3, torch.float32)
    assert sorted(p.name for p in job.folder.glob("resume-*")) == [
        "resume-9-meta.pt", "resume-9-part0.pt", "resume-9-part1.pt", "resume-9-part2.pt"]
    again = JobState(tmp_path / "job", ["--config", "a.yaml"])  # as a later command reads it
    assert again.status["steps"] == 9
    assert_same(again.read_resume(), second)
    with pytest.raises(ValueError, match="another recipe"):
        JobState(tmp_path / "job", ["--config", "b.yaml"])
    for seed in (0, 1):
        again.save_best(seed, {"state_dict": {}})
    again.finish([0, 1], keep=[0])
    assert sorted(p.name for p in again.folder.iterdir()) == ["best-seed0.ckpt", "status.json"]
    assert JobState(tmp_path / "job", ["--config", "a.yaml"]).phase == "done"


def test_results_rows_are_appended_under_one_header(tmp_path):
    path = tmp_path / "r.csv"
    append_row(path, {"dataset": "a", "seed": 0}, FIELDS)
    append_row(path, {"dataset": "b", "seed": 1, "ignored": 3}, FIELDS)
    rows = read_rows(path)
    assert [(r["dataset"], r["seed"], r["test_value"]) for r in rows] == [("a", "0", ""),
                                                                          ("b", "1", "")]
