"""The sync bench's settings (the bench itself is too long for the suite: `shardlab bench sync --quick`)."""
from shardlab import config
from shardlab.bench import common, sync
from shardlab.optim import lr_at


def test_bench_sync_runs_warm_up_over_its_own_warmup_steps_not_the_suites_two():
    # docs/sync.md "Early loss spikes": the suites' 2-step warm-up makes every layout spike where rounding says
    cfg = config.load(overrides=sync._base(2, 64, quick=False))
    assert "train.warmup_steps=2" in common.BASE  # the default this bench overrides
    assert cfg.train.warmup_steps == sync.WARMUP_STEPS == 10
    assert lr_at(1, cfg) == cfg.train.lr * 2 / 10  # still warming up where the suites' runs are at the peak
    assert lr_at(sync.WARMUP_STEPS, cfg) == cfg.train.lr
