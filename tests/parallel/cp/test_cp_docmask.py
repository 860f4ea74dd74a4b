"""Context parallelism with packed documents (data.doc_mask, parallel/cp/ring.py): the ring respects
document boundaries across the zigzag chunks, forward and backward; a block that masks a query row whole
gives a log-sum-exp of -inf and an output of 0, and two such parts merge without NaN; a packed batch at
cp=2 gives each document the losses it has alone, and trains as one device does.

Tolerances: the ring against SDPA with the block-causal mask in float64, 1e-12 as test_cp.py's ring test
(its sums run in another order: per-chunk partial softmaxes merged by the log-sum-exp rule); the layout
parity in docmask_harness.assert_layout_parity (compare.py's FP64_TOL)."""
from __future__ import annotations

import pytest
import torch

from cp_harness import ring_vs_sdpa
from docmask_harness import assert_layout_parity


def _doc_pos(batch: int = 2, seq: int = 32) -> torch.Tensor:
    """Documents of 3, 10, 1 and 18 tokens (row 0) and 21, 11 (row 1): at cp=2 (chunks of 8) several cross
    a chunk boundary and start after whole key chunks."""
    from shardlab.data.documents import doc_positions

    x = torch.ones(batch, seq, dtype=torch.long)
    x[0, [2, 12, 13]] = 0
    x[1, 20] = 0
    return doc_positions(x, 0)


@pytest.mark.parity
@pytest.mark.parametrize("kv_heads", [0, 1])
def test_ring_respects_document_boundaries_across_chunks(pool2, kv_heads):
    ranks = pool2.run(ring_vs_sdpa, torch.float64, True, 2, "zigzag", kv_heads=kv_heads, doc_pos=_doc_pos(),
                      timeout=120)[0]
    for r in ranks:
        for what, err in r["errs"].items():
            assert err <= 1e-12, (what, err)


@pytest.mark.parametrize("flash", [True, False])
def test_a_row_masked_whole_is_empty_and_merges_without_nan(flash):
    """Both kernels (the CPU flash one and the plain formula of other devices): an all-masked row has lse
    -inf and output 0; merging it with another empty part stays empty (not NaN), with a real part gives
    the real part exactly."""
    from shardlab.parallel.cp.ring import block_attention, merge

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    mask[0, 0, 1] = False
    out, lse = block_attention(q, k, v, False, mask, flash=flash)
    assert torch.isneginf(lse[0, :, 1]).all() and torch.isfinite(lse[1]).all()
    assert (out[0, :, 1] == 0).all() and not out.isnan().any()
    empty_out, empty_lse = merge(None, None, out, lse)
    both, both_lse = merge(empty_out, empty_lse, out, lse)
    assert not both.isnan().any() and torch.isneginf(both_lse[0, :, 1]).all()
    none = torch.full_like(lse, float("-inf"))
    kept, kept_lse = merge(*merge(None, None, torch.zeros_like(out), none), out, lse)
    assert torch.equal(kept_lse, lse) and torch.equal(kept[lse.isfinite()], out.to(kept.dtype)[lse.isfinite()])


@pytest.mark.parity
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_packed_documents_at_cp2_equal_each_document_alone(pool2, arch):
    assert_layout_parity(pool2, arch, ["parallel.cp=2"])


@pytest.mark.parity
def test_packed_documents_at_cp2_x_tp2_sp_equal_each_document_alone(pool4):
    """cp x tp with sequence parallelism: the positions are cut by cp's chunks first (shard_batch), then
    the position lookup takes its tp slice of this rank's chunks (the learned-position path: GPT-2)."""
    assert_layout_parity(pool4, "gpt2", ["parallel.cp=2", "parallel.tp=2", "parallel.sp=true"])
