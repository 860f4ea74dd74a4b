"""Expert parallelism (parallel/ep.py) equals one device: a dropless MoE GPT under ep=2 (world 2) and
ep=2 x 4 data ranks (world 4: each expert on 2 ranks) trains as `single` (losses over 5 steps, final
parameters); with capacity 1.0 the same token-slots are dropped (counts and the MoE outputs, zeros
included); the all-to-all bytes comm records equal the analytic count from the routing."""
import pytest
import torch

from ep_harness import TINY, train

pytestmark = pytest.mark.timeout(300)

# fp32. The losses agree to ~1e-7; parameters after 5 AdamW steps differ only by the order in which the
# expert GEMMs and the data-parallel sums add the same terms (a few ulps, amplified by Adam's division by
# sqrt(v) on tiny second moments), hence atol 1e-5 on values of size ~0.02-1.
LOSS_RTOL, PARAM_ATOL = 1e-5, 1e-5


@pytest.fixture(scope="module")
def single():
    return {c: train(1, c, "single") for c in (0.0, 1.0)}


@pytest.fixture(scope="module")
def ep2(pool2):
    return {c: pool2.run(train, 2, c) for c in (0.0, 1.0)}


def _params_equal(ref: dict, got: dict) -> None:
    assert set(ref) == set(got)
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=0, atol=PARAM_ATOL, msg=k)


def _outputs_by_sequence(res: list) -> list:
    """Step 0's MoE outputs per layer, this rank's sequences concatenated in data-rank order."""
    ranks = sorted({r["dp_rank"]: r for r in res}.values(), key=lambda r: r["dp_rank"])
    return [torch.cat([r["outputs"][i] for r in ranks]) for i in range(len(ranks[0]["outputs"]))]


def test_dropless_ep2_equals_single(single, ep2):
    ref, res = single[0.0], ep2[0.0]
    for r in res:
        assert r["loss"] == pytest.approx(ref["loss"], rel=LOSS_RTOL)
    _params_equal(ref["params"], res[0]["params"])
    assert all(d == 0 for d in ref["dropped"]) and all(d == 0 for d in res[0]["dropped"])


def test_ep_checkpoint_keys_are_this_ranks_experts_under_their_global_names(ep2):
    keys = [set(r["state_keys"]) for r in ep2[0.0]]
    assert "blocks.0.mlp.experts.0.fc.weight" in keys[0] and "blocks.0.mlp.experts.2.fc.weight" in keys[1]
    assert "blocks.0.mlp.experts.2.fc.weight" not in keys[0]
    assert "blocks.0.mlp.router.weight" in keys[0] & keys[1]


def test_capacity_drops_the_same_token_slots_as_single(single, ep2):
    ref, res = single[1.0], ep2[1.0]
    assert sum(ref["dropped"]) > 0  # capacity 1.0 on random routing drops something
    assert res[0]["dropped"] == ref["dropped"]
    for got, want in zip(_outputs_by_sequence(res), ref["outputs"]):
        assert torch.equal(got.abs().sum(-1) == 0, want.abs().sum(-1) == 0)  # which tokens have no output
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for r in res:
        assert r["loss"] == pytest.approx(ref["loss"], rel=LOSS_RTOL)


def test_all_to_all_bytes_equal_the_routing_counts(ep2):
    """Per MoE layer and step, on rank r of an ep group of n with E experts (dropless, so every routed
    slot is sent): the counts exchange sends E int64 (wire: the (n-1) peers' share); dispatch sends
    S_r rows and combine R_r rows, each d * 4 bytes, and backward repeats both the other way: payload
    2 (S_r + R_r) d 4, wire the rows that cross ranks, 2 x (S_r - own + R_r - own) d 4."""
    res = ep2[0.0]
    E, n, d = 4, 2, TINY["d_model"]
    for step in range(5):
        want_bytes, want_wire = [0, 0], [0, 0]
        for layer in range(TINY["n_layer"]):
            counts = torch.tensor([r["tokens"][step][layer] for r in sorted(res, key=lambda r: r["ep_rank"])])
            to_rank = counts.view(n, n, E // n).sum(-1)  # [src, dst] rows
            for r in range(n):
                sent, recv, own = int(to_rank[r].sum()), int(to_rank[:, r].sum()), int(to_rank[r, r])
                want_bytes[r] += 8 * E + 2 * (sent + recv) * d * 4
                want_wire[r] += 8 * E * (n - 1) // n + 2 * (sent - own + recv - own) * d * 4
        for res_r in res:
            r = res_r["ep_rank"]
            assert res_r["bytes"][step] == want_bytes[r], (step, r)
            assert res_r["wire"][step] == want_wire[r], (step, r)


def test_dropless_ep2_x_dp4_world4_equals_single(single, pool4):
    """World 4: four data ranks, experts split over ep groups {0,1} and {2,3}; each expert's gradient is
    summed over its two holders (edp), dense ones over all four. (Dropless only: capacity's equality is
    the world-2 test's, and a second world-4 run would double this test's cost.)"""
    ref, res = single[0.0], pool4.run(train, 2, 0.0)
    for r in res:
        assert r["loss"] == pytest.approx(ref["loss"], rel=LOSS_RTOL)
    _params_equal(ref["params"], res[0]["params"])
