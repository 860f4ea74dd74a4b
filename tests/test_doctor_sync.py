"""The doctor's replica checks under local SGD / DiLoCo (doctor/core.py, parallel/sync.py, docs/doctor.md).

Between outer steps the replicas differ by design; right after a fragment's outer step its parameters must be
bitwise equal on every replica, so that is when they are compared. World 2, own ddp, tiny model with 4
blocks, H = 2: with F = 2 fragment 1 is synchronised after trainer steps 0 and 2, fragment 0 after 1 and 3."""
from __future__ import annotations

import json

import pytest

from shardlab import comm, config

TINY = ["model.preset=tiny", "model.n_layer=4", "train.seq_len=32", "train.global_batch=4",
        "train.micro_batch=2", "train.warmup_steps=1", "train.log_every=1", "train.eval_every=0",
        "doctor.hang_timeout_s=0", "ckpt.final=false", "train.steps=4", "parallel.strategy=ddp",
        "parallel.sync_every=2"]
NEXT_SYNC_AFTER_STEP_0 = {0: 1, 1: 2}  # fragment -> the first trainer step > 0 that ends with its outer step


def _run(run_dir, overrides):
    """Train; returns every checksum result, the error raised if any, the parameter corrupt_rank perturbs
    and its fragment, and how many parameters the fragments hold."""
    from shardlab.doctor.core import AnomalyError
    from shardlab.train.trainer import Trainer

    cfg = config.load(None, TINY + overrides)
    config.validate(cfg, comm.world_size())
    trainer = Trainer(cfg, run_dir)
    doctor, s = trainer.doctor, trainer.strategy
    checks = []
    real = doctor.checksum

    def logged(step, fragments=None):
        checks.append(real(step, fragments))
        return checks[-1]

    doctor.checksum = logged
    names = [n for f in range(s.n_fragments) for n, _ in s.fragment_parameters(f)]
    corrupted = names[len(names) // 2]  # the one inject.corrupt_parameter perturbs
    fragment = next(f for f in range(s.n_fragments) if corrupted in dict(s.fragment_parameters(f)))
    error = None
    try:
        trainer.run()
    except AnomalyError as e:
        error = str(e)
    return checks, error, corrupted, fragment, len(names)


def _runs(run_dir):
    diloco = ["parallel.sync=diloco", "parallel.fragments=2", "doctor.checksum_every=1"]
    return {"clean": _run(run_dir / "clean", diloco),
            "corrupt": _run(run_dir / "corrupt", diloco + ["debug.corrupt_rank=1@0", "doctor.on_anomaly=stop"]),
            "f1": _run(run_dir / "f1", ["parallel.sync=local_sgd", "doctor.checksum_every=3"])}


@pytest.fixture(scope="module")
def runs(pool2, tmp_path_factory):
    root = tmp_path_factory.mktemp("doctor_sync")
    return root, pool2.run(_runs, root, timeout=240)


def test_fragments_are_compared_right_after_their_outer_step_without_false_alarm(runs):
    _, out = runs
    checks, error, _, _, n_params = out[0]["clean"]
    assert error is None
    # every fragment sync is checked (checksum_every=1), then the end: fragment 0 synchronised after step 3
    assert [(c["step"], c["fragments"]) for c in checks] == [(0, [1]), (1, [0]), (2, [1]), (3, [0]), (4, [0])]
    assert all(c["consistent"] and c["compared"] > 0 for c in checks)
    assert checks[0]["compared"] + checks[1]["compared"] == n_params  # fragment 1, then 0: the whole model


def test_corrupted_replica_is_named_at_its_fragments_next_outer_step(runs):
    root, out = runs
    checks, error, corrupted, fragment, _ = out[0]["corrupt"]
    step = NEXT_SYNC_AFTER_STEP_0[fragment]
    assert out[1]["corrupt"][1] == error  # the same verdict on both ranks: the run stopped everywhere
    assert error is not None and "REPLICAS DIVERGED" in error and corrupted in error and f"fragment {fragment}" in error
    assert all(c["consistent"] for c in checks[:-1]) and checks[-1]["step"] == step
    div = json.loads((root / "corrupt" / "doctor" / f"divergence_step_{step}.json").read_text())
    assert div["first"]["ranks"] == [1] and div["first"]["param"] == corrupted
    assert div["first"]["fragment"] == fragment and div["fragments"] == [fragment]
    assert div["first"]["detail"]["1"]["n_diff"] == 1  # the one element injected into θ_start


def test_f1_requested_mid_period_is_checked_at_the_next_outer_step(runs):
    _, out = runs
    checks, error, _, _, _ = out[0]["f1"]
    # requested after step 2 (checksum_every=3), mid-period: compared after the outer step of step 3; the
    # run's end (after that outer step) compares the whole model again
    assert error is None
    assert [(c["step"], c["fragments"]) for c in checks] == [(3, [0]), (4, [0])]
    assert all(c["consistent"] for c in checks)
