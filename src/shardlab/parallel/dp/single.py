"""One process, no communication: the baseline every strategy is compared with."""
from shardlab.parallel.dp.base import Strategy


class Single(Strategy):
    name = "single"
