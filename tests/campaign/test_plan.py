"""Plans: runs expand into jobs in order, with the recipe's arguments; bad plans are refused."""

import pytest

from graphormer_sepnorm.campaign.plan import Job, load_plan, plan_from_dict, select


def test_runs_expand_in_order_packed_and_not():
    plan = plan_from_dict({"defaults": {"presets": ["p.yaml"], "args": ["--x", "1"]},
                           "runs": [{"dataset": "molhiv", "config": "m.yaml", "seeds": [0, 1],
                                     "packed": True},
                                    {"dataset": "zinc", "config": "z.yaml", "seeds": [3, 4],
                                     "norms": ["sharenorm", "sepnorm"]}]}, "grid")
    assert plan.name == "grid" and plan.keep_best == "first" and plan.moments == "float32"
    assert [j.name for j in plan.jobs] == [
        "molhiv-sepnorm-seeds0-1", "molhiv-sharenorm-seeds0-1", "zinc-sharenorm-seed3",
        "zinc-sepnorm-seed3", "zinc-sharenorm-seed4", "zinc-sepnorm-seed4"]
    packed = plan.jobs[1]
    assert packed.recipe() == ["--config", "m.yaml", "--config", "p.yaml", "--seed_everything",
                               "0", "--data.init_args.seed", "0", "--model.config.sepnorm",
                               "false", "--model.seeds", "[0, 1]", "--x", "1"]
    # one seed of it alone (its test): no --model.seeds, its own seed
    assert packed.recipe(1)[4:10] == ["--seed_everything", "1", "--data.init_args.seed", "1",
                                      "--model.config.sepnorm", "false"]
    assert "--model.seeds" not in packed.recipe(1)
    assert [j.name for j in select(plan.jobs, ["zinc-*-seed4"])] == ["zinc-sharenorm-seed4",
                                                                    "zinc-sepnorm-seed4"]
    # keep_best: first keeps the best model of each run's first seed: 0 and 3 here
    assert [j.run_first_seed for j in plan.jobs] == [0, 0, 3, 3, 3, 3]


@pytest.mark.parametrize("bad, match", [
    ({"runs": [{"dataset": "x"}]}, "missing"),
    ({"runs": [{"dataset": "x", "config": "c", "seed": [0]}]}, "unknown keys"),
    ({"runs": [{"dataset": "x", "config": "c", "norms": ["batchnorm"]}]}, "norms"),
    ({"runs": [{"dataset": "x", "config": "c", "seeds": [1, 1]}]}, "distinct"),
    ({"runs": [{"dataset": "x", "config": "c"}, {"dataset": "x", "config": "d"}]}, "repeat"),
    ({"runs": [{"dataset": "x", "config": "c"}], "moments": "fp8"}, "moments"),
    ({"runs": []}, "at least one run"),
])
def test_bad_plans_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        plan_from_dict(bad, "p")


def test_shipped_plans_load():
    from conftest import REPO

    table = load_plan(REPO / "campaigns" / "paper_table.yaml")
    names = [j.name for j in table.jobs]
    assert names[:2] == ["molhiv-sepnorm-seeds0-1-2-3", "molhiv-sharenorm-seeds0-1-2-3"]
    assert names[2:4] == ["zinc_subset-sepnorm-seeds0-1-2-3",
                          "zinc_subset-sharenorm-seeds0-1-2-3"]
    assert names[4:] == ["zinc-sepnorm-seeds0", "zinc-sharenorm-seeds0"]  # one packed replica
    assert table.jobs[4].recipe()[-2:] == ["--model.seeds", "[0]"]
    grid = load_plan(REPO / "campaigns" / "cpu_grid.yaml")
    assert len(grid.jobs) == 18 and not any(j.packed for j in grid.jobs)
    for job in (*table.jobs, *grid.jobs):
        assert all((REPO / c).is_file() for c in job.configs), job.configs


def test_job_names_say_packed_or_not():
    assert Job("d", "sepnorm", (5,), ("c",)).name == "d-sepnorm-seed5"
    assert Job("d", "sepnorm", (5, 6), ("c",)).packed
    one = Job("d", "sepnorm", (5,), ("c",), pack=True)  # one seed fitted as a packed replica
    assert one.packed and one.name == "d-sepnorm-seeds5"
    assert one.recipe()[-2:] == ["--model.seeds", "[5]"]
    assert "--model.seeds" not in one.recipe(5)  # its test: a single model
