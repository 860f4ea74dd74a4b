"""The planner's communication and state-memory model against shardlab's own strategies, run for real
on 2 gloo ranks: bytes per collective per step and params/grads/optimizer bytes must be equal."""
import pytest

from shardlab.plan.comm import dp_bytes_per_step
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.memory import state_bytes
from shardlab.plan.model import ModelSpec
from zero_harness import ODD, train

pytestmark = pytest.mark.timeout(240)


def spec(kw: dict) -> ModelSpec:
    return ModelSpec("t", n_layer=kw["n_layer"], d_model=kw["d_model"], n_head=kw["n_head"],
                     vocab=kw["vocab_size"], seq=kw["max_seq_len"])


# ODD: nothing divisible by 2 (vocab 257, d_model 3, 13 positions), so row padding shows everywhere
@pytest.mark.parametrize("model_kw", [ODD], ids=["odd"])
@pytest.mark.parametrize("name", ["ddp", "zero1", "zero2", "zero3"])
def test_bytes_per_step_and_state_bytes_match_a_real_run(pool2, name, model_kw):
    accum, micro = 2, 2
    out = pool2.run(train, name, steps=1, model_kw=model_kw, accum=accum, micro=micro)
    m = spec(model_kw)
    tr = TrainSpec(global_batch=accum * micro * 2, micro_batch=micro, precision="fp32")
    lay = Layout(dp=2, strategy=name)
    for rank in out:
        measured = {op: b for op, b in rank["comm"]["bytes"].items() if b}  # 0-byte object broadcasts
        assert dp_bytes_per_step(m, tr, lay, m=accum) == measured
        got = state_bytes(m, tr, lay)
        assert {k: rank["state"][k] for k in got} == got
