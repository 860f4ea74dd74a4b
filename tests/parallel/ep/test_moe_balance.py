"""The load-balancing cures on one device (docs/moe.md): the routers' own optimizer group
(`model.moe_router_lr_scale`) and auxiliary-loss-free balancing (`model.moe_bias_update`, DeepSeek-V3:
a bias picks the experts, the probabilities weight them, the bias moves against the step's load).
The bias under ep=2 equals one device: tests/parallel/ep/test_ep.py."""
import pytest
import torch

from shardlab import cli
from shardlab.launch import launcher as launch
from shardlab.config import Config
from shardlab.model.gpt import GPTConfig, build_model
from shardlab.model.moe import MoE, moe_layers
from shardlab.parallel import build
from shardlab.optim import set_lr

pytestmark = pytest.mark.timeout(120)

TINY = dict(n_layer=2, n_head=4, d_model=16, vocab_size=256, max_seq_len=8)


def _moe(bias_update: float, E=4, k=1, d=8):
    torch.manual_seed(0)
    experts = [torch.nn.Linear(d, d) for _ in range(E)]
    return MoE(d, experts, top_k=k, capacity=0.0, bias_update=bias_update)


def test_bias_picks_the_expert_and_the_probability_weights_it():
    m = _moe(0.01)
    m.expert_bias.copy_(torch.tensor([0.0, 0.0, 10.0, 0.0]))  # outweighs any probability difference
    x = torch.randn(2, 5, 8)
    out = m(x)
    assert m.stats["tokens_per_expert"].tolist() == [0, 0, 10, 0]
    probs = m.router(x).float().softmax(-1)
    torch.testing.assert_close(out, probs[..., 2:3] * m.experts[2](x))


def test_update_bias_moves_against_the_load_by_gamma():
    m = _moe(0.01)
    m.update_bias(torch.tensor([10, 2, 4, 0]))  # mean 4
    torch.testing.assert_close(m.expert_bias, torch.tensor([-0.01, 0.01, 0.0, 0.01]))


def test_bias_is_a_checkpoint_buffer_only_when_on():
    on = build_model(GPTConfig(**TINY, moe_experts=4, moe_bias_update=0.001), seed=0)
    off = build_model(GPTConfig(**TINY, moe_experts=4), seed=0)
    assert "blocks.1.mlp.expert_bias" in on.state_dict()
    assert set(on.state_dict()) - set(off.state_dict()) == {f"blocks.{i}.mlp.expert_bias" for i in (0, 1)}


def _optimizer(experts: int, scale: float):
    cfg = Config()
    cfg.parallel.strategy, cfg.model.moe_router_lr_scale = "single", scale
    model = build_model(GPTConfig(**TINY, moe_experts=experts), seed=0)
    return model, build(cfg, torch.device("cpu"), model, world_size=1).optimizer, cfg.train


def test_routers_get_their_own_group_at_scaled_lr_without_decay():
    model, opt, t = _optimizer(4, 0.1)
    routers = {id(m.router.weight) for m in moe_layers(model)}
    group = next(g for g in opt.param_groups if "lr_scale" in g)
    assert {id(p) for p in group["params"]} == routers and group["weight_decay"] == 0.0
    assert all(not routers & {id(p) for p in g["params"]} for g in opt.param_groups if g is not group)
    assert group["lr"] == pytest.approx(t.lr * 0.1)
    set_lr(opt, 1e-3)  # the schedule
    assert group["lr"] == pytest.approx(1e-4)
    assert all(g["lr"] == 1e-3 for g in opt.param_groups if g is not group)


def test_dense_model_param_groups_are_unchanged():
    _, opt, t = _optimizer(0, 0.1)
    assert [g["weight_decay"] for g in opt.param_groups] == [t.weight_decay, 0.0]
    assert all("lr_scale" not in g and g["lr"] == t.lr for g in opt.param_groups)


@pytest.mark.parametrize("arg, needle", [("model.moe_router_lr_scale=0", "model.moe_router_lr_scale=0"),
                                         ("model.moe_bias_update=-1", "model.moe_bias_update=-1")])
def test_bad_balance_input_exits_2_before_launch(tmp_path, capsys, monkeypatch, arg, needle):
    monkeypatch.setattr(launch, "launch", lambda *a: pytest.fail("launched"))
    out = tmp_path / "run"
    code = cli.cmd_train(["--out", str(out), "--nproc", "2", "model.preset=tiny", "model.moe_experts=4", arg])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert not out.exists()
