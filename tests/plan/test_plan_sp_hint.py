"""A tensor-parallel plan that does not fit with SP off says what SP would save (Llama 3 70B, TP 8, micro
batch 16, full recompute: a layout torchtitan ran on 96 GB cards, with its sequence parallelism)."""
import json

import pytest

from shardlab.plan import cli

ARGS = ["model=llama3-70b", "cluster=H100-SXM", "gpus=64", "tp=8", "dp=8", "strategy=zero3", "micro_batch=16",
        "global_batch=128", "recompute=full", "train.seq_len=8192", "flash_attention=true",
        "precision=bf16-mixed"]  # torchtitan: bf16 parameters under FSDP2 (Megatron-style 16-bit weights)


@pytest.fixture(autouse=True, scope="module")
def one_search():
    """The text verdict and the JSON one are two renderings of the same plan's fixes: the search behind them
    (~26,000 layouts tried, the ~5,400 that fit timed: 7 s on 2 cores) runs once for the module, the second rendering
    reads its result."""
    from shardlab.plan import search

    real, done = search.fixes, []

    def fixes(p, top=3, counts=None):
        for (plan, n), (found, got) in done:
            if n == top and plan == p:
                (counts if counts is not None else {}).update(got)
                return found
        got: dict = {}
        found = real(p, top, counts=got)
        done.append(((p, top), (found, got)))
        (counts if counts is not None else {}).update(got)
        return found

    patch = pytest.MonkeyPatch()
    patch.setattr(search, "fixes", fixes)
    yield done
    patch.undo()


def test_sp_hint_in_verdict(capsys):
    assert cli.main(ARGS) == 1
    out = capsys.readouterr().out
    hint = out.splitlines()[1]
    assert hint.startswith("sequence parallelism is off: sp=true") and hint.endswith("fits)")
    # among the fixes (with NCCL's achieved bus bandwidth, SP's all-gather/reduce-scatter rings run below the
    # NVLink SHARP all-reduce, so a smaller micro batch can rank first)
    fixes = out.split("fits with (same layout):")[1].split("best fitting")[0]
    assert "sp=true" in fixes


def test_sp_hint_json(capsys):
    assert cli.main(ARGS + ["--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    h = d["sp_hint"]
    # full recompute: the block inputs / 8 with SP; the loss's logits (8sbv/t, split by vocabulary either way)
    # are not cut by SP, so the whole is about a fifth
    assert h["fits_sp"] and h["activations_sp"] < h["activations"] / 4.5
    assert cli.main(ARGS + ["sp=true", "--json"]) == 0
    assert "sp_hint" not in json.loads(capsys.readouterr().out)
