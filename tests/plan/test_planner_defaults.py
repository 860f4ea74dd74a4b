"""The planner's defaults are the trainer's (plan/from_config.py writes train.dtype's default as a literal,
since plan/ may not import config/)."""
from shardlab import precision
from shardlab.config.schema import TrainConfig
from shardlab.plan.from_config import trainer_defaults


def test_the_planned_precision_is_train_dtypes_default():
    assert trainer_defaults()["precision"] == precision.PLANNED_AS[TrainConfig.dtype]
    assert trainer_defaults()["flash_attention"] is True
