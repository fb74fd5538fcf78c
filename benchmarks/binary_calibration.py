r"""Temperature scaling of a binary checkpoint: test calibration before and after.

Loads a binary-task checkpoint (default: the bundled MolHIV model), computes its raw logits on
the validation and test splits of its dataset config, fits the inverse temperature on
validation as a fit does (:meth:`BinaryTask.calibrate
<graphormer_sepnorm.training.tasks.BinaryTask.calibrate>`) and prints the test expected
calibration error (15 bins), negative log-likelihood and Brier score with the checkpoint's own
scale and with the fitted one, and ROC-AUC (which scaling cannot change).

    GRAPHORMER_SEPNORM_DATA_MIRROR=$PWD/mirror OMP_NUM_THREADS=2 \
        .venv/bin/python benchmarks/binary_calibration.py --config configs/molhiv.yaml
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import binary_auroc, binary_calibration_error

from graphormer_sepnorm.cli import instantiate
from graphormer_sepnorm.prediction.checkpoints import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]


@torch.no_grad()
def logits_and_labels(module, loader) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw logits ``[N, T]`` and labels of every batch of ``loader``."""
    outs, ys = [], []
    for batch in loader:
        outs.append(module.model(batch).float())
        ys.append(batch.y.float())
    return torch.cat(outs), torch.cat(ys)


def scores(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """ECE, NLL, Brier and ROC-AUC of one target's logits."""
    p = torch.sigmoid(logits)
    return {"ece": float(binary_calibration_error(p, labels.long(), n_bins=15)),
            "nll": float(F.binary_cross_entropy_with_logits(logits, labels)),
            "brier": float((p - labels).square().mean()),
            "roc_auc": float(binary_auroc(logits, labels.long()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "molhiv.yaml"))
    parser.add_argument("--checkpoint", default="molhiv",
                        help="a checkpoint path or a bundled name (default: molhiv)")
    args = parser.parse_args()
    cli = instantiate(["--config", args.config, "--trainer.logger", "false"], callbacks=[])
    datamodule = cli.datamodule
    module = load_checkpoint(args.checkpoint).eval()
    datamodule.setup("fit")
    datamodule.setup("test")
    val = logits_and_labels(module, datamodule.val_dataloader())
    test = logits_and_labels(module, datamodule.test_dataloader())
    saved = module.task.logit_scale.clone()
    module.task.calibrate(*val)
    fitted = module.task.logit_scale
    print(f"{Path(args.checkpoint).name}: {len(val[0])} validation, {len(test[0])} test "
          f"molecules; inverse temperature saved {saved.tolist()}, fitted on validation "
          f"{[round(v, 4) for v in fitted.tolist()]}")
    for t in range(test[0].shape[1]):
        present = ~torch.isnan(test[1][:, t])
        logits, labels = test[0][present, t], test[1][present, t]
        before, after = scores(logits * saved[t], labels), scores(logits * fitted[t], labels)
        for name in before:
            print(f"  test {name:8s} {before[name]:.4f} -> {after[name]:.4f}")


if __name__ == "__main__":
    main()
