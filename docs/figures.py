"""Draws the results pages' figures from the CSV/JSON files in ``results/`` (matplotlib, Agg).

Usage: ``python docs/figures.py [OUT_DIR]`` (default ``docs/_static/figures``). Every figure
reads only files under ``results/``; ``tests/test_docs.py`` redraws them into a temporary folder
and compares them with the committed PNGs.
"""

from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from statistics import mean, stdev

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
SETS = {"solubility": "solubility", "freesolv": "FreeSolv", "ace_chembl1862_ki": "ABL1 Ki",
        "ace_chembl219_ki": "D4 Ki", "rdkit_chembl2321810": "ChEMBL2321810"}
NORM_COLOURS = {"sepnorm": "tab:blue", "sharenorm": "tab:orange"}
PNG = {"dpi": 100, "metadata": {"Software": None}}


def _rows(name: str) -> list[dict[str, str]]:
    with open(RESULTS / name, newline="") as f:
        return list(csv.DictReader(f))


def _mean_std(values: list[float]) -> tuple[float, float]:
    return mean(values), (stdev(values) if len(values) > 1 else 0.0)


def cpu_grid_curves(out: Path) -> None:
    """Validation metric against step, SepNorm and ShareNorm, each seed.

    Source: ``cpu_grid_curves.csv``.
    """
    curves: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
    monitors = {}
    for r in _rows("cpu_grid_curves.csv"):
        curves[(r["dataset"], r["norm"], r["seed"])].append((int(r["step"]), float(r["value"])))
        monitors[r["dataset"]] = r["monitor"]
    datasets = ["zinc_subset", "zinc", "molhiv"]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, dataset in zip(axes, datasets, strict=True):
        for (ds, norm, seed), points in sorted(curves.items()):
            if ds != dataset:
                continue
            steps, values = zip(*sorted(points), strict=True)
            ax.plot(steps, values, marker="o", ms=3, color=NORM_COLOURS[norm], alpha=0.8,
                    label=norm if seed == "0" else None)
        ax.set_title(dataset)
        ax.set_xlabel("training step")
        ax.set_ylabel(monitors[dataset])
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("CPU grid (cpu_10min preset): validation every 200 steps, seeds 0-2", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "cpu_grid_curves.png", **PNG)
    plt.close(fig)


def small_data_mae(out: Path) -> None:
    """Test MAE of the default against chemprop, mean ± std over seeds (``small_data.csv``)."""
    methods = {"chemprop": "chemprop 2.3.1", "chemprop_rdkit2d": "chemprop + RDKit 2D",
               "ours_s256": "graphormer-sepnorm default"}
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in _rows("small_data.csv"):
        method = r["method"]
        if r["set"].startswith("ace_") and method == "chemprop_rdkit2d_norm":
            method = "chemprop_rdkit2d"  # the better chemprop + RDKit 2D variant on the Ki sets
        elif r["set"].startswith("ace_") and method == "chemprop_rdkit2d":
            continue
        if r["set"] in SETS and method in methods:
            values[(r["set"], method)].append(float(r["test_mae"]))
    fig, ax = plt.subplots(figsize=(8, 3.4))
    width = 0.27
    for k, (method, label) in enumerate(methods.items()):
        stats = [_mean_std(values[(s, method)]) for s in SETS]
        xs = [i + (k - 1) * width for i in range(len(SETS))]
        ax.bar(xs, [m for m, _ in stats], width, yerr=[s for _, s in stats], capsize=3,
               label=label)
    ax.set_xticks(range(len(SETS)), list(SETS.values()))
    ax.set_ylabel("test MAE (mean ± std, 3 seeds)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "small_data_mae.png", **PNG)
    plt.close(fig)


def calibration(out: Path) -> None:
    """Test coverage of the calibrated 90% intervals per set and method, each seed."""
    coverage: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in _rows("small_data.csv"):
        if r["set"] in SETS and r["method"] == "ours_s256":
            coverage[(r["set"], "default")].append(float(r["coverage90"]))
    for r in _rows("chemprop_uncertainty.csv"):
        if r["set"] in SETS:
            coverage[(r["set"], r["method"])].append(float(r["coverage90"]))
    methods = {"default": "graphormer-sepnorm default", "chemprop_mve": "chemprop MVE",
               "chemprop_ensemble": "chemprop ensemble of 5"}
    fig, ax = plt.subplots(figsize=(9.5, 3.4))
    ax.axhspan(0.85, 0.95, color="0.9", label="0.85-0.95")
    ax.axhline(0.9, color="0.4", lw=1, ls="--")
    for k, (method, label) in enumerate(methods.items()):
        for i, s in enumerate(SETS):
            ys = coverage[(s, method)]
            ax.scatter([i + (k - 1) * 0.22] * len(ys), ys, s=18, color=f"C{k}",
                       label=label if i == 0 else None)
    ax.set_xticks(range(len(SETS)), list(SETS.values()))
    ax.set_ylabel("test coverage of the 90% interval")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out / "calibration90.png", **PNG)
    plt.close(fig)


def throughput(out: Path) -> None:
    """Prediction rate on 100,000 ZINC molecules, each command and setting (same evening)."""
    bars: list[tuple[str, float]] = []
    with open(RESULTS / "chemprop_throughput.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r["rows"] == 100000 and r["date"].startswith("2026-11-28"):
                label = {"chemprop": "chemprop", "chemprop_rdkit2d": "chemprop + RDKit 2D"}
                setting = f"{r['workers']} loader workers" if r["workers"] else "its defaults"
                bars.append((f"{label[r['method']]}, {setting}", r["mol_per_s"]))
    for r in _rows("predict_throughput.csv"):
        bars.append((f"default (GP blend), {r['workers']} workers, {r['date'][11:16]}",
                     float(r["mol_per_s"])))
    fig, ax = plt.subplots(figsize=(8, 3))
    labels, rates = zip(*bars, strict=True)
    colours = ["C2" if lab.startswith("default") else "C0" for lab in labels]
    ax.barh(range(len(bars)), rates, color=colours)
    ax.set_yticks(range(len(bars)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("molecules/s, whole command, 2 cores")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "predict_throughput.png", **PNG)
    plt.close(fig)


def hpo_history(out: Path) -> None:
    """The search's objective by trial, pruned trials apart, and the best so far.

    Source: ``hpo_freesolv_trials.csv`` (the study's ``trials.csv``).
    """
    rows = [r for r in _rows("hpo_freesolv_trials.csv") if r["value"]]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for state, colour in (("COMPLETE", "C0"), ("PRUNED", "0.6")):
        picked = [r for r in rows if r["state"] == state]
        ax.scatter([int(r["number"]) for r in picked], [float(r["value"]) for r in picked],
                   color=colour, s=22, zorder=3,
                   label="finished" if state == "COMPLETE" else "pruned (last reported)")
    done = sorted((int(r["number"]), float(r["value"])) for r in rows if r["state"] == "COMPLETE")
    best = [min(v for _, v in done[:k + 1]) for k in range(len(done))]
    ax.step([n for n, _ in done], best, where="post", color="C1", label="best so far")
    ax.axhline(done[0][1], color="0.4", lw=1, ls="--", label="trial 0: the recipe")
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"{rows[0]['metric']} (validation)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "hpo_history.png", **PNG)
    plt.close(fig)


def hpo_importances(out: Path) -> None:
    """Each searched key's importance for the objective (``hpo_freesolv_importances.csv``)."""
    rows = _rows("hpo_freesolv_importances.csv")[::-1]
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.barh([r["param"] for r in rows], [float(r["importance"]) for r in rows], color="C0")
    ax.set_xlabel("importance (Optuna's default evaluator, sums to 1)")
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "hpo_importances.png", **PNG)
    plt.close(fig)


def assay_tables(out: Path) -> None:
    """Test ROC-AUC per Tox21 assay and on HIV 3-class, each method, mean ± std over seeds.

    Source: ``assay_tables.csv``.
    """
    methods = {"chemprop": "chemprop 2.3.1",
               "chemprop_rdkit2d_norm": "chemprop + RDKit 2D (v1 normalized)",
               "ours": "graphormer-sepnorm default"}
    rows = [r for r in _rows("assay_tables.csv") if r["method"] in methods]
    labels = list(json.loads(next(r for r in rows if r["set"] == "tox21")
                             ["test_roc_auc_per_label"]))
    columns = [*labels, "Tox21 mean", "HIV 3-class"]
    fig, ax = plt.subplots(figsize=(11, 3.6))
    width = 0.27
    for k, (method, name) in enumerate(methods.items()):
        mine = [r for r in rows if r["method"] == method]
        tox21 = [r for r in mine if r["set"] == "tox21"]
        values = [[json.loads(r["test_roc_auc_per_label"])[c] for r in tox21] for c in labels]
        values += [[float(r["test_roc_auc"]) for r in tox21],
                   [float(r["test_roc_auc"]) for r in mine if r["set"] == "hiv3"]]
        stats = [_mean_std(v) if v else (float("nan"), 0.0) for v in values]
        ax.bar([i + (k - 1) * width for i in range(len(columns))], [m for m, _ in stats], width,
               yerr=[s for _, s in stats], capsize=2, label=name)
    ax.set_xticks(range(len(columns)), columns, rotation=35, ha="right", fontsize=8)
    ax.set_ylim(0.5, 1.0)
    ax.set_ylabel("test ROC-AUC (mean ± std)")
    ax.legend(fontsize=8, loc="upper center", ncol=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "assay_tables_roc_auc.png", **PNG)
    plt.close(fig)


FIGURES: dict[str, Callable[[Path], None]] = {
    "cpu_grid_curves.png": cpu_grid_curves,
    "small_data_mae.png": small_data_mae,
    "calibration90.png": calibration,
    "predict_throughput.png": throughput,
    "hpo_history.png": hpo_history,
    "hpo_importances.png": hpo_importances,
    "assay_tables_roc_auc.png": assay_tables,
}


def main(out: Path) -> None:
    """Draw every figure into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for name, draw in FIGURES.items():
        draw(out)
        print(out / name)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "_static" / "figures")
