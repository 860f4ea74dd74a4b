"""The fault-tolerance drivers live in shardlab.testing.ft_drill (`shardlab bench faults` runs them too)."""
from shardlab.testing.ft_drill import *  # noqa: F401,F403
