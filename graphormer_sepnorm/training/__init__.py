"""Lightning training: the module, the tasks, the learning-rate schedule."""

from graphormer_sepnorm.training.module import GraphormerModule
from graphormer_sepnorm.training.schedule import warmup_polynomial_decay
from graphormer_sepnorm.training.tasks import BinaryTask, RegressionTask, Task, make_task

__all__ = [
    "BinaryTask",
    "GraphormerModule",
    "RegressionTask",
    "Task",
    "make_task",
    "warmup_polynomial_decay",
]
