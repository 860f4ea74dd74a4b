"""Checkpoint resume through the real trainer: exact resume (world 2), async save, retention."""
import json

from ckpt_harness import assert_params_equal, train_run

from shardlab.checkpoint import manifest as mf


def test_exact_resume_world2(pool2, tmp_path):
    """12 steps straight == 6 steps, stop, resume, 6 more: same losses, bitwise parameters, same samples,
    same RNG streams afterwards."""
    common = ["parallel.strategy=torch-ddp", "train.steps=12"]
    straight = pool2.run(train_run, tmp_path / "straight", common, 2)
    run = tmp_path / "resumed"
    pool2.run(train_run, run, common + ["ckpt.every=3", "ckpt.async=true"], 2, stop_after=6)
    assert mf.read_latest(run / "checkpoints").name == "step_000006"
    resumed = pool2.run(train_run, run, common + ["ckpt.resume=latest"], 2, rng_seed=7)
    for r in range(2):
        assert resumed[r]["start"] == 6
        assert_params_equal(resumed[r]["params"], straight[r]["params"], exact=True)
        assert torch_equal(resumed[r]["rng"], straight[r]["rng"])  # per-rank RNG restored
        assert resumed[r]["batches"] == {s: straight[r]["batches"][s] for s in range(6, 12)}
    # metrics.jsonl is appended to: steps 7..12 were logged by the resumed run
    assert [straight[0]["losses"][s] for s in range(7, 13)] == [resumed[0]["losses"][s] for s in range(7, 13)]


def torch_equal(a, b):
    import torch
    return torch.equal(a, b)


def test_retention_and_manifest(pool2, tmp_path):
    run = tmp_path / "run"
    pool2.run(train_run, run, ["parallel.strategy=torch-fsdp2", "train.steps=8", "ckpt.every=1",
                               "ckpt.keep=2", "ckpt.keep_every=4", "ckpt.final=true"], 2)
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["latest", "step_000004", "step_000007", "step_000008"]
    manifest = mf.read_manifest(run / "checkpoints" / "step_000008")
    assert manifest["world_size"] == 2 and manifest["strategy"] == "torch-fsdp2" and manifest["step"] == 8
    assert {".metadata", "train_state.json", "__0_0.distcp", "__1_0.distcp"} <= set(manifest["files"])
    assert mf.verify(run / "checkpoints" / "step_000008") == []
    meta = json.loads((run / "checkpoints" / "step_000008" / "train_state.json").read_text())
    assert meta["sampler"]["cursor"] == 64 and meta["step"] == 8
