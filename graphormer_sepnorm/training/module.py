"""Lightning training of Graphormer: the task's loss and metrics, optimizer and schedule."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch import Tensor, nn
from torchmetrics.aggregation import CatMetric

from graphormer_sepnorm.checkpoints import require_current, stamp
from graphormer_sepnorm.data.batch import GraphormerBatch
from graphormer_sepnorm.nn.backends import Backend, set_backend
from graphormer_sepnorm.nn.compiling import compile_kwargs
from graphormer_sepnorm.nn.config import GraphormerConfig
from graphormer_sepnorm.nn.model import Graphormer
from graphormer_sepnorm.training.batch_statistics import refuse_size_grouped_batch_norm
from graphormer_sepnorm.training.init_from import InitReport, init_model_from
from graphormer_sepnorm.training.metrics import TaskMetrics, WeightedMean
from graphormer_sepnorm.training.optimization import adamw_with_schedule
from graphormer_sepnorm.training.tasks import TASKS, make_task

#: Graphormer-slim, the config's defaults.
DEFAULT_CONFIG = GraphormerConfig()


def _check_dataset_info(info: dict[str, Any] | None) -> dict[str, Any]:
    if info is None:
        raise ValueError("dataset_info is required: pass the datamodule's `dataset_info` "
                         "(the CLI links it automatically)")
    missing = {"task", "target_names", "atom_feature_dims", "edge_feature_dims"} - set(info)
    if missing:
        raise ValueError(f"dataset_info lacks {sorted(missing)}")
    if info["task"] not in TASKS:
        raise ValueError(f"unknown task {info['task']!r}; use one of {sorted(TASKS)}")
    return info


def model_config(config: GraphormerConfig | Mapping[str, Any] | None,
                 info: Mapping[str, Any]) -> GraphormerConfig:
    """``config`` (a dict is read with ``from_dict``) with the data's sizes from ``info``."""
    if config is None:
        config = GraphormerConfig()
    elif isinstance(config, Mapping):
        config = GraphormerConfig.from_dict(config)
    return config.replace(atom_feature_dims=tuple(info["atom_feature_dims"]),
                          edge_feature_dims=tuple(info["edge_feature_dims"]),
                          num_tasks=len(info["target_names"]) * int(info.get("num_classes", 1)),
                          mol_feature_dim=int(info.get("mol_feature_dim", 0)),
                          extra_feature_dim=len(info.get("feature_columns", [])))


class GraphormerModule(LightningModule):
    """Trains a :class:`~graphormer_sepnorm.nn.model.Graphormer` for regression or classification.

    The task (:mod:`~graphormer_sepnorm.training.tasks`, from ``dataset_info['task']``) gives
    the loss, the main metric and the predictions: regression uses the L1 loss and logs
    ``mae``; binary classification uses BCE with logits and logs ``roc_auc`` (ROC-AUC averaged
    over tasks when there are several). Metrics are torchmetrics objects, one per stage, logged
    as ``val/mae``, ``test/mae``, ``val/roc_auc``, ``test/roc_auc``, with the losses as
    ``train/loss``, ``val/loss``, ``test/loss``. Beside them (see
    :mod:`~graphormer_sepnorm.training.metrics`): ``rmse`` and ``r2`` for regression,
    ``pr_auc`` and ``ece`` for binary tasks, and per-target values (``test/rmse_<target>``)
    when there are several targets; regression metrics are in the targets' units. The
    optimizer is AdamW (its fused kernel on CPU and CUDA) with Graphormer's schedule (linear
    warmup, polynomial decay).

    Every hyperparameter is stored as a plain value (the config as ``hparams['config']``, a
    dict), so checkpoints load with ``weights_only=True`` and carry what prediction needs
    (``dataset_info``: featurizer, task, target names; the target scaler as the task's
    buffers). A checkpoint of an earlier format is refused; ``graphormer-sepnorm-convert``
    converts it once (:mod:`~graphormer_sepnorm.convert`).

    Args:
        dataset_info: from the datamodule's ``dataset_info``: ``task`` (``'regression'`` or
            ``'binary'``), ``target_names``, ``atom_feature_dims``, ``edge_feature_dims`` and
            optionally ``featurizer`` (its config).
        config: the model's hyperparameters (a dict of them is accepted, as checkpoints store
            it); ``atom_feature_dims``, ``edge_feature_dims`` and ``num_tasks`` are taken from
            ``dataset_info``. Default: ``GraphormerConfig()`` (Graphormer-slim).
        backend: how the model runs (:func:`~graphormer_sepnorm.nn.backends.set_backend`):
            ``'auto'`` (default), ``'reference'``, ``'cpu'`` or ``'cuda'``; the weights are the
            same.
        init_from: a checkpoint whose model weights start this one at fit start (fine-tuning;
            see :func:`~graphormer_sepnorm.training.init_from.init_model_from`): a head of
            another shape and encoders of other feature dims start afresh. A resumed fit's
            checkpoint, or one loaded with ``load_from_checkpoint``, takes precedence.
            ``None`` or ``'none'``: from scratch (default).
        lr: peak learning rate. Default: 2e-4.
        head_lr: peak learning rate of the head alone (a fresh head on a pretrained encoder
            may want more); the schedule scales both alike. ``None``: ``lr`` (default).
        end_lr: learning rate at ``total_steps``, at most ``lr`` (``head_lr`` ends at the same
            fraction of its peak). Default: 1e-9.
        weight_decay: AdamW's. Default: 0.01.
        warmup_steps: warmup steps, or a fraction of ``total_steps`` if a float below 1.
            Default: 40000.
        total_steps: steps of the schedule; ``None`` takes the trainer's estimate
            (``max_epochs`` or ``max_steps``). Default: 400000.
        power: exponent of the decay. Default: 1 (linear).
        standardize_targets: regression only: train on targets standardized with the training
            set's mean and std (set at fit start, stored in the checkpoint). Default: false.
        statistics_graphs: training molecules over which SepNorm's graph-token BatchNorm
            statistics are re-estimated, without dropout, before each validation (per process;
            :class:`~graphormer_sepnorm.training.batch_statistics.ReestimateGraphTokenStatistics`,
            one of the CLI's default callbacks); 0: they stay the running averages of training.
            Default: 4096.
        seeds: packed replicas: one model per seed, trained together in this fit, by a
            :class:`~graphormer_sepnorm.training.packed_module.PackedGraphormerModule` (the
            CLI's :func:`~graphormer_sepnorm.training.factory.graphormer_module` makes one
            when seeds are given). ``None``: one model (default).
        compile: ``torch.compile`` mode for the model (``'default'``, ``'reduce-overhead'``:
            CUDA graphs as well, ``'max-autotune'``), applied when the run starts, with the
            inductor settings of :mod:`~graphormer_sepnorm.nn.compiling`; ``None``: eager
            (default). The CPU wing's encoder is not traced (its C kernels are opaque to
            dynamo). Grid batches (:mod:`~graphormer_sepnorm.grid`) have static shapes and
            trace as one graph.
    """

    def __init__(
        self,
        dataset_info: dict[str, Any] | None = None,
        config: GraphormerConfig = DEFAULT_CONFIG,
        backend: Backend = "auto",
        init_from: str | None = None,
        lr: float = 2e-4,
        head_lr: float | None = None,
        end_lr: float = 1e-9,
        weight_decay: float = 0.01,
        warmup_steps: int | float = 40000,
        total_steps: int | None = 400000,
        power: float = 1.0,
        standardize_targets: bool = False,
        statistics_graphs: int = 4096,
        seeds: list[int] | None = None,
        compile: str | None = None,
    ) -> None:
        super().__init__()
        if seeds and type(self) is GraphormerModule:
            raise ValueError("seeds: packed replicas are a PackedGraphormerModule; "
                             "training.factory.graphormer_module(...) picks the class, "
                             "load_module(path) reads either checkpoint")
        info = _check_dataset_info(dataset_info)
        config = model_config(config, info)
        self.save_hyperparameters(ignore=["config"])
        # the config as plain values, data sizes included: checkpoints load with weights_only
        self.save_hyperparameters({"config": config.to_dict()})
        self.model = self.build_model(config)
        self.task = make_task(info["task"], info["target_names"], info.get("num_classes"))
        self.val_metrics = self.task.metrics()
        self.test_metrics = self.task.metrics()
        # Losses as metrics too: reduced once per epoch, so DDP ranks may see uneven batch counts.
        self.val_loss = WeightedMean()
        self.test_loss = WeightedMean()
        # raw validation outputs and targets side by side, for the task's calibration
        self.val_outputs = CatMetric(nan_strategy="disable")
        self._weights_from_checkpoint = False
        self._compiled = False

    def build_model(self, config: GraphormerConfig) -> nn.Module:
        """The model this module trains: a :class:`Graphormer` on the ``backend`` asked for."""
        return set_backend(Graphormer(config), self.hparams["backend"])

    def init_weights_from(self, path: str) -> InitReport:
        """Copies the matching weights of checkpoint ``path`` (``init_from``) into the model."""
        return init_model_from(self.model, path)

    @property
    def config(self) -> GraphormerConfig:
        """The model's hyperparameters (the data sizes filled in)."""
        return self.model.config

    @property
    def monitor(self) -> str:
        """The validation metric the best checkpoint is chosen on (the task's main metric)."""
        return f"val/{self.task.metric_name}"

    @property
    def monitor_mode(self) -> str:
        """``'min'`` or ``'max'``: which :attr:`monitor` value is better."""
        return self.task.mode

    @property
    def dataset_info(self) -> dict[str, Any]:
        """The data the model was trained on (task, target names, feature dims, featurizer)."""
        return dict(self.hparams["dataset_info"])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Marks the checkpoint as of the current format (:func:`~.checkpoints.stamp`)."""
        stamp(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuses a checkpoint of another format before its weights load.

        Raises:
            CheckpointError: an earlier format: ``graphormer-sepnorm-convert`` converts it.
        """
        require_current(checkpoint)
        self._weights_from_checkpoint = True

    def forward(self, batch: GraphormerBatch) -> Tensor:
        """Predictions in the targets' units (probabilities for classification), ``[B, T]``."""
        return self.to_predictions(self.model(batch))

    def to_predictions(self, out: Tensor) -> Tensor:
        """The head's outputs ``[B, T]`` in the targets' units (probabilities if binary)."""
        return self.task.to_predictions(out.float())

    def configure_model(self) -> None:
        """Compiles the model once when ``compile`` is set (Lightning calls this per run)."""
        mode = self.hparams.get("compile")
        if not mode or self._compiled:
            return
        # one graph per padded length and batch size; MolHIV's lengths alone pass dynamo's 8
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        self.model.compile(**compile_kwargs(mode))
        self._compiled = True

    def setup(self, stage: str) -> None:
        """At fit start: refuses size-grouped batches for BatchNorm, loads ``init_from``.

        Also sets the target scaler when ``standardize_targets``, and lets deterministic runs
        leave new tensors unfilled (see below).
        """
        # A deterministic trainer (`deterministic: warn` in the configs) has PyTorch fill every
        # new tensor with NaN, to expose reads of memory never written, at a cost on every
        # allocation. No op here reads what it has not written, so runs stay the same.
        torch.utils.deterministic.fill_uninitialized_memory = False
        datamodule = self._trainer.datamodule if self._trainer is not None else None
        if self.task.scales_targets and self.task.num_targets > 1 and \
                hasattr(datamodule, "target_statistics"):
            # several targets are compared on their training standard deviations
            stds = [max(s, 1e-8) for s in datamodule.target_statistics()[1]]
            for metrics in self.modules():
                if isinstance(metrics, TaskMetrics):
                    metrics.scale = stds
        if stage != "fit":
            return
        refuse_size_grouped_batch_norm(self.model, datamodule)
        init_from = self.hparams.get("init_from")
        if init_from not in (None, "none") and not self._weights_from_checkpoint:
            report = self.init_weights_from(init_from)
            if self.trainer.is_global_zero:
                print(report, flush=True)
        if self.hparams["standardize_targets"] and self.task.scales_targets:
            self.task.set_scaler(*datamodule.target_statistics())
        if self.config.extra_feature_dim and not self._weights_from_checkpoint:
            self.set_feature_scaler(*datamodule.feature_statistics())

    def set_feature_scaler(self, mean: list[float], std: list[float]) -> None:
        """Sets the model's standardization of the table's descriptor columns."""
        self.model.set_feature_scaler(mean, std)

    def training_step(self, batch: GraphormerBatch, batch_idx: int) -> Tensor:
        """One optimization step's loss."""
        loss = self.task.loss(self.model(batch).float(), batch.y)
        self.log("train/loss", loss, batch_size=batch.num_graphs, prog_bar=True)
        return loss

    def on_train_batch_start(self, *args: Any) -> None:
        """With CUDA graphs (``compile='reduce-overhead'``), marks a new step.

        The previous step's graph outputs may then be overwritten. Before every training,
        validation and test batch.
        """
        if self.hparams.get("compile") == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()

    on_validation_batch_start = on_test_batch_start = on_train_batch_start

    def evaluated(self, batch: GraphormerBatch) -> Tensor:
        """The model's float32 outputs on an evaluation batch, computed eagerly.

        A compiled model is not compiled again for evaluation: its batches come in many padded
        lengths and sizes, each a compile of its own that costs more than the evaluation. So no
        output is owned by a CUDA graph either, and the metrics may keep them past the next step.
        """
        with torch.compiler.set_stance("force_eager"):
            return self.model(batch).float()

    def _evaluate(self, batch: GraphormerBatch, stage: str) -> Tensor:
        out = self.evaluated(batch)
        if stage == "val" and self.task.calibrates:
            self.val_outputs.update(torch.cat([out, batch.y.to(out.dtype)], 1))
        loss = self.val_loss if stage == "val" else self.test_loss
        loss.update(self.task.loss(out, batch.y), weight=batch.num_graphs)
        self.log(f"{stage}/loss", loss, batch_size=batch.num_graphs)
        # logits for the classification metrics, the targets' units for the regression ones
        preds = self.task.metric_inputs(out)
        (self.val_metrics if stage == "val" else self.test_metrics).update(preds, batch.y)
        return preds

    def validation_step(self, batch: GraphormerBatch, batch_idx: int) -> Tensor:
        """Updates the validation loss and metrics.

        Returns:
            The metrics' inputs (regression: predictions in the targets' units), for callbacks
            such as :class:`~graphormer_sepnorm.ensemble.callback.FingerprintGPBlend`.
        """
        return self._evaluate(batch, "val")

    def test_step(self, batch: GraphormerBatch, batch_idx: int) -> Tensor:
        """Updates the test loss and metrics; returns the metrics' inputs, as validation does."""
        return self._evaluate(batch, "test")

    def on_validation_epoch_end(self) -> None:
        """Logs the validation metrics (:mod:`~graphormer_sepnorm.training.metrics`).

        In a fit, also calibrates the task on the validation outputs (classifiers: the
        probabilities' temperature), so the checkpoint saved after this validation predicts
        with it.
        """
        self.log_metrics("val", self.val_metrics)
        if not self.val_outputs.update_count:
            return
        both = self.val_outputs.compute()  # synchronized across processes
        self.val_outputs.reset()
        if self.trainer.state.fn == "fit" and not self.trainer.sanity_checking:
            t = self.task.num_targets
            for name, value in self.task.calibrate(both[:, :-t], both[:, -t:]).items():
                self.log(f"val/{name}", value, sync_dist=False)

    def on_test_epoch_end(self) -> None:
        """Logs the test metrics."""
        self.log_metrics("test", self.test_metrics)

    def log_metrics(self, stage: str, metrics: TaskMetrics, suffix: str = "") -> None:
        """Logs ``<stage>/<name><suffix>`` for each of ``metrics``' values, then resets them."""
        if not metrics.update_count:
            return
        # computed (and synchronized across processes) by torchmetrics, so logged unsynced
        for name, value in metrics.compute().items():
            self.log(f"{stage}/{name}{suffix}", value, sync_dist=False,
                     prog_bar=name == self.task.metric_name and not suffix)
        metrics.reset()

    def predict_step(self, batch: GraphormerBatch, batch_idx: int) -> Tensor:
        """Predictions in the targets' units (probabilities for classification)."""
        return self(batch)

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW and the warmup + polynomial-decay schedule, stepped every optimizer step."""
        return adamw_with_schedule(self, self.hparams, self.trainer)

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer,
                                    gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clips as Lightning does, but lets bf16-mixed clip for the fused AdamW.

        Lightning refuses to clip under mixed precision for an optimizer that unscales gradients
        in its step (the fused AdamW), but bfloat16 has no gradient scaler: the gradients are
        already true ones, so they are clipped directly.
        """
        if gradient_clip_val and self.trainer.precision == "bf16-mixed":
            if gradient_clip_algorithm == "value":
                torch.nn.utils.clip_grad_value_(self.parameters(), gradient_clip_val)
            else:
                torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val)
            return
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
