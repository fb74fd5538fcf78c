"""Lightning training: the module (one model or packed replicas), the tasks, the schedule."""

from graphormer_sepnorm.training.factory import graphormer_module, load_module
from graphormer_sepnorm.training.module import GraphormerModule
from graphormer_sepnorm.training.optimization import warmup_polynomial_decay
from graphormer_sepnorm.training.packed_module import PackedGraphormerModule
from graphormer_sepnorm.training.tasks import BinaryTask, RegressionTask, Task, make_task

__all__ = [
    "BinaryTask",
    "GraphormerModule",
    "PackedGraphormerModule",
    "RegressionTask",
    "Task",
    "graphormer_module",
    "load_module",
    "make_task",
    "warmup_polynomial_decay",
]
