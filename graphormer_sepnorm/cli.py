"""The ``graphormer-sepnorm`` command: Lightning CLI (fit, validate, test, predict)."""

from __future__ import annotations

from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from graphormer_sepnorm.datasets.base import GraphDataModule
from graphormer_sepnorm.training.module import GraphormerModule


class GraphormerCLI(LightningCLI):
    """Links what the model must agree on with the data.

    ``model.dataset_info`` (task, targets, feature dims, featurizer) comes from the datamodule,
    and the datamodule's collator keeps as many hops as the model's edge encoder uses.
    """

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Adds the links between model and data."""
        parser.link_arguments("data.dataset_info", "model.dataset_info", apply_on="instantiate")
        parser.link_arguments("model.multi_hop_max_dist", "data.init_args.multi_hop_max_dist")


def main(args: list[str] | None = None) -> GraphormerCLI:
    """Runs the CLI; ``args`` defaults to ``sys.argv[1:]``.

    Examples:
        ``graphormer-sepnorm fit --config configs/molhiv.yaml``

        ``graphormer-sepnorm test --config configs/molhiv.yaml --ckpt_path CKPT``
    """
    return GraphormerCLI(
        GraphormerModule,
        GraphDataModule,
        subclass_mode_data=True,
        args=args,
        # Our datamodules shard size-grouped batches across DDP processes themselves.
        trainer_defaults={"use_distributed_sampler": False},
        save_config_kwargs={"overwrite": True},
    )


if __name__ == "__main__":
    main()
