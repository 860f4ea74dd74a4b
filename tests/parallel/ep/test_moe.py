"""The mixture-of-experts model on one device (model/moe.py): routing, capacity per sequence, the combine,
the auxiliary losses' linearity in sequences, checkpoint keys, and bad MoE/EP input (one line, exit 2)."""
import math

import pytest
import torch

from shardlab import cli
from shardlab.launch import launcher as launch
from shardlab.model.gpt import GPTConfig, build_model
from shardlab.model.moe import MoE, collect, loss_term, moe_layers

pytestmark = pytest.mark.timeout(120)

TINY = dict(n_layer=2, n_head=4, d_model=16, vocab_size=256, max_seq_len=8)


def _moe(E=4, k=2, capacity=0.0, d=8, seed=0):
    torch.manual_seed(seed)
    experts = [torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Linear(2 * d, d))
               for _ in range(E)]
    return MoE(d, experts, top_k=k, capacity=capacity)


def _reference(m: MoE, x: torch.Tensor) -> torch.Tensor:
    """Token by token: sum over its top-k experts of (renormalised probability) x expert(token)."""
    out = torch.zeros_like(x)
    probs = m.router(x).float().softmax(-1)
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            w, e = probs[b, t].topk(m.top_k)
            w = w / w.sum() if m.top_k > 1 else w
            for wi, ei in zip(w, e):
                out[b, t] += wi * m.experts[int(ei)](x[b, t])
    return out


@pytest.mark.parametrize("k", [1, 2])
def test_dropless_moe_equals_token_by_token_reference(k):
    m = _moe(k=k)
    x = torch.randn(3, 5, 8)
    torch.testing.assert_close(m(x), _reference(m, x), rtol=1e-5, atol=1e-6)
    assert m.stats["dropped"] == 0 and int(m.stats["tokens_per_expert"].sum()) == 3 * 5 * k


def test_capacity_drops_later_positions_per_sequence_and_their_output_is_zero():
    """Router forced to send every token to experts 0 (top-1): capacity ceil(1.0 * 6 * 1 / 4) = 2 per
    sequence, so in each sequence positions 0, 1 are kept and 2..5 dropped (MoE output exactly 0)."""
    m = _moe(E=4, k=1, capacity=1.0)
    with torch.no_grad():
        m.router.weight.zero_()
        m.router.weight[0, 0] = 10.0
    x = torch.randn(2, 6, 8)
    x[..., 0] = 1.0
    y = m(x)
    assert m.capacity(6) == 2
    assert m.stats["dropped"] == 2 * 4
    assert m.stats["tokens_per_expert"].tolist() == [12, 0, 0, 0]  # routed, counted before dropping
    assert torch.all(y[:, 2:] == 0)
    assert torch.all(y[:, :2].abs().sum(-1) > 0)
    # a sequence drops the same slots whatever other sequences share its batch
    y1 = m(x[1:])
    torch.testing.assert_close(y1, y[1:], rtol=1e-6, atol=1e-7)


def test_aux_and_z_losses_are_linear_in_sequences_and_give_gradients():
    """The loss term of a batch equals the sum over any split of its sequences (what makes every DP/EP
    split equal single); balanced routing gives aux = 1; every expert and the router get a gradient."""
    m = _moe(E=4, k=2, capacity=1.25)
    x = torch.randn(4, 6, 8)
    whole = m(x)
    live = m.loss_term
    term, stats = live.detach(), dict(m.stats)
    parts = []
    for chunk in x.split(1):
        m(chunk)
        parts.append((m.loss_term.detach(), dict(m.stats)))
    torch.testing.assert_close(sum(p[0] for p in parts), term, rtol=1e-6, atol=1e-7)
    assert sum(p[1]["dropped"] for p in parts) == stats["dropped"]
    assert torch.equal(sum(p[1]["tokens_per_expert"] for p in parts), stats["tokens_per_expert"])
    assert math.isclose(sum(p[1]["aux"] for p in parts) / 4, stats["aux"], rel_tol=1e-6)
    # the Switch form: E * sum f_i P_i is 1 when routing and probabilities are uniform
    u = _moe(E=4, k=2)
    with torch.no_grad():
        u.router.weight.zero_()
    u(torch.randn(1, 8, 8))
    assert math.isclose(u.stats["aux"], 1.0, rel_tol=1e-6)
    (whole.sum() + live).backward()
    assert m.router.weight.grad is not None and m.router.weight.grad.abs().sum() > 0
    assert all(p.grad is not None for p in m.experts.parameters())


def test_aux_loss_gradient_on_the_router_is_switchs_by_hand():
    """The step divides the summed loss by the token count, so the router's gradient from `loss_term`
    must be exactly w x mean over sequences of Switch's E sum_i f_i P_i, derived by hand: with p the
    softmax and f_i the sequence's share routed to i (no gradient), dL_s/dlogit_tm = E/T sum_i f_i p_ti
    (delta_im - p_tm), and dW = sum_t dlogit_t x_t^T. fp32; agreement to round-off (measured 3e-8)."""
    torch.manual_seed(0)
    b, t, d, E, w = 3, 5, 8, 4, 0.5
    m = MoE(d, [torch.nn.Linear(d, d) for _ in range(E)], top_k=1, capacity=0, aux_weight=w, z_weight=0.0)
    x = torch.randn(b, t, d)
    m(x)
    (m.loss_term / (b * t)).backward()
    p = (x @ m.router.weight.detach().T).softmax(-1)
    f = torch.nn.functional.one_hot(p.argmax(-1), E).float().mean(1)[:, None, :]  # (b, 1, E)
    dlogit = E / t * (p * f - p * (p * f).sum(-1, keepdim=True))
    by_hand = w / b * torch.einsum("bte,btd->ed", dlogit, x)
    torch.testing.assert_close(m.router.weight.grad, by_hand, rtol=1e-5, atol=1e-6)


def test_gpt_moe_keys_one_per_expert_on_every_nth_block():
    model = build_model(GPTConfig(**TINY, moe_experts=4, moe_every=2), seed=0)
    keys = set(model.state_dict())
    assert "blocks.1.mlp.router.weight" in keys and "blocks.1.mlp.experts.3.fc.weight" in keys
    assert "blocks.0.mlp.fc.weight" in keys and "blocks.0.mlp.router.weight" not in keys
    assert len(moe_layers(model)) == 1
    dense = build_model(GPTConfig(**TINY), seed=0)
    assert not moe_layers(dense)


def test_model_stats_and_loss_term_sum_over_layers():
    model = build_model(GPTConfig(**TINY, moe_experts=4, moe_top_k=2, moe_capacity=1.0), seed=0)
    x = torch.randint(0, 256, (2, 8))
    model(x)
    layers = moe_layers(model)
    s = collect(layers)
    assert len(layers) == 2 and s["tokens_per_expert"].shape == (4,)
    assert int(s["tokens_per_expert"].sum()) == 2 * 2 * 8 * 2  # layers x sequences x tokens x k
    assert s["dropped"] == sum(m.stats["dropped"] for m in layers)
    torch.testing.assert_close(loss_term(layers), layers[0].loss_term + layers[1].loss_term)


def test_llama_moe_builds_with_swiglu_experts():
    from shardlab.model.llama import LlamaConfig

    model = build_model(LlamaConfig(n_layer=1, n_head=4, d_model=16, ffn_multiple_of=16, moe_experts=2,
                                    moe_top_k=1), seed=0)
    assert "blocks.0.mlp.experts.1.gate.weight" in model.state_dict()
    assert model(torch.randint(0, 256, (2, 4))).shape == (2, 4, 256)


# dataclasses.asdict of a model config is a checkpoint's `model` metadata (load compares it key by key,
# generate and the HF export rebuild the config from it): the keys and defaults pinned as they were when
# each family spelled out its own moe_* fields. The HF import added tie_embeddings (GPT-2) and tie_embeddings +
# rope_scaling (Llama), whose defaults are today's models (a checkpoint without them loads as before:
# tests/checkpoint/test_golden_ckpt.py).
MOE_DEFAULTS = dict(moe_experts=0, moe_top_k=2, moe_every=1, moe_capacity=1.25, moe_aux_weight=0.01,
                    moe_z_weight=0.001, moe_bias_update=0.0)


def test_shared_moe_fields_keep_both_configs_checkpoint_keys_and_defaults():
    import dataclasses

    from shardlab.config import ModelConfig
    from shardlab.model.llama import LlamaConfig

    assert dataclasses.asdict(GPTConfig(2, 4, 64)) == dict(
        n_layer=2, n_head=4, d_model=64, vocab_size=256, max_seq_len=128, dropout=0.0, layer_norm_eps=1e-5,
        tie_embeddings=True, **MOE_DEFAULTS)
    assert dataclasses.asdict(LlamaConfig(2, 4, 64)) == dict(
        n_layer=2, n_head=4, d_model=64, n_kv_heads=4, vocab_size=256, max_seq_len=128, ffn_multiple_of=256,
        ffn_dim_multiplier=1.0, rope_theta=500000.0, norm_eps=1e-5, dropout=0.0, intermediate_size=0,
        **MOE_DEFAULTS, arch="llama", tie_embeddings=False, rope_scaling=None)
    # the [model] section's defaults (config.py) are the ones the model configs get
    assert {k: getattr(ModelConfig(), k) for k in MOE_DEFAULTS} == MOE_DEFAULTS
    assert LlamaConfig(2, 4, 64, moe_experts=4, moe_every=2).moe_every == 2

@pytest.mark.parametrize("args, needle", [
    (["model.moe_experts=3", "parallel.ep=2"], "model.moe_experts=3 is not divisible by parallel.ep=2"),
    (["model.moe_experts=4", "model.moe_top_k=5"], "model.moe_top_k=5"),
    (["model.moe_experts=4", "model.moe_top_k=0"], "model.moe_top_k=0"),
    (["parallel.ep=2"], "parallel.ep=2 without experts"),
    (["model.moe_experts=4", "model.moe_every=0"], "model.moe_every=0"),
    (["model.moe_experts=4", "parallel.ep=2", "parallel.strategy=zero3"], "parallel.dp=zero3"),
])
def test_bad_moe_input_exits_2_before_launch(tmp_path, capsys, monkeypatch, args, needle):
    monkeypatch.setattr(launch, "launch", lambda *a: pytest.fail("launched"))
    out = tmp_path / "run"
    code = cli.cmd_train(["--out", str(out), "--nproc", "2", "model.preset=tiny", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_ep_and_edp_groups_split_the_data_parallel_ranks():
    """ep borrows dp ranks: consecutive dp ranks form an ep group, those at the same ep coordinate an edp
    group; with tp, each tp coordinate has its own (pure arithmetic, no processes)."""
    from shardlab.parallel.mesh import ParallelDims

    d = ParallelDims(dp_replicate=4, ep=2)
    assert [d.ranks("ep", r) for r in range(4)] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [d.ranks("edp", r) for r in range(4)] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert (d.size("ep"), d.size("edp"), d.coord("ep", 3), d.coord("edp", 3)) == (2, 2, 1, 1)
    t = ParallelDims(dp_replicate=2, tp=2, ep=2)  # ranks 0,1 = tp group of dp rank 0
    assert t.ranks("ep", 1) == [1, 3] and t.ranks("edp", 1) == [1] and t.size("edp") == 1


def test_moe_with_dtensor_tp_or_sp_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(launch, "launch", lambda *a: pytest.fail("launched"))
    for extra in (["parallel.tp_impl=dtensor"], ["parallel.sp=true"]):
        code = cli.cmd_train(["--out", str(tmp_path / "run"), "--nproc", "2", "model.preset=tiny",
                              "model.moe_experts=4", "parallel.tp=2", "train.seq_len=32", *extra])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1 and "own tensor parallelism without SP" in err, err
