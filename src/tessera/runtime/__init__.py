"""tessera.runtime — execute any Plan for real on torch.distributed (gloo on CPU, NCCL on GPUs).

Uneven data parallelism (loss weighting + Tessera's own bucketed gradient sync), uneven tensor parallelism
(own column/row-parallel layers), pipelines of GPipe or 1F1B over Tessera's own stage-to-stage transport
(stages may differ in DP and TP degree: Whale's bridge), ZeRO-style optimizer sharding, mixed precision,
checkpoints that reshard to any plan, a local launcher with telemetry and failure handling, and Whale-style
``replicate`` / ``split`` annotations.

Imports only ``tessera.plan``, the zoo's nn modules (lazily, through ``ZooModel``) and torch.
"""

from tessera.runtime.annotations import Config, init, plan_from_annotations, replicate, split
from tessera.runtime.data import SyntheticData, TextData, data_source
from tessera.runtime.data_parallel import weighted_loss
from tessera.runtime.dataset import DataError, TokenizedData
from tessera.runtime.engine import Trainer, make_optimizer
from tessera.runtime.launcher import LaunchError, LaunchResult, launch, launch_many
from tessera.runtime.model import (
    CallableModel,
    ModelFactory,
    TPSpec,
    ZooModel,
    initial_state,
    reference_model,
)
from tessera.runtime.options import Fault, RunOptions
from tessera.runtime.schedule import Training

__all__ = [
    "Config",
    "init",
    "plan_from_annotations",
    "replicate",
    "split",
    "CallableModel",
    "DataError",
    "Fault",
    "LaunchError",
    "LaunchResult",
    "ModelFactory",
    "RunOptions",
    "SyntheticData",
    "TPSpec",
    "TextData",
    "TokenizedData",
    "Trainer",
    "Training",
    "ZooModel",
    "data_source",
    "initial_state",
    "launch",
    "launch_many",
    "make_optimizer",
    "reference_model",
    "weighted_loss",
]
