"""Several seeds of one recipe in one Lightning fit: the module of packed replicas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning
import torch
from torch import Tensor, nn

from graphormer_sepnorm.checkpoints import FORMAT_KEY, FORMAT_VERSION
from graphormer_sepnorm.data.batch import GraphormerBatch
from graphormer_sepnorm.nn.compiling import compiled
from graphormer_sepnorm.nn.config import GraphormerConfig
from graphormer_sepnorm.training.init_from import InitReport, init_model_from
from graphormer_sepnorm.training.module import GraphormerModule
from graphormer_sepnorm.training.optimization import adamw_with_schedule
from graphormer_sepnorm.training.packed import (
    PackedReplicas,
    clip_grad_norm_per_replica,
    exempt_untrained,
)


class PackedGraphormerModule(GraphormerModule):
    """``R`` seeds of one recipe trained together (:class:`~.packed.PackedReplicas`).

    :class:`~graphormer_sepnorm.training.module.GraphormerModule` becomes this when given
    ``seeds`` (``--model.seeds '[0, 1, 2, 3]'``); the datamodule then serves grid batches
    (:class:`~graphormer_sepnorm.grid.engine.GridEngine`), each replica's drawn with its own
    seed.
    Replica ``r`` starts from ``torch.manual_seed(seeds[r])``, has its own dropout draws and
    BatchNorm statistics, and its gradient is clipped by its own norm.

    Logged: ``train/loss`` (the replicas' mean), ``val/<metric>_seed<s>`` per replica and
    ``val/<metric>`` their mean (what the best checkpoint monitors; its checkpoints
    hold all replicas), likewise for ``test``. Each replica's best checkpoint, in a single run's
    format (loads with ``GraphormerModule.load_from_checkpoint``, predicts, tests), goes to
    ``<log dir>/replicas/seed<s>.ckpt`` whenever its validation metric improves.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seeds = list(self.hparams["seeds"])
        self.val_metrics = nn.ModuleList(self.task.metrics() for _ in self.seeds)
        self.test_metrics = nn.ModuleList(self.task.metrics() for _ in self.seeds)
        self.best_val: list[float | None] = [None] * len(self.seeds)
        self._train_losses: Any = None  # replica_losses, compiled with the model
        self._single: list[GraphormerModule] = []  # replica_checkpoint's (not a submodule)

    def build_model(self, config: GraphormerConfig) -> PackedReplicas:
        """One model per seed, each initialized from ``torch.manual_seed(seed)``, packed."""
        models = []
        for seed in self.hparams["seeds"]:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                models.append(super().build_model(config))
        return PackedReplicas(models)

    def init_weights_from(self, path: str) -> InitReport:
        """``init_from`` into every replica (the report is each replica's)."""
        for index in range(len(self.seeds)):
            replica = self.model.replica(index)
            report = init_model_from(replica, path)
            self.model.set_replica(index, replica)
        return report

    def set_feature_scaler(self, mean: list[float], std: list[float]) -> None:
        """Sets every replica's standardization of the table's descriptor columns."""
        for index in range(len(self.seeds)):
            replica = self.model.replica(index)
            replica.set_feature_scaler(mean, std)
            self.model.set_replica(index, replica)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keeps each replica's best validation metric, so a resumed fit compares with it."""
        super().on_save_checkpoint(checkpoint)
        checkpoint["replica_best_val"] = list(self.best_val)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restores each replica's best validation metric.

        Else the first validation after a resume would overwrite every
        ``replicas/seed<s>.ckpt``, better or not.
        """
        super().on_load_checkpoint(checkpoint)
        saved = checkpoint.get("replica_best_val")
        if saved is not None and len(saved) == len(self.seeds):
            self.best_val = list(saved)

    def configure_model(self) -> None:
        """With ``compile``: the packed model, and the training forward with its losses."""
        super().configure_model()
        if self._compiled and self._train_losses is None:
            self._train_losses = compiled(self.training_losses, self.hparams["compile"])

    def replica_losses(self, batch: GraphormerBatch) -> Tensor:
        """Each replica's loss on its own batch (``[R, B, ...]`` fields), ``[R]``."""
        return torch.vmap(self.task.loss)(self.model(batch).float(), batch.y)

    def training_losses(self, batch: GraphormerBatch) -> tuple[Tensor, Tensor]:
        """The replicas' summed loss (to differentiate) and their mean (to log), in one graph."""
        losses = self.replica_losses(batch)
        return losses.sum(), losses.detach().mean()

    def training_step(self, batch: GraphormerBatch, batch_idx: int) -> Tensor:
        """The sum of the replicas' losses: each replica's gradient is its own loss's."""
        self.model.follow_mode()  # Lightning's mode restore does not reach the skeleton
        total, mean = (self._train_losses or self.training_losses)(batch)
        self.log("train/loss", mean, batch_size=batch.y.shape[1], prog_bar=True)
        return total

    def configure_optimizers(self) -> dict[str, Any]:
        """A single run's AdamW (fused) and schedule, on the replicas' flat parameters.

        Weight decay skips what a single run's would (:func:`~.packed.exempt_untrained`).
        """
        configured = adamw_with_schedule(self, self.hparams, self.trainer)
        exempt_untrained(configured["optimizer"], self.model)
        return configured

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer,
                                    gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clips each replica's gradient by its own norm (or every element by value)."""
        if not gradient_clip_val:
            return
        if gradient_clip_algorithm == "value":
            torch.nn.utils.clip_grad_value_(self.model.flat, gradient_clip_val)
        else:
            clip_grad_norm_per_replica([self.model.flat], gradient_clip_val)

    def _evaluate(self, batch: GraphormerBatch, stage: str) -> None:
        out = self.evaluated(batch)  # one batch for all replicas: [R, B, T]
        metrics = self.val_metrics if stage == "val" else self.test_metrics
        losses = torch.vmap(self.task.loss, in_dims=(0, None))(out, batch.y)
        for index, replica_out in enumerate(out):
            metrics[index].update(self.task.metric_inputs(replica_out), batch.y)
        loss = self.val_loss if stage == "val" else self.test_loss
        loss.update(losses.mean(), weight=batch.num_graphs)
        self.log(f"{stage}/loss", loss, batch_size=batch.num_graphs)

    def on_validation_epoch_end(self) -> None:
        """Logs each replica's metric and their mean; saves replicas that improved."""
        values = self._log_replicas("val", self.val_metrics)
        if self.trainer.sanity_checking:
            return
        sign = 1.0 if self.task.mode == "min" else -1.0
        for index, value in enumerate(values):
            best = self.best_val[index]
            if best is None or sign * value < sign * best:
                self.best_val[index] = value
                if self.trainer.is_global_zero:
                    self._save_replica(index)

    def on_test_epoch_end(self) -> None:
        """Logs each replica's test metric and their mean."""
        self._log_replicas("test", self.test_metrics)

    def _log_replicas(self, stage: str, metrics: nn.ModuleList) -> list[float]:
        name = self.task.metric_name
        values = []
        for metric in metrics:
            values.append(float(metric.compute()[name]))
            metric.reset()
        for seed, value in zip(self.seeds, values, strict=True):
            self.log(f"{stage}/{name}_seed{seed}", value, sync_dist=False)
        self.log(f"{stage}/{name}", sum(values) / len(values), sync_dist=False, prog_bar=True)
        return values

    def replica_checkpoint(self, index: int) -> dict[str, Any]:
        """Replica ``index`` as a single run's checkpoint (weights, hyperparameters, step).

        Beside them, under ``replica``: the seed, the validation metric it was saved for and
        how often the fit validated (``val_check_interval``, ``check_val_every_n_epoch``).
        """
        # keys with "_" (the CLI's _instantiator) are no arguments; they go back in as they were
        private = {k: v for k, v in self.hparams.items() if k.startswith("_")}
        if not self._single:  # one single-run module for every save, on the CPU
            self._single.append(GraphormerModule(**{k: v for k, v in self.hparams.items()
                                                    if k != "seeds" and k not in private}))
        single = self._single[0]
        single.model.load_state_dict({k: v.cpu() for k, v in
                                      self.model.replica_state_dict(index).items()})
        single.task.load_state_dict(self.task.state_dict())
        trainer = self._trainer
        return {FORMAT_KEY: FORMAT_VERSION, "state_dict": single.state_dict(),
                "hyper_parameters": dict(single.hparams) | private,
                "epoch": self.current_epoch, "global_step": self.global_step,
                "pytorch-lightning_version": lightning.__version__,
                "replica": {"seed": self.seeds[index], "val_" + self.task.metric_name:
                            self.best_val[index],
                            "val_check_interval": getattr(trainer, "val_check_interval", None),
                            "check_val_every_n_epoch": getattr(trainer, "check_val_every_n_epoch",
                                                               None)}}

    def _save_replica(self, index: int) -> None:
        folder = Path(self.trainer.log_dir or self.trainer.default_root_dir) / "replicas"
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(self.replica_checkpoint(index), folder / f"seed{self.seeds[index]}.ckpt")
