"""An imported Hugging Face model generates under tp=2 and pp=2 the greedy tokens it generates on one
device, which are transformers' own (tests/checkpoint/test_hf_import.py): GPT-2 with an untied head and an
odd vocabulary (1001 rows: the vocab-parallel head pads them), Llama with grouped-query attention, and Llama
with one key/value head (replicated over tp), llama3 rope scaling and a tied head (its last pipeline stage
keeps the embedding as the head's weight and must not embed the hidden states it receives).

Everything runs in float64 (shardlab.testing.in_float64), so the split sums of tp and the stage hand-offs of
pp move logits by round-off of ~1e-14 and an argmax cannot flip: the ids are compared exactly.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from hf_harness import CASES, generate_layout, generate_layout_from, make_hf, prompts, reference_greedy  # noqa: E402
from shardlab.checkpoint import cli  # noqa: E402
from shardlab.testing import in_float64  # noqa: E402

LAYOUT_CASES = ["gpt2-untied", "llama-gqa-sharded", "llama3-tied-scaled"]
MAX_NEW = 8


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for case in LAYOUT_CASES:
        make_hf(case, root / case)
        assert cli.main(["import", "--hf", str(root / case), "--out", str(root / f"{case}.ck")]) == 0
        single = in_float64(generate_layout, str(root / f"{case}.ck"), 1, 1, MAX_NEW)
        theirs = [reference_greedy(root / case, p, MAX_NEW) for p in prompts(CASES[case]["vocab"])]
        assert single.tolist() == theirs, case  # one device: transformers' tokens
        out[case] = (root / f"{case}.ck", single, root / case)
    return out


@pytest.mark.parametrize("case", LAYOUT_CASES)
@pytest.mark.parametrize("tp,pp", [(2, 1), (1, 2)])
def test_imported_model_generates_the_same_greedy_tokens_under_tp2_and_pp2(pool2, imported, case, tp, pp):
    ck, single, _ = imported[case]
    results = pool2.run(in_float64, generate_layout, str(ck), tp, pp, MAX_NEW)
    assert len(set(single.flatten().tolist())) >= 6  # the paths wander: equal tokens prove something
    for rank, tokens in enumerate(results):
        if pp > 1 and rank > 0:  # only pipeline stage 0 returns the tokens
            assert tokens.numel() == 0
            continue
        assert torch.equal(tokens, single), f"rank {rank}"


@pytest.mark.parametrize("case", LAYOUT_CASES)
@pytest.mark.parametrize("source", ["checkpoint", "hf"])
@pytest.mark.parametrize("tp,pp", [(2, 1), (1, 2)])
def test_each_rank_reading_only_its_part_generates_the_same_greedy_tokens(pool2, imported, case, source, tp, pp):
    # what `shardlab generate --nproc 2` does: every rank builds on meta and reads its own slices, from the
    # imported checkpoint through DCP or from the HF directory through safetensors' get_slice
    ck, single, hf = imported[case]
    results = pool2.run(in_float64, generate_layout_from, str(ck if source == "checkpoint" else hf), tp, pp, MAX_NEW)
    assert torch.equal(results[0], single)
    assert all(r.numel() == 0 for r in results[1:]) if pp > 1 else torch.equal(results[1], single)
