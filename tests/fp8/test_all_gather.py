"""The float8 all-gather under own zero3 (and HSDP): a tensorwise linear's weight is gathered as float8 with
the scale of the whole weight (amax max-reduced over the shard group), so its bits equal one rank's cast:
the losses equal those of the same run gathering fp32 weights, bit for bit; the bytes comm records equal
fp8/cost.py's formula exactly; rowwise gathers as before. Under own TP (zero3 x tp) each rank's piece is
gathered in float8 with the amax of the whole logical weight, with the same two guarantees."""
import pytest
import torch

from shardlab.fp8.cost import all_gather_bytes
from shardlab.fp8.gather import Float8WeightGather
from shardlab.fp8.scaling import quantize
from zero_harness import TINY, microbatches, setup


def test_encoding_is_one_ranks_cast():
    """Two shards encoded with the agreed amax and decoded = one rank's tensorwise cast of the whole weight."""
    w = torch.randn(96, 64, generator=torch.Generator().manual_seed(0)) * 0.02
    w[5, 3] = 0.7  # the amax lives in the first shard
    one = quantize(w, "e4m3", None)
    encs = [Float8WeightGather() for _ in range(2)]
    shards = w.chunk(2)
    amax = torch.maximum(*(e.agree(s) for e, s in zip(encs, shards)))
    rows = torch.stack([e.encode(s, amax).reshape(-1) for e, s in zip(encs, shards)])
    full = torch.empty_like(w)
    encs[0].decode(rows, full)
    q = encs[0].gathered
    assert torch.equal(q.data.view(torch.uint8), one.data.view(torch.uint8))
    assert torch.equal(q.inv_scale, one.inv_scale)
    assert torch.equal(full, one.data.float() * one.inv_scale)
    encs[0].release()
    assert encs[0].gathered is None


def run(fp8: str, encode: bool = True, steps: int = 3, wrap: str = "block", **parallel) -> dict:
    """zero3 on TINY in bf16 with `fp8` linears; `encode=False` strips the gather encodings (fp32 gathers).
    Returns the losses, the last step's all-gather records (tag, bytes) and the fp8 agreement all-reduces."""
    from shardlab import comm

    par = setup("zero3", TINY, "bf16", {"fp8": fp8}, wrap=wrap, **parallel)
    zero = par.dp
    while not hasattr(zero, "infos"):  # the zero3 layer behind the views of the layers inside it (TP)
        zero = zero.dp
    if not encode:
        for i in zero.infos:
            i.param.__dict__.pop("gather_encoding", None)
    world, rank, micro, seq = par.dims.dp_size, par.dims.dp_rank, 2, TINY["max_seq_len"]  # TP ranks: same data
    gen = torch.Generator().manual_seed(1234)
    losses = []
    for _ in range(steps):
        comm.RECORDER.reset_step()
        first = comm.RECORDER.order
        batch = torch.randint(0, TINY["vocab_size"], (1, world * micro, seq + 1), generator=gen)
        losses.append(par.forward_backward(microbatches(batch, rank, micro), 1.0 / (micro * seq)).item())
        par.finish()
        par.clip_grad_norm_(1.0)
        par.optimizer_step()
        par.zero_grad()
    recs = [r for r in comm.RECORDER.ring if r.order > first]
    shapes = {i.fqn: tuple(i.shape) for i in zero.infos}
    coded = {i.fqn for i in zero.infos if hasattr(i.param, "gather_encoding")}
    return {"losses": losses, "shapes": shapes, "coded": coded,
            "gathers": [(r.tag, r.bytes) for r in recs if r.op == "all_gather"],
            "agree": [(r.tag, r.bytes) for r in recs if r.op == "all_reduce" and r.tag.endswith("agree")]}


@pytest.fixture(scope="module")
def plain(pool2):
    return pool2.run(run, "tensorwise", encode=False)


@pytest.fixture(scope="module")
def coded(pool2):
    return pool2.run(run, "tensorwise")


def test_float8_gather_is_bitwise_the_fp32_gather(plain, coded):
    """The GEMMs see the same float8 weight either way (the cast of the whole weight with its own scale), and
    the weight gradient does not read the weight: every rank's losses are the same bits."""
    for a, b in zip(coded, plain):
        assert a["losses"] == b["losses"]


def test_bytes_recorded_equal_the_formula(plain, coded):
    """One step: the forward and backward gathers of every unit; float8 data (all-gather) plus one fp32 amax
    a weight (the agreement all-reduce) = cost.all_gather_bytes for the converted weights, the rest of the
    unit's parameters in fp32 as before. TINY shards without padding (every row count divides by 2)."""
    out = coded[0]
    assert out["coded"] and all(t.endswith(":fp8") for t, _ in out["gathers"] if t != "ag:root")
    gathers = {}
    for tag, n in out["gathers"] + out["agree"]:
        unit = tag[3:].split(":")[0]
        gathers[unit] = gathers.get(unit, 0) + n
    measured = sum(n for t, n in out["gathers"] + out["agree"] if t != "ag:root")
    blocks = [u for u in gathers if u != "root"]
    times = len(out["gathers"]) - 1  # forward and backward gathers of the blocks (root once)
    assert times == 2 * len(blocks)
    f8_shapes = [out["shapes"][f] for f in out["coded"]]
    rest = sum(torch.Size(s).numel() for f, s in out["shapes"].items()
               if f not in out["coded"] and f.startswith("blocks."))
    f8, bf16 = all_gather_bytes(f8_shapes, "tensorwise", 2)
    assert measured == 2 * (f8 + 4 * rest)
    fp32_measured = sum(n for t, n in plain[0]["gathers"] if t != "ag:root")
    assert fp32_measured == 2 * (2 * bf16 + 4 * rest)
    # the converted weights alone: a quarter of fp32 plus the scales, half of bf16 plus the scales
    assert f8 / bf16 == pytest.approx(0.5, abs=1e-3)
    print(f"block units per step: fp8 {measured} B, fp32 {fp32_measured} B ({measured / fp32_measured:.3f}); "
          f"converted weights fp8/bf16 = {f8 / bf16:.4f}")


def test_rowwise_gathers_as_before(pool2):
    out = pool2.run(run, "rowwise", steps=1)[0]
    assert not out["coded"] and not out["agree"]
    assert all(":" not in t[3:] for t, _ in out["gathers"])


def test_hsdp_gathers_float8_in_the_shard_group(pool4):
    """HSDP (dp_replicate 2 x dp_shard 2): the float8 gather and its amax agreement run in the shard group
    (the replicas hold the same shards), and the losses are the fp32-gather run's bits."""
    coded4 = pool4.run(run, "tensorwise", steps=2, dp_replicate=2)
    plain4 = pool4.run(run, "tensorwise", encode=False, steps=2, dp_replicate=2)
    for a, b in zip(coded4, plain4):
        assert a["losses"] == b["losses"]
    assert any(t.endswith(":fp8") for t, _ in coded4[0]["gathers"])


def test_zero3_x_tp_gathers_the_pieces_in_float8(pool4):
    """dp_shard 2 x tp 2: every converted linear's TP piece carries the float8 encoding; its amax is agreed
    over the shard group, then the TP group (the whole weight's, as the forward agrees it), so the losses
    are the fp32-gather run's bits; bytes = cost.all_gather_bytes(pieces, tp=2) (two 4-byte agreements a
    weight) plus 4 bytes an element for the rest, exactly."""
    coded4 = pool4.run(run, "tensorwise", steps=2, tp=2)
    plain4 = pool4.run(run, "tensorwise", encode=False, steps=2, tp=2)
    for a, b in zip(coded4, plain4):
        assert a["losses"] == b["losses"]
    out = coded4[0]
    assert len(out["coded"]) == 12 and all(t.endswith(":fp8") for t, _ in out["gathers"] if t != "ag:root")
    measured = sum(n for t, n in out["gathers"] + out["agree"] if t != "ag:root")
    f8_shapes = [out["shapes"][f] for f in out["coded"]]
    rest = sum(torch.Size(s).numel() for f, s in out["shapes"].items()
               if f not in out["coded"] and f.startswith("blocks."))
    f8, bf16 = all_gather_bytes(f8_shapes, "tensorwise", 2, tp=2)
    assert measured == 2 * (f8 + 4 * rest)
    fp32_measured = sum(n for t, n in plain4[0]["gathers"] if t != "ag:root")
    assert fp32_measured == 2 * (2 * bf16 + 4 * rest)
    print(f"zero3 x tp block units per step (rank 0): fp8 {measured} B, fp32 {fp32_measured} B "
          f"({measured / fp32_measured:.3f}); pieces fp8/bf16 = {f8 / bf16:.4f}")


def trainer_gathers(run_dir, extra):
    from shardlab import comm, config
    from shardlab.train.trainer import Trainer

    over = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=8", "train.micro_batch=2", "train.steps=1",
            "train.eval_every=0", "ckpt.final=false", "train.dtype=bf16", "train.fp8=tensorwise",
            "parallel.strategy=zero3"] + extra
    first = comm.RECORDER.order  # the pool's ranks ran other tests' gathers before
    Trainer(config.validate(config.load(None, over), comm.world_size()), run_dir).run()
    return sorted({r.tag for r in comm.RECORDER.ring
                   if r.order > first and r.op == "all_gather" and r.tag.startswith("ag:blocks")})


def test_the_trainers_meta_build_gathers_float8(pool4, tmp_path):
    """Through the trainer (the model built on the meta device, its parameters allocated by the layers): the
    encodings survive allocation, so the block units gather float8, plain zero3 and zero3 x tp alike."""
    assert pool4.run(trainer_gathers, tmp_path / "dp", [])[0] == ["ag:blocks.0:fp8", "ag:blocks.1:fp8"]
    assert pool4.run(trainer_gathers, tmp_path / "tp", ["parallel.tp=2"])[0] == ["ag:blocks.0:fp8", "ag:blocks.1:fp8"]
