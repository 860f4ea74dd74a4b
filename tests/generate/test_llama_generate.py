"""`shardlab generate` with the llama family: rotary positions per row, a KV cache of n_kv_heads
heads (grouped-query attention), Llama checkpoints and LlamaForCausalLM exports load, and greedy tokens
equal Hugging Face transformers' `generate` on the export.

Greedy ids are compared exactly, as in test_generate.py: on these greedy paths the smallest gap between the
top two logits is 1.8e-2 (generate_harness.decisive_model("llama"), measured), far above the ~1e-5 a
different summation order moves logits of magnitude ~9, so an argmax cannot flip.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import pytest
import torch

from generate_harness import LLAMA_CFG as CFG, PROMPTS, decisive_model, run_layout
from shardlab.generate.engine import Layout, Options, generate, kv_cache_bytes
from shardlab.generate.sampling import left_pad
from shardlab.model.kv_cache import KVCache


@functools.lru_cache(maxsize=None)
def _single(use_cache: bool = True) -> torch.Tensor:
    return generate(decisive_model("llama"), PROMPTS, Options(max_new=12, use_cache=use_cache))[0]


def test_llama_cache_and_no_cache_give_identical_greedy_tokens():
    assert len(set(_single().flatten().tolist())) > 12  # the path wanders: equal tokens prove something
    assert torch.equal(_single(True), _single(False))


def test_llama_left_padded_batch_equals_each_prompt_alone():
    # each row's rotary positions count from its first real token, so padding moves nothing
    model = decisive_model("llama")
    for i, p in enumerate(PROMPTS):
        assert torch.equal(generate(model, [p], Options(max_new=12))[0][0], _single()[i])


def test_llama_kv_cache_prefill_logits_equal_the_training_forward():
    model = decisive_model("llama")
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        cached = model(ids, KVCache(torch.zeros(1), ids.shape[1]))
        plain = model(ids)
    torch.testing.assert_close(cached, plain, rtol=1e-5, atol=1e-5)  # SDPA with a mask vs is_causal: order only


def test_llama_kv_cache_bytes_use_n_kv_heads():
    model = decisive_model("llama")
    ids, pad = left_pad(PROMPTS)
    max_new = 12
    length = ids.shape[1] + max_new
    cache = KVCache(pad, length)
    with torch.no_grad():
        model(ids, cache)
    expected = 2 * CFG.n_layer * len(PROMPTS) * length * CFG.n_kv_heads * CFG.head_dim * 4
    assert cache.allocated_bytes() == expected
    assert generate(model, PROMPTS, Options(max_new=max_new))[1].kv_bytes == expected
    assert CFG.n_kv_heads * CFG.head_dim == CFG.d_model // 2  # half of what multi-head attention would hold


def _write_hf(model, out: Path) -> Path:
    from safetensors.torch import save_file

    from shardlab.checkpoint import hf
    out.mkdir()
    save_file(hf.llama_to_hf(model.state_dict(), CFG.n_layer), str(out / "model.safetensors"),
              metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(hf.llama_hf_config(dataclasses.asdict(CFG))))
    return out


def test_llama_greedy_equals_transformers_generate_on_the_export(tmp_path):
    transformers = pytest.importorskip("transformers")
    from shardlab.generate.load import load_model
    hf_dir = _write_hf(decisive_model("llama"), tmp_path / "hf")
    theirs_model = transformers.LlamaForCausalLM.from_pretrained(str(hf_dir)).eval()
    ours_model = load_model(hf_dir)
    for i, p in enumerate(PROMPTS):
        ours = generate(ours_model, [p], Options(max_new=12))[0][0]
        with torch.no_grad():
            out = theirs_model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                        do_sample=False, max_new_tokens=12, pad_token_id=0)
        assert ours.tolist() == out[0, len(p):].tolist()
        assert ours.tolist() == _single()[i].tolist()  # the HF round trip changes nothing


def test_llama_tp2_greedy_tokens_equal_single_and_bytes_equal_analytic(pool2):
    # 2 key/value heads over 2 ranks: split, one per rank (each rank's cache holds one head)
    results = pool2.run(run_layout, 2, 1, 1, 0, True, 0.0, 12, "llama")
    for r in results:
        assert torch.equal(r["tokens"], _single())
        assert {op: b for op, b in r["bytes"].items() if b} == r["analytic"]
    assert 2 * kv_cache_bytes(CFG, Layout(tp=2), PROMPTS, 12) == kv_cache_bytes(CFG, Layout(), PROMPTS, 12)
    # multi-query (one key/value head): replicated under tp=2, each rank's cache holds that one head
    mqa = dataclasses.replace(CFG, n_kv_heads=1)
    assert kv_cache_bytes(mqa, Layout(tp=2), PROMPTS, 12) == kv_cache_bytes(mqa, Layout(), PROMPTS, 12)


def test_llama_tp2_pp2_greedy_tokens_equal_single_and_bytes_equal_analytic(pool4):
    results = pool4.run(run_layout, 2, 2, 1, 2, True, 0.0, 12, "llama")
    for r in results:
        if r["stage"] == 0:
            assert torch.equal(r["tokens"], _single())
        assert {op: b for op, b in r["bytes"].items() if b} == r["analytic"]


def test_a_llama_training_checkpoint_generates_as_its_hf_export(tmp_path):
    from shardlab.checkpoint.hf import export_hf
    from shardlab.generate.cli import main
    from shardlab.generate.load import load_model, step_dir
    import contextlib
    import io

    from shardlab import config
    from shardlab.launch import launcher as launch
    from shardlab.train.trainer import Trainer
    run = tmp_path / "run"
    # one process's training, in this process (what `shardlab train --nproc 1 parallel.strategy=single` runs;
    # a real llama training process is test_llama.py's configs/llama-small.toml run)
    cfg = config.load(None, ["model.preset=llama-tiny", "train.steps=1", "train.eval_every=0", "train.seq_len=32",
                             "parallel.strategy=single"])
    cfg = config.validate(cfg, 1)
    launch.write_config(run, cfg)
    with contextlib.redirect_stdout(io.StringIO()):
        Trainer(cfg, run).run()
    ours = load_model(run)
    assert type(ours).__name__ == "Llama" and ours.cfg.n_kv_heads == 2
    exported = load_model(export_hf(step_dir(run), tmp_path / "hf"))
    for (name, a), (_, b) in zip(ours.named_parameters(), exported.named_parameters()):
        assert torch.equal(a, b), name
    opts = Options(max_new=8)
    assert torch.equal(generate(ours, PROMPTS, opts)[0], generate(exported, PROMPTS, opts)[0])
    assert main([str(run), "--prompt", "x", "--max-new", "4", "--json"]) == 0
