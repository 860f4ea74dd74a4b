"""train.optim_dtype=bf16 (optim/bf16_state.py): stochastic rounding is unbiased and seeded, the states are bf16
for AdamW and Muon, replicas stay equal, and a resumed run is bitwise the straight one."""
import pytest
import torch

from ckpt_harness import assert_params_equal, train_run
from shardlab.optim import registry
from shardlab.optim.bf16_state import noise_seed, stochastic_round


def test_stochastic_rounding_is_unbiased_seeded_and_exact_on_bf16_values():
    x = torch.full((1 << 16,), 1.0 + 2 ** -10)  # a quarter of an ulp above 1: nearest rounding loses it
    y = stochastic_round(x, 1).float()
    assert set(y.unique().tolist()) == {1.0, 1.0078125}
    assert y.mean().item() == pytest.approx(1.0 + 2 ** -10, abs=2e-5)
    z = torch.randn(1000).bfloat16().float()
    assert torch.equal(stochastic_round(z, 5).float(), z)  # already bf16: no change, whatever the noise
    assert torch.equal(stochastic_round(x, 3), stochastic_round(x, 3))
    assert noise_seed(1337, 2, 0, 0) != noise_seed(1337, 1, 0, 0) != noise_seed(1337, 1, 1, 0)


def test_the_registry_prices_the_state_dtype():
    adamw, muon = registry.get("adamw"), registry.get("muon")
    assert adamw.bytes_per_param_in("bf16") == 4 and adamw.bytes_per_param_in("fp32") == adamw.bytes_per_param == 8
    assert muon.bytes_per_param_in("bf16") == 2 and adamw.step_bytes_in("bf16") == 20 and adamw.step_bytes == 28
    from shardlab import config
    from shardlab.errors import ConfigError

    with pytest.raises(ConfigError, match="train.optim_dtype=bf16: train.optimizer=sgd"):
        config.validate(config.load(None, ["model.preset=tiny", "train.optimizer=sgd", "train.optim_dtype=bf16"]), 1)


def states_after(overrides):
    import step_driver
    from shardlab import comm

    cfg, par = step_driver.build(overrides, ["model.preset=tiny", "train.seq_len=16", "train.global_batch=4",
                                             "train.micro_batch=2", "train.lr=1e-2", "train.optim_dtype=bf16"])
    step_driver.train(par, cfg, 2)
    opt = par.optimizer
    dtypes = {k: v.dtype for st in opt.state.values() for k, v in st.items() if torch.is_tensor(v) and v.dim()}
    params = {n: p.detach().clone() for n, p in par.dp.model.named_parameters()}
    return dtypes, params, comm.rank()


@pytest.mark.parametrize("opt", ["adamw", "muon"])
def test_states_are_bf16_and_ddp_replicas_stay_equal(pool2, opt):
    (d0, p0, _), (d1, p1, _) = pool2.run(states_after, [f"train.optimizer={opt}", "parallel.strategy=ddp"],
                                         timeout=240)
    want = {"exp_avg", "exp_avg_sq"} | ({"momentum_buffer"} if opt == "muon" else set())
    assert set(d0) == want and set(d0.values()) == {torch.bfloat16}, d0
    assert_params_equal(p0, p1, exact=True)  # the same noise on every replica


COMMON = ["model.preset=tiny", "train.steps=6", "train.optim_dtype=bf16"]


@pytest.mark.parametrize("opt,layout", [("muon", "zero2"), ("adamw", "zero1")])
def test_bf16_resume_is_bitwise(pool2, tmp_path, opt, layout):
    base = COMMON + [f"train.optimizer={opt}", f"parallel.strategy={layout}"]
    straight = pool2.run(train_run, tmp_path / "straight", base, 2)
    run = tmp_path / "resumed"
    pool2.run(train_run, run, base + ["ckpt.every=3"], 2, stop_after=3)
    resumed = pool2.run(train_run, run, base + ["ckpt.resume=latest"], 2, rng_seed=7)
    for r in range(2):
        assert resumed[r]["start"] == 3
        assert_params_equal(resumed[r]["params"], straight[r]["params"], exact=True)
