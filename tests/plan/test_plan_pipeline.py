"""The planner on pipeline layouts: uneven splits (the busiest stage decides time and memory) and its
point-to-point bytes against what comm records in a real pipeline step."""
import pytest

from shardlab.plan.cli import main
from shardlab.plan.hardware import load_cluster
from shardlab.plan.layout import Layout, ends_as_blocks, stage_layers
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.model import ModelSpec
from shardlab.plan.step import evaluate

# BLOOM-176B (BigScience 2022): 70 layers, trained on 384 A100 as dp=8, tp=4, pp=12
BLOOM = dict(n_head=112, d_model=14336, vocab=250880, seq=2048)
BLOOM_LAYOUT = Layout(dp=8, strategy="zero1", tp=4, pp=12, recompute="selective")
BLOOM_TRAIN = TrainSpec(global_batch=2048, micro_batch=1)


def test_stage_layers_counts_the_busiest_rank():
    assert stage_layers(70, 12) == 6  # 10 stages of 6, 2 of 5
    assert stage_layers(72, 12) == 6 and stage_layers(60, 12) == 5
    assert stage_layers(9, 2, v=2) == 5  # chunks 3, 2, 2, 2: rank 0 holds 3 + 2
    assert stage_layers(8, 4, v=2) == 2


def test_uneven_split_is_planned_by_its_largest_stage():
    """70 layers on 12 stages: the 6-layer stages decide, so time and memory per rank are those of 72
    layers (6 on every stage), and more than 60 layers' (5 on every stage)."""
    c = load_cluster("A100-80G", 384)
    plans = {n: evaluate(ModelSpec(f"bloom-{n}", n_layer=n, **BLOOM), BLOOM_TRAIN, BLOOM_LAYOUT, c)
             for n in (60, 70, 72)}
    for k in ("forward", "backward", "bubble", "tp_pp_comm"):
        assert plans[70].times[k] == pytest.approx(plans[72].times[k], rel=1e-12), k
        assert plans[70].times[k] > plans[60].times[k], k
    assert plans[70].mem_total == pytest.approx(plans[72].mem_total, rel=1e-12)
    assert plans[70].mem_total > plans[60].mem_total


def test_cli_plans_bloom_on_12_stages(capsys):
    argv = ["n_layer=70", "d_model=14336", "n_head=112", "vocab=250880", "seq=2048", "cluster=A100-80G",
            "gpus=384", "tp=4", "pp=12", "strategy=zero1", "global_batch=2048", "micro_batch=1",
            "recompute=selective"]
    assert main(argv) in (0, 1)  # a plan (fits or not), not bad input
    assert "pp=12" in capsys.readouterr().out
    assert main(["model=gpt2", "n_layer=4", "pp=8", "gpus=8"]) == 2  # more stages than layers: bad input
    assert "every stage needs a layer" in capsys.readouterr().err
    # the embedding and the head weigh a block each (Megatron's 126 + 2 over 128 stages): one stage each is a plan
    ends = ["model=llama3-8b", "n_layer=6", "cluster=B200", "gpus=8", "pp=4", "v=2", "schedule=interleaved",
            "strategy=zero1", "global_batch=64"]
    assert main(ends + ["pp_split=ends-as-blocks"]) in (0, 1) and main(ends) == 2


@pytest.mark.parametrize("m", [2, 4])
def test_planner_p2p_bytes_equal_the_comm_recorders_at_pp2(pool2, m):
    """pp = 2, 1F1B: each rank sends one message per microbatch (activation forward or gradient back) and
    receives one; the planner's p2p payload per rank is what comm records as sent plus received."""
    from shardlab.parallel.pp.testing import TINY4, p2p_bytes

    got = pool2.run(p2p_bytes, "1f1b", m)
    model = ModelSpec("tiny4", n_layer=TINY4["n_layer"], d_model=TINY4["d_model"], n_head=TINY4["n_head"],
                      vocab=TINY4["vocab_size"], seq=TINY4["max_seq_len"])
    # batch() in parallel/pp/testing.py: microbatches of 2 sequences, fp32 activations
    plan = evaluate(model, TrainSpec(global_batch=2 * m, micro_batch=2, precision="fp32"), Layout(pp=2),
                    load_cluster("A100-80G", 2))
    for rank in got:
        assert rank["send"] > 0 and rank["recv"] > 0
        assert plan.bytes_per_step()["p2p"] == rank["send"] + rank["recv"]


def test_ends_as_blocks_split():
    """pp_split=ends-as-blocks (Megatron-DeepSpeed's 'type:transformer|embedding'): BLOOM's 70 blocks + 2 ends
    over 12 stages are 6 each, the end stages one block short; the slowest rank is then a full middle stage or
    the head's, never 6 blocks plus the head (the default "blocks" count)."""
    assert ends_as_blocks(70, 12) == [(5, 1, 0)] + [(6, 0, 0)] * 10 + [(5, 0, 1)]
    assert ends_as_blocks(70, 36)[-1] == (1, 0, 1)
    assert ends_as_blocks(6, 2, 2) == [(3, 1, 0), (3, 0, 1)]  # interleaved: rank 0 holds stages 0 and 2
    model = ModelSpec("bloomish", n_layer=22, d_model=1024, n_head=16, vocab=250880, seq=2048)
    train = TrainSpec(global_batch=64, micro_batch=1, seq=2048, precision="bf16-mixed")
    plans = {s: evaluate(model, train, Layout(dp=1, pp=4, pp_split=s, recompute="full"),
                         load_cluster("A100-80G", 4)) for s in ("blocks", "ends-as-blocks")}
    assert plans["ends-as-blocks"].step_time < plans["blocks"].step_time
    assert "ends-as-blocks" in plans["ends-as-blocks"].explain["forward"]
    with pytest.raises(ValueError, match="pp_split"):
        Layout(pp=2, pp_split="even").check(model)
