"""shardlab plan: an analytical model of memory, communication and step time for any model on any
cluster (pure Python; only calibration imports torch). Entry point: shardlab.plan.cli.main."""
