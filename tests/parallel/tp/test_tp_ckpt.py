"""Checkpoints of tensor parallelism under ZeRO reshard. A `tp=2 x dp=2` run (own TP, zero3; vocabulary 257,
so the embedding's TP pieces are padded and its zero shards uneven) saves every 2 steps of 6, asynchronously
(the step-4 checkpoint is written from the reused staging copy of step 2's). The step-4 checkpoint continues
under `single`@1, `ddp`@2, `zero3`@2, own `tp=4`@4 and `tp=2 x zero3`@4 (back where it came from), and under
`tp=2 x zero1`@4, `tp=2 x ddp`@4 and DTensor `tp=2 x torch-fsdp2`@4, with the saver's own steps 5..6 as the
reference (rtol 1e-5, as the reshard matrix in test_ckpt_reshard.py).

Each rank writes the block of the bare model's tensor its zero shard of its TP piece covers; the keys are
the bare model's FQNs (src/shardlab/parallel/tp/state.py).
"""
from __future__ import annotations

import pytest
import torch
from ckpt_harness import continue_from, train_quick

VOCAB = "model.vocab_size=257"
SAVER = ["parallel.tp=2", "parallel.dp=zero3", VOCAB]
LOADERS = {1: [["parallel.strategy=single"]],
           2: [["parallel.strategy=ddp"], ["parallel.strategy=zero3"]],
           4: [["parallel.tp=4"], ["parallel.tp=2", "parallel.dp=zero3"], ["parallel.tp=2", "parallel.dp=zero1"],
               ["parallel.tp=2", "parallel.dp=ddp"],
               ["parallel.tp=2", "parallel.tp_impl=dtensor", "parallel.dp=torch-fsdp2"]]}


def _save_and_layout(run_dir, overrides):
    """Train 6 steps with checkpoints every 2; rank 0 returns the losses and the checkpoint's stored chunks
    of a column-parallel weight, a row-parallel weight and the embedding (offsets, sizes)."""
    import torch.distributed.checkpoint as dcp

    from shardlab import comm

    losses = train_quick(run_dir, overrides, 4)
    path = run_dir / "checkpoints" / "step_000004"
    md = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    chunks = {k: (tuple(md[k].size), sorted((tuple(c.offsets), tuple(c.sizes)) for c in md[k].chunks))
              for k in ("model.blocks.0.attn.q.weight", "model.blocks.0.mlp.proj.weight", "model.wte.weight",
                        "optim.state.wte.weight.exp_avg")}
    return (path, losses[4:], chunks) if comm.rank() == 0 else None


def _load(paths, world):
    return {tuple(o): continue_from(paths, o + [VOCAB, "train.steps=6"], world, steps=2) for o in LOADERS[world]}


@pytest.fixture(scope="module")
def saved(tmp_path_factory, pool4):
    return pool4.run(_save_and_layout, tmp_path_factory.mktemp("tp2xzero3"), SAVER + ["train.steps=6", "ckpt.every=2", "ckpt.async=true"],
                     timeout=400)[0]


def test_tp_x_zero_checkpoint_is_stored_as_blocks_of_the_bare_model(saved):
    """Every rank's block at its offset in the bare model's tensor: q by rows (TP) then rows (zero), the MLP
    projection by rows (zero) and columns (TP); the embedding's uneven blocks (129 = 65 + 64 real rows on tp
    rank 0, 128 = 65 + 63 on tp rank 1) tile its 257 rows; the optimizer state lies like its parameter."""
    _, _, chunks = saved
    assert chunks["model.blocks.0.attn.q.weight"] == ((64, 64), [((r, 0), (16, 64)) for r in (0, 16, 32, 48)])
    assert chunks["model.blocks.0.mlp.proj.weight"] == (
        (64, 256), [((r, c), (32, 128)) for r in (0, 32) for c in (0, 128)])
    assert chunks["model.wte.weight"] == ((257, 64), [((0, 0), (65, 64)), ((65, 0), (64, 64)),
                                                      ((129, 0), (65, 64)), ((194, 0), (63, 64))])
    assert chunks["optim.state.wte.weight.exp_avg"] == chunks["model.wte.weight"]


def _check(ref, got):
    assert got
    for loader, by_path in got.items():
        for losses in by_path.values():
            torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref), rtol=1e-5, atol=0,
                                       msg=lambda m: f"tp=2 x zero3 checkpoint, loaded by {loader}: {m}")


def test_loads_at_world_1(saved):
    path, ref, _ = saved
    _check(ref, _load([path], 1))


def test_loads_at_world_2(saved, pool2):
    path, ref, _ = saved
    _check(ref, pool2.run(_load, [path], 2, timeout=300)[0])


def test_loads_at_world_4_tp4_and_back(saved, pool4):
    path, ref, _ = saved
    _check(ref, pool4.run(_load, [path], 4, timeout=400)[0])
