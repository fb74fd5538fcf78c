"""The ``graphormer-sepnorm`` command: Lightning CLI (fit, validate, test, predict)."""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch import Callback
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.trainer.states import TrainerStatus

from graphormer_sepnorm import datasets
from graphormer_sepnorm.checkpoints import CheckpointError, read_checkpoint
from graphormer_sepnorm.datasets.base import DataError, GraphDataModule
from graphormer_sepnorm.ensemble.callback import FingerprintGPBlend
from graphormer_sepnorm.recipes import resolve_configs
from graphormer_sepnorm.training.checkpointing import DEFAULT_CALLBACKS
from graphormer_sepnorm.training.factory import graphormer_module
from graphormer_sepnorm.training.from_checkpoint import missing_data_file, with_checkpoint_data
from graphormer_sepnorm.training.report import (
    FitLog,
    fit_summary,
    logger_folder,
    print_summary,
    run_test_of_best,
)
from graphormer_sepnorm.training.resume import (
    LastAtEnd,
    StepSeeding,
    TimeLimitPerCall,
    best_checkpoint,
    find_last_checkpoint,
    stopped_by_time,
)


class GraphormerCLI(LightningCLI):
    """Links what the model must agree on with the data.

    ``model.dataset_info`` (task, targets, feature dims, featurizer) comes from the datamodule,
    the datamodule's collator keeps as many hops as the model's edge encoder uses, and packed
    replicas' seeds (``model.seeds``) give the datamodule one batch order per replica. ``--gp``
    configures the fingerprint GP blended with the network
    (:class:`~graphormer_sepnorm.ensemble.callback.FingerprintGPBlend`). ``fit``
    ends with a summary (:func:`~graphormer_sepnorm.training.report.fit_summary`), with the best
    checkpoint's test metrics unless ``--test_best false``.
    """

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Adds the links between model and data, and ``--test_best``."""
        parser.link_arguments("data.dataset_info", "model.dataset_info", apply_on="instantiate")
        parser.link_arguments("model.config.multi_hop_max_dist",
                              "data.init_args.multi_hop_max_dist")
        parser.link_arguments("model.seeds", "data.init_args.replica_seeds")
        # every fit's checkpoints, statistics, diagnostics and LR log, shown by --print_config;
        # `trainer.callbacks+:` adds one, `trainer.callbacks:` replaces them
        parser.set_defaults({"trainer.callbacks": DEFAULT_CALLBACKS})
        # the fingerprint GP beside the network: --gp.weight (a fit's; else a checkpoint's)
        parser.add_lightning_class_args(FingerprintGPBlend, "gp")
        parser.add_argument("--test_best", type=bool, default=True,
                            help="fit only: after fitting, test the best checkpoint when the "
                                 "data has a test split, and print its metrics in the summary")

    def fit(self, **kwargs: Any) -> None:
        """``Trainer.fit``, then the summary block (without the test after Ctrl-C or max_time).

        A fit that fails before its first step leaves no run folder behind.
        """
        started = time.perf_counter()
        folder = logger_folder(self.trainer)
        fresh = folder is not None and not folder.exists()
        try:
            self.trainer.fit(**kwargs)
        except (SystemExit, KeyboardInterrupt):  # Lightning exits after Ctrl-C
            if self.trainer.state.status == TrainerStatus.INTERRUPTED:
                self._summary(started, interrupted=True, test="not run (interrupted)")
            raise
        except Exception:
            if fresh and self.trainer.global_step == 0 and self.trainer.is_global_zero:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        test: Any = None
        if stopped_by_time(self.trainer):
            test = "not run (stopped by max_time; continue with --ckpt_path last)"
        elif self.config[self.subcommand].get("test_best") and not self.trainer.fast_dev_run:
            test = run_test_of_best(self.trainer, self.model, self.datamodule)
        self._summary(started, interrupted=False, test=test)

    def _summary(self, started: float, interrupted: bool, test: Any) -> None:
        if self.trainer.is_global_zero:
            print_summary(fit_summary(self.trainer, time.perf_counter() - started, interrupted,
                                      test))

    def _parse_ckpt_path(self) -> None:
        """Lightning's: the ``--ckpt_path`` file's model hyperparameters go into the config.

        ``last`` and ``best`` are first resolved (:func:`resolve_last`); the file is read by
        :func:`~graphormer_sepnorm.checkpoints.read_checkpoint` (the current format only).
        """
        subcommand = self.config.get("subcommand")
        if subcommand is not None:
            resolve_last(self.config[subcommand], subcommand)
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if not ckpt_path or not Path(ckpt_path).is_file():
            return
        ckpt = read_checkpoint(ckpt_path, mmap=True)
        hparams = {k: v for k, v in (ckpt.get("hyper_parameters") or {}).items()
                   if not k.startswith("_")}
        if not hparams:
            return
        try:
            self.config = self.parser.parse_object({subcommand: {"model": hparams}}, self.config)
        except SystemExit:
            sys.stderr.write("Parsing of ckpt_path hyperparameters failed!\n")
            raise

    def before_instantiate_classes(self) -> None:
        """Checks the data file."""
        if self.subcommand is not None:
            error = missing_data_file(self.config[self.subcommand])
            if error is not None:
                print(f"graphormer-sepnorm {self.subcommand}: error: {error}", file=sys.stderr)
                raise SystemExit(2)


def resolve_last(config: Namespace, subcommand: str) -> None:
    """Makes ``--ckpt_path last`` (and ``best`` outside ``fit``) find the logger's earlier runs.

    Lightning looks for ``last.ckpt`` only in this run's checkpoint folder, a new logger version
    folder unless a version is given, so a resumed fit would silently start afresh. Here ``fit``
    continues in the version folder of the newest ``save_dir/name/*/checkpoints/last*.ckpt``
    (logs and checkpoints carry on there). Other subcommands get that file as ``ckpt_path``, or
    for ``best`` the best checkpoint it records (:func:`~.resume.best_checkpoint`), whatever
    their own logger version. A fit with an explicit logger version, or before any run has
    written a ``last.ckpt``, keeps Lightning's own lookup (``--ckpt_path last`` on a first run
    just starts training).
    """
    wanted = config.get("ckpt_path")
    if wanted not in ("last", "best") or (wanted == "best" and subcommand == "fit"):
        return
    init = getattr(config.get("trainer.logger"), "init_args", None)
    if not isinstance(init, Namespace) or init.get("save_dir") is None:
        return
    if subcommand == "fit" and init.get("version") is not None:
        return
    last = find_last_checkpoint(Path(init.save_dir) / (init.get("name") or ""))
    if last is None:
        return
    if subcommand == "fit":
        init.version = last.parent.parent.name
    elif wanted == "last":
        config.ckpt_path = str(last)
    else:
        best = best_checkpoint(last)
        config.ckpt_path = wanted if best is None else str(best)


def main(args: list[str] | None = None) -> GraphormerCLI:
    """Runs the CLI; ``args`` defaults to ``sys.argv[1:]``.

    Examples:
        ``graphormer-sepnorm fit --config molhiv`` (a bundled recipe by name, or a file)

        ``graphormer-sepnorm test --ckpt_path CKPT`` (the data settings come from the
        checkpoint; any can be overridden: ``--data.path other.csv``)
    """
    given = args
    args = with_checkpoint_data(sys.argv[1:] if args is None else list(args))
    with warnings.catch_warnings():
        if given is None:  # the command line, completed from the checkpoint, is passed as args
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        return _cli(args)


def _register_datamodules() -> None:
    """Imports the datamodules, so that their short names work (``--data SmilesCSVDataModule``).

    jsonargparse finds a class by its short name among the imported subclasses; those that need
    RDKit or ogb are skipped where these are not installed (a GPU node with prepared data).
    """
    for name in datasets.__all__:
        with contextlib.suppress(ImportError):
            getattr(datasets, name)


def _cli(args: list[str], run: bool = True,
         callbacks: list[Callback] | None = None) -> GraphormerCLI:
    _register_datamodules()
    return GraphormerCLI(
        graphormer_module,
        GraphDataModule,
        subclass_mode_data=True,
        args=resolve_configs(args),
        run=run,
        # Our datamodules shard their random batches across DDP processes themselves; dropout is
        # seeded by the step count, so that resumed runs continue exactly.
        # Without a terminal (CI, SLURM, a log file) no carriage-return progress bar: FitLog
        # prints one line per epoch instead.
        trainer_defaults={"use_distributed_sampler": False,
                          "enable_progress_bar": sys.stdout.isatty(),
                          "callbacks": [StepSeeding(), TimeLimitPerCall(), LastAtEnd(), *(
                              [FitLog()] if callbacks is None else callbacks)]},
        save_config_kwargs={"overwrite": True},
    )


def instantiate(args: list[str], callbacks: list[Callback]) -> GraphormerCLI:
    """Model, datamodule and trainer of ``args`` (no subcommand), nothing run.

    What benchmarks fit and test with: the configs and links of the CLI, with ``callbacks``
    (beside the per-step dropout seeding) instead of the per-epoch log.
    """
    with warnings.catch_warnings():  # args are given on purpose, whatever sys.argv holds
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        return _cli(list(args), run=False, callbacks=callbacks)


#: Exit status of a ``fit`` that ``--trainer.max_time`` stopped: ``--ckpt_path last`` continues it.
EXIT_UNFINISHED = 3


def run() -> None:
    """Console entry point ``graphormer-sepnorm``: exits 0 after a successful run.

    A ``fit`` stopped by ``--trainer.max_time`` before its end exits with
    :data:`EXIT_UNFINISHED`, so that a job script can tell it from a finished one.
    A problem with the user's data or checkpoint (:class:`~.base.DataError`,
    :class:`~graphormer_sepnorm.checkpoints.CheckpointError`) prints its message,
    without a traceback, and exits with 2. (:func:`main` returns the CLI object for
    programmatic use; a console script must not, since ``sys.exit(obj)`` prints it and exits
    with status 1.)
    """
    try:
        cli = main()
    except (DataError, CheckpointError) as e:  # the user's data or file: no traceback
        command = " ".join(["graphormer-sepnorm", *sys.argv[1:2]])
        print(f"{command}: error: {e}", file=sys.stderr)
        sys.exit(2)
    if getattr(cli, "subcommand", None) == "fit" and stopped_by_time(cli.trainer):
        sys.exit(EXIT_UNFINISHED)


if __name__ == "__main__":
    run()
