"""Tensor parallelism's accounting at tp=2 (the TP group is the world), through the composition the trainer
uses: the planner's bytes equal what comm records, the state per rank equals the memory formula, and the
doctor compares what TP keeps whole within the TP group."""
import pytest

from shardlab.plan.comm import local_params, tp_bytes_per_step, tp_pp_collectives
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.model import ModelSpec
from tp_account_harness import BATCH, TINY, doctor_checksums, held_bytes, recorded_bytes

pytestmark = pytest.mark.timeout(300)

VOCAB257 = dict(TINY, vocab_size=257)  # padded to 258 rows at tp=2


def spec(kw: dict) -> ModelSpec:
    return ModelSpec("tiny", n_layer=kw["n_layer"], d_model=kw["d_model"], n_head=kw["n_head"],
                     vocab=kw["vocab_size"], seq=kw["max_seq_len"])


@pytest.mark.parametrize("sp", [False, True], ids=["nosp", "sp"])
def test_planner_tp_bytes_equal_recorded(pool2, sp):
    """One step of own TP at tp=2 (forward, vocab-parallel loss, backward, SP's gradient sum, clipping):
    comm's payload bytes per op equal the planner's for the same layout, exactly."""
    got = pool2.run(recorded_bytes, sp)
    tr = TrainSpec(global_batch=BATCH, micro_batch=BATCH, precision="fp32")
    want = tp_bytes_per_step(spec(TINY), tr, Layout(tp=2, sp=sp), m=1)
    for rank in got:
        assert rank == want


def test_planner_vocab_parallel_loss_sends_per_token_not_per_logit():
    """The loss's collectives carry 3 fp32 numbers per token whatever the vocabulary: O(tokens)."""
    tr = TrainSpec(global_batch=4, micro_batch=4, precision="fp32")
    loss = []
    for vocab in (256, 50304):
        m = ModelSpec("t", n_layer=2, d_model=64, n_head=4, vocab=vocab, seq=16)
        cs = tp_pp_collectives(m, tr, Layout(tp=2), m=3)
        loss.append([c for c in cs if "loss" in c.why])
    assert loss[0] == loss[1] and len(loss[0]) == 1
    assert loss[0][0].payload == 3 * 4 * (4 * 16) * 3 and loss[0][0].calls == 2 * 3  # 3 micro batches


@pytest.mark.parametrize("model_kw", [TINY, VOCAB257], ids=["vocab256", "vocab257"])
def test_state_per_rank_is_split_over_tp_plus_whole(pool2, model_kw):
    """Parameters, gradients and AdamW moments each rank really holds after a step = 4, 4 and 8 bytes x
    (Psi_s / N + Psi_r): the split part (vocabulary padded to N*c rows) over N, plus what TP keeps whole
    (docs/tp.md); the composition's state_bytes and the planner say the same."""
    L, h, T, V = (model_kw[k] for k in ("n_layer", "d_model", "max_seq_len", "vocab_size"))
    n = 2
    c = -(-V // n)
    psi_s = L * (12 * h * h + 7 * h) + c * n * h
    psi_r = L * 6 * h + 2 * h + T * h
    per_rank = psi_s // n + psi_r
    for rank in pool2.run(held_bytes, model_kw):
        assert (rank["split_numel"], rank["whole_numel"]) == (psi_s // n, psi_r)
        assert (rank["params"], rank["grads"], rank["optimizer"]) == (4 * per_rank, 4 * per_rank, 8 * per_rank)
        assert rank["reported"] == {"params": 4 * per_rank, "grads": 4 * per_rank, "optimizer": 8 * per_rank}
    assert local_params(spec(model_kw), tp=2) == per_rank


@pytest.mark.parametrize("sp", [False, True], ids=["nosp", "sp"])
def test_doctor_compares_tp_replicated_parameters_within_the_tp_group(pool2, tmp_path, sp):
    """With no data-parallel replica to compare (dp = 1), the doctor still compares what TP keeps whole
    (LayerNorms, row-parallel biases, positions) across the TP group: equal after healthy steps (SP sums
    their partial gradients), and one LayerNorm weight nudged on rank 1 is named, with the rank."""
    out = pool2.run(doctor_checksums, str(tmp_path), sp, 1, "blocks.1.ln_2.weight")[0]
    healthy, broken = out["healthy"], out["broken"]
    L = TINY["n_layer"]
    assert healthy["consistent"] and healthy["tp"]["compared"] == L * 6 + 2 + 1  # ln_1, ln_2 (w, b), 2 row biases; ln_f; wpe
    assert not broken["consistent"] and broken["dp_consistent"]
    first = broken["tp"]["first"]
    assert (first["param"], first["ranks"], first["reference_rank"]) == ("blocks.1.ln_2.weight", [1], 0)
    assert first["detail"]["1"]["n_diff"] == 1
    assert broken["first"] == first  # what the run's verdict names (shardlab: FAILED ... first parameter ...)
    assert "TP COPIES DIVERGED" in out["text"] and "blocks.1.ln_2.weight" in out["text"]


ONE_BLOCK = dict(TINY, n_layer=1)


def _symbols(kw: dict) -> dict[int, str]:
    b, s, h, L = BATCH, kw["max_seq_len"], kw["d_model"], kw["n_layer"]
    psi_r = L * 6 * h + 2 * h + s * h
    return {b * s * h * 4: "A = b·s·h·4 B", b * s * 4: "4·b·s B", 2 * b * s * 4: "8·b·s B",
            psi_r * 4: "Ψ_r·4 B", 8: "8 B"}


@pytest.mark.parametrize("sp", [False, True], ids=["nosp", "sp"])
def test_docs_show_who_sends_what_as_the_code_records_it(pool2, sp):
    """docs/tp.md's tables of one step's collectives (one block, tp=2) are what comm records in a real step."""
    import re
    from pathlib import Path

    from shardlab.observe.tp_diagram import who_sends_what
    from tp_account_harness import step_records

    drawn = who_sends_what(pool2.run(step_records, sp, ONE_BLOCK)[0], _symbols(ONE_BLOCK))
    text = (Path(__file__).resolve().parents[3] / "docs" / "tp.md").read_text()
    shown = re.findall(rf"<!-- who-sends-what sp={str(sp).lower()} -->\n```\n(.*?)\n```", text, re.S)
    assert shown == [drawn], f"docs/tp.md (sp={sp}) is stale; it should show:\n{drawn}"
