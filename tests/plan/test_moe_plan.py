"""The planner's MoE / EP terms (plan/moe.py): parameter counts equal the model's, the all-to-all bytes
from routing counts equal comm's records on an ep=2 run, the uniform-routing expectation is that formula
on uniform counts and has the closed form of docs/moe.md, and `shardlab plan` takes the MoE keys and ep."""
import json

import pytest

from ep_harness import TINY, train
from shardlab.plan import moe
from shardlab.plan.cli import main as plan_main
from shardlab.plan.model import ModelSpec

pytestmark = pytest.mark.timeout(300)

SPEC = ModelSpec("tiny-moe", n_layer=TINY["n_layer"], d_model=TINY["d_model"], n_head=TINY["n_head"],
                 vocab=TINY["vocab_size"], seq=TINY["max_seq_len"])


@pytest.mark.parametrize("every,k", [(1, 2), (2, 1)])
def test_total_and_active_params_equal_the_models(every, k):
    from shardlab.model.gpt import GPTConfig, build_model
    from shardlab.model.moe import moe_layers

    model = build_model(GPTConfig(**TINY, moe_experts=4, moe_top_k=k, moe_every=every), seed=0)
    p = moe.params(SPEC, moe.MoESpec(4, k, every))
    assert p["total"] == sum(x.numel() for x in model.parameters())
    layers = moe_layers(model)
    assert p["moe_blocks"] == len(layers)
    one = sum(x.numel() for x in layers[0].experts[0].parameters())
    assert p["per_expert"] == one
    assert p["active"] == p["total"] - len(layers) * (4 - k) * one  # the k experts a token meets


def test_all_to_all_bytes_from_routing_counts_equal_comms_records(pool2):
    """ep=2, dropless, 2 steps: per step, the sum over MoE layers of from_counts(this step's per-rank
    counts) equals what comm recorded on each rank (payload and wire)."""
    res = sorted(pool2.run(train, 2, 0.0, steps=2), key=lambda r: r["ep_rank"])
    for step in range(2):
        want_p, want_w = [0, 0], [0, 0]
        for layer in range(TINY["n_layer"]):
            p, w = moe.from_counts([r["tokens"][step][layer] for r in res], 2, TINY["d_model"])
            want_p, want_w = [a + b for a, b in zip(want_p, p)], [a + b for a, b in zip(want_w, w)]
        assert [r["bytes"][step] for r in res] == want_p
        assert [r["wire"][step] for r in res] == want_w


def test_expected_bytes_are_from_counts_on_uniform_routing_and_the_closed_form():
    E, k, ep, b, s, m = 8, 2, 4, 4, 16, 3
    spec = moe.MoESpec(E, k, ep=ep)
    got = moe.expected(SPEC, spec, b * s, microbatches=m)
    slots = b * s * k
    p, w = moe.from_counts([[slots // E] * E for _ in range(ep)], ep, SPEC.d_model)
    layers = SPEC.n_layer * m
    assert got["payload"] == p[0] * layers and got["wire"] == w[0] * layers
    h = SPEC.d_model
    assert got["wire"] == layers * (8 * E * (ep - 1) / ep + 4 * (ep - 1) / ep * slots * h * 4)
    assert got["payload"] == layers * (8 * E + 4 * slots * h * 4)
    assert moe.expected(SPEC, moe.MoESpec(E, k, ep=1), b * s)["wire"] == 0


def test_expert_memory_per_rank_divides_by_ep():
    per = 16
    one = moe.expert_state_bytes(SPEC, moe.MoESpec(8, 2, ep=1), per)["expert_state_bytes_per_rank"]
    four = moe.expert_state_bytes(SPEC, moe.MoESpec(8, 2, ep=4), per)["expert_state_bytes_per_rank"]
    assert one == 4 * four == SPEC.n_layer * 8 * moe.expert_params(SPEC) * per


def test_plan_cli_takes_moe_keys_and_ep(capsys):
    args = ["model=tiny", "gpus=4", "micro_batch=4", "seq=128", "precision=fp32", "model.moe_experts=4",
            "model.moe_top_k=1", "parallel.ep=2"]
    assert plan_main([*args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["moe"]
    assert (d["ep"], d["experts_per_rank"], d["replicas_per_expert"]) == (2, 2, 2)
    assert d["params_total"] > d["params_active"] and d["all_to_all_bytes_per_step"]["wire"] > 0
    assert plan_main(args) == 0
    assert "all-to-all per step per rank" in capsys.readouterr().out


@pytest.mark.parametrize("args,needle", [
    (["moe_experts=3", "ep=2"], "not divisible by ep"),
    (["moe_experts=4", "moe_top_k=5"], "moe_top_k 5"),
    (["ep=2"], "needs moe_experts"),
    (["moe_experts=6", "ep=3"], "must divide moe_experts 6 and tp x cp x dp = 4"),
])
def test_plan_cli_bad_moe_input_exits_2_with_one_line(capsys, args, needle):
    assert plan_main(["model=tiny", "gpus=4", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
