"""Checkpoints know the layout. An HSDP (dp_replicate 2 x dp_shard 2) checkpoint continues under single@1,
ddp@2 and zero3@4 with the same next losses as the uninterrupted run (rtol 1e-5), and checkpoints of those
continue under HSDP (own zero3 and torch-fsdp2); the manifest records the mesh degrees; RNG streams are
restored per mesh coordinate, whatever global rank holds that coordinate after a restart.
"""
import json

import pytest
import torch
from ckpt_harness import _steps, continue_from, make_cfg, train_quick

HSDP = ["parallel.strategy=zero3", "parallel.dp_replicate=2"]
STEPS = "train.steps=6"  # the LR schedule's length: the savers' and the loaders' must agree
SAVERS = {"hsdp": (HSDP, 4), "single": (["parallel.strategy=single"], 1), "ddp": (["parallel.strategy=ddp"], 2),
          "zero3": (["parallel.strategy=zero3"], 4)}


@pytest.fixture(scope="module")
def saved(tmp_path_factory, pool2, pool4):
    """{saver: (checkpoint at step 3, reference losses of steps 4..6)}"""
    out = {}
    for key, (overrides, world) in SAVERS.items():
        run = tmp_path_factory.mktemp(f"save-{key}")
        args = (run, overrides + [STEPS, "ckpt.every=3"], world)
        losses = train_quick(*args) if world == 1 else {2: pool2, 4: pool4}[world].run(train_quick, *args)[0]
        out[key] = (run / "checkpoints" / "step_000003", losses[3:])
    return out


def _check(saved, loader, savers, results):
    assert results
    for key in savers:
        path, ref = saved[key]
        torch.testing.assert_close(torch.tensor(results[str(path)]), torch.tensor(ref), rtol=1e-5, atol=0,
                                   msg=lambda m: f"saved by {key}, loaded by {loader}: {m}")


def test_manifest_records_the_layout(saved):
    manifest = json.loads((saved["hsdp"][0] / "MANIFEST.json").read_text())
    assert manifest["layout"] == {"pp": 1, "dp_replicate": 2, "dp_shard": 2, "cp": 1, "tp": 1}
    meta = json.loads((saved["hsdp"][0] / "train_state.json").read_text())
    assert meta["layout"] == manifest["layout"]
    assert json.loads((saved["ddp"][0] / "MANIFEST.json").read_text())["layout"]["dp_replicate"] == 2


def test_hsdp_checkpoint_loads_at_world_1(saved):
    _check(saved, "single@1", ["hsdp"], continue_from([saved["hsdp"][0]], ["parallel.strategy=single", STEPS], 1))


def test_hsdp_checkpoint_loads_into_ddp_at_world_2(saved, pool2):
    got = pool2.run(continue_from, [saved["hsdp"][0]], ["parallel.strategy=ddp", STEPS], 2, timeout=240)[0]
    _check(saved, "ddp@2", ["hsdp"], got)


def test_hsdp_checkpoint_loads_into_zero3_at_world_4(saved, pool4):
    got = pool4.run(continue_from, [saved["hsdp"][0]], ["parallel.strategy=zero3", STEPS], 4, timeout=240)[0]
    _check(saved, "zero3@4", ["hsdp"], got)


@pytest.mark.parametrize("strategy", ["zero3", "torch-fsdp2"])
def test_every_checkpoint_loads_into_hsdp(saved, pool4, strategy):
    """...and back: single@1, ddp@2, zero3@4 and the HSDP checkpoint itself continue under HSDP."""
    paths = [p for p, _ in saved.values()]
    got = pool4.run(continue_from, paths, [f"parallel.strategy={strategy}", "parallel.dp_replicate=2", STEPS], 4,
                    timeout=400)[0]
    _check(saved, f"{strategy} HSDP@4", list(saved), got)


# --- RNG per mesh coordinate ---------------------------------------------------------------------------

def _permuted_mesh(order):
    """Make the trainer place global rank order[i] at the i-th mesh position (row-major), as a restart
    onto other hosts may: same degrees, another rank -> coordinate mapping. Returns the function it replaced
    (the pool's ranks outlive this test: the caller puts it back)."""
    import torch.distributed.device_mesh as dm

    def init_device_mesh(device_type, shape, mesh_dim_names=None):
        return dm.DeviceMesh(device_type, torch.tensor(order).view(shape), mesh_dim_names=mesh_dim_names)
    plain, dm.init_device_mesh = dm.init_device_mesh, init_device_mesh  # what ParallelDims.build_mesh calls
    return plain


def _rng_after(run_dir, order, resume_from=None) -> dict:
    """Train 2 steps and save (or load `resume_from`), then draw from this rank's torch stream.
    Returns {"coord": this rank's mesh coordinate, "draw": the draw, "ckpt": the checkpoint}."""
    from pathlib import Path

    from shardlab import comm
    from shardlab.checkpoint import state as st
    from shardlab.train.trainer import Trainer

    import torch.distributed.device_mesh as dm

    plain = _permuted_mesh(order)
    try:
        trainer = Trainer(make_cfg(HSDP + ["train.steps=2", "ckpt.every=2"], 4), Path(run_dir))
    finally:
        dm.init_device_mesh = plain
    torch.manual_seed((1000 if resume_from is None else 2000) + comm.rank())  # a stream of its own per rank
    if resume_from is None:
        _steps(trainer, 2)
        trainer.ckpt.wait()
    else:
        trainer.ckpt.load(Path(resume_from), trainer.state)
    return {"coord": st.rng_key(trainer.dims), "draw": torch.rand(4),
            "ckpt": str(trainer.ckpt.dir / "step_000002")}


def test_rng_streams_follow_the_mesh_coordinate(pool4, tmp_path):
    saved = pool4.run(_rng_after, tmp_path / "a", [0, 1, 2, 3], timeout=240)
    loaded = pool4.run(_rng_after, tmp_path / "b", [3, 1, 0, 2], saved[0]["ckpt"], timeout=240)
    assert [r["coord"] for r in saved] != [r["coord"] for r in loaded]  # the ranks did move
    by_coord = {r["coord"]: r["draw"] for r in saved}
    assert len({tuple(d.tolist()) for d in by_coord.values()}) == 4  # four different streams were saved
    for r in loaded:
        assert torch.equal(r["draw"], by_coord[r["coord"]]), r["coord"]
