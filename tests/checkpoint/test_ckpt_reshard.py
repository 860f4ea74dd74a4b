"""The reshard matrix: a checkpoint saved by one strategy at one world size continues under another
strategy at another world size with the same next losses as the uninterrupted run (rtol 1e-5).

Savers: ddp, zero3, torch-fsdp2 at world 2 and zero3 at world 4 (6 steps, checkpoint at 3;
their own steps 4..6 are the reference). Loaders: single at 1; ddp, torch-ddp, zero1/2/3, torch-fsdp2,
torch-zero1 at 2; zero1/2/3 at 4. Every loader loads every saver's checkpoint.
"""
import pytest
import torch
from ckpt_harness import continue_from, train_quick

from shardlab.parallel.dp import REGISTRY

SAVERS = [("ddp", 2), ("zero3", 2), ("torch-fsdp2", 2), ("zero3", 4)]  # torch-zero1 saves: test_ckpt.py
LOADERS = {1: ["single"], 2: ["ddp", "torch-ddp", "zero1", "zero2", "zero3", "torch-fsdp2", "torch-zero1"],
           4: ["zero1", "zero2", "zero3"]}


def _have(name):
    return name in REGISTRY


@pytest.fixture(scope="module")
def saved(tmp_path_factory, pool2, pool4):
    """{(strategy, world): (checkpoint at step 3, reference losses of steps 4..6)}"""
    out = {}
    for name, world in SAVERS:
        if not _have(name):
            continue
        run = tmp_path_factory.mktemp(f"save-{name}-{world}")
        pool = pool2 if world == 2 else pool4
        losses = pool.run(train_quick, run, [f"parallel.strategy={name}", "train.steps=6", "ckpt.every=3"], world)[0]
        out[(name, world)] = (run / "checkpoints" / "step_000003", losses[3:])
    loads4 = pool4.run(_load_all, out, 4)[0]
    return out, loads4


def _load_all(saved, world):
    """Every loader of this world size loads every saved checkpoint: {(loader, saver): losses}."""
    results = {}
    paths = [p for p, _ in saved.values()]
    for name in LOADERS[world]:
        if _have(name):
            got = continue_from(paths, [f"parallel.strategy={name}", "train.steps=6"], world)
            for key, (p, _) in saved.items():
                results[(name, key)] = got[str(p)]
    return results


def _check(saved, results):
    assert results
    for (loader, saver), losses in results.items():
        ref = saved[saver][1]
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref), rtol=1e-5, atol=0,
                                   msg=lambda m: f"saved by {saver}, loaded by {loader}: {m}")


def test_load_at_world_1(saved):
    ckpts, _ = saved
    _check(ckpts, _load_all(ckpts, 1))


def test_load_at_world_2(saved, pool2):
    ckpts, _ = saved
    _check(ckpts, pool2.run(_load_all, ckpts, 2, timeout=240)[0])


def test_load_at_world_4(saved):
    ckpts, loads4 = saved
    _check(ckpts, loads4)
