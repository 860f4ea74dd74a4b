"""One process, no communication: the baseline every strategy is compared with."""
from shardlab.strategies.base import Strategy


class Single(Strategy):
    name = "single"
