"""`shardlab generate`: the KV cache changes nothing but speed, padding changes nothing, seeded sampling is
reproducible, tp 2 / pp 2 / dp 2 give the tokens one device gives (fp32, exact ids) with the comm bytes of
the formula, and greedy tokens equal Hugging Face transformers' `generate` on the exported weights.

Greedy ids are compared exactly. A split matmul or a padded batch adds in another order: logits of
magnitude ~9 moved by at most 1.1e-5 (padded batch vs each prompt alone, measured); the smallest gap
between the top two logits on these greedy paths is 8e-4 (generate_harness.decisive_model), so an argmax
cannot flip. Checked with ATEN_CPU_CAPABILITY=default|avx2 and MKL_CBWR=COMPATIBLE|AVX2.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

from cli_harness import as_rank
from generate_harness import CFG, PROMPTS, decisive_model, run_layout
from shardlab.generate.engine import Layout, Options, generate
from shardlab.testing.cli import run_cli


@functools.lru_cache(maxsize=None)
def _single(use_cache: bool = True, temperature: float = 0.0) -> torch.Tensor:
    opts = Options(max_new=12, temperature=temperature, top_k=20 if temperature else 0, seed=7, use_cache=use_cache)
    return generate(decisive_model(), PROMPTS, opts)[0]


def test_greedy_tokens_are_not_trivial():
    # guards the other tests: a model that repeats one byte would make every equality vacuous
    assert len(set(_single().flatten().tolist())) > 8


def test_cache_and_no_cache_give_identical_tokens():
    assert torch.equal(_single(use_cache=True), _single(use_cache=False))


def test_left_padded_batch_equals_each_prompt_alone():
    for i, p in enumerate(PROMPTS):
        alone = generate(decisive_model(), [p], Options(max_new=12))[0]
        assert torch.equal(alone[0], _single()[i]), f"prompt {i}"


def test_seeded_sampling_is_reproducible_and_depends_on_the_seed():
    again = generate(decisive_model(), PROMPTS, Options(max_new=12, temperature=1.0, top_k=20, seed=7))[0]
    other = generate(decisive_model(), PROMPTS, Options(max_new=12, temperature=1.0, top_k=20, seed=8))[0]
    assert torch.equal(again, _single(temperature=1.0))
    assert not torch.equal(other, again)


def test_kv_cache_prefill_logits_equal_the_training_forward():
    from shardlab.model.kv_cache import KVCache
    model = decisive_model()
    x = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        torch.testing.assert_close(model(x, KVCache(torch.zeros(1), 32)), model(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("tp,pp,dp,lanes", [(2, 1, 1, 0), (1, 2, 1, 1), (1, 2, 1, 2), (1, 1, 2, 0)])
def test_layout_greedy_tokens_equal_single_and_bytes_equal_analytic(pool2, tp, pp, dp, lanes):
    results = pool2.run(run_layout, tp, pp, dp, lanes)
    for r in results:
        if r["stage"] == 0:
            assert torch.equal(r["tokens"], _single()), f"layout tp={tp} pp={pp} dp={dp}"
        measured = {op: b for op, b in r["bytes"].items() if b}
        assert measured == r["analytic"], f"rank bytes {measured} != analytic {r['analytic']}"


@pytest.mark.parametrize("tp,pp,dp,lanes", [(2, 1, 2, 0), (1, 2, 2, 0), (2, 2, 1, 1), (2, 2, 1, 2)])
def test_four_rank_layouts_equal_single(pool4, tp, pp, dp, lanes):
    # tp x pp: the composition's stage, then tensor parallel on it; activations travel between the same tp
    # rank of the two stages, and both tp ranks of the last stage pick the same token from gathered logits
    results = pool4.run(run_layout, tp, pp, dp, lanes)
    for r in results:
        if r["stage"] == 0:
            assert torch.equal(r["tokens"], _single()), f"layout tp={tp} pp={pp} dp={dp}"
        if r["replica"] == 0:  # (the formula is written for replica 0's prompts)
            assert {op: b for op, b in r["bytes"].items() if b} == r["analytic"]


@pytest.mark.parametrize("tp,pp,dp", [(2, 1, 1), (1, 2, 1), (1, 1, 2)])
def test_layout_seeded_sampling_equals_single(pool2, tp, pp, dp):
    results = pool2.run(run_layout, tp, pp, dp, 0, True, 1.0)
    assert torch.equal(results[0]["tokens"], _single(temperature=1.0))


def test_pipeline_without_cache_equals_single(pool2):
    results = pool2.run(run_layout, 1, 2, 1, 2, False)
    assert torch.equal(results[0]["tokens"], _single())
    measured = {op: b for op, b in results[1]["bytes"].items() if b}
    assert measured == results[1]["analytic"]


def _write_hf(model, out):
    from safetensors.torch import save_file

    from shardlab.checkpoint import hf
    sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    out.mkdir()
    save_file(hf.to_hf(sd, CFG.n_layer), str(out / "model.safetensors"), metadata={"format": "pt"})
    m = {"n_layer": CFG.n_layer, "n_head": CFG.n_head, "d_model": CFG.d_model, "vocab_size": CFG.vocab_size,
         "max_seq_len": CFG.max_seq_len}
    (out / "config.json").write_text(json.dumps(hf.hf_config(m)))
    return out


def test_greedy_equals_transformers_generate_on_the_export(tmp_path):
    transformers = pytest.importorskip("transformers")
    from shardlab.generate.load import load_model
    hf_dir = _write_hf(decisive_model(), tmp_path / "hf")
    theirs_model = transformers.GPT2LMHeadModel.from_pretrained(str(hf_dir)).eval()
    ours_model = load_model(hf_dir)
    for p in PROMPTS:
        ours = generate(ours_model, [p], Options(max_new=12))[0][0]
        with torch.no_grad():
            out = theirs_model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                        do_sample=False, max_new_tokens=12, pad_token_id=0)
        assert ours.tolist() == out[0, len(p):].tolist()
        assert ours.tolist() == _single()[PROMPTS.index(p)].tolist()  # the HF round trip changes nothing


# --- the CLI ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return _write_hf(decisive_model(), tmp_path_factory.mktemp("gen") / "hf")


def test_cli_json_stdout_is_one_object_per_prompt(hf_dir, capsys):
    # in-process (the main a `shardlab generate` process runs); the real process, launched at pp=2, is the
    # next-but-one test, which checks the same stdout and stderr
    from shardlab.generate.cli import main
    assert main([str(hf_dir), "--prompt", "def main():", "--prompt", "x", "--max-new", "12", "--json",
                 "--temperature", "0"]) == 0
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert [d["prompt"] for d in lines] == ["def main():", "x"]
    assert [d["tokens"] for d in lines] == _single()[:2].tolist()
    assert "tokens/s" in err and "KV cache" in err


def test_cli_streams_the_first_prompt_then_prints_the_others(hf_dir, capsys):
    from shardlab.data.tokenizer import decode
    from shardlab.generate.cli import main
    assert main([str(hf_dir), "--prompt", "def main():", "--prompt", "x", "--max-new", "12", "--temperature", "0"]) == 0
    out, err = capsys.readouterr()
    first, second = (decode(ids) for ids in _single()[:2].tolist())
    assert out == f"def main():{first}\n--- prompt 2 ---\nx{second}\n"
    assert "time to first token" in err and "per-token latency" in err and "tokens/s" in err


def test_cli_pipeline_two_ranks_equals_single(hf_dir):
    # (--nproc too: the re-execution under torchrun must not hand it to torchrun's own parser)
    r = run_cli(["generate", str(hf_dir), "--prompt", "def main():", "--prompt", "x", "--max-new", "12", "--json",
                 "--temperature", "0", "--nproc", "2", "parallel.pp=2"], timeout=240)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]  # one object per prompt, nothing else on stdout
    assert [d["prompt"] for d in lines] == ["def main():", "x"]
    assert [d["tokens"] for d in lines] == _single()[:2].tolist()
    assert "tokens/s" in r.stderr and "KV cache" in r.stderr


def test_cli_tp_times_pp_four_ranks_equals_single(hf_dir, pool4):
    # what each of the 4 ranks of `shardlab generate --nproc 4` runs (its CLI entry, torchrun's variables set),
    # on the module's pool: the launch and re-execution themselves are the pp=2 test's real process above
    ranks = pool4.run(as_rank, ["generate", str(hf_dir), "--prompt", "def main():", "--prompt", "x", "--max-new",
                                "12", "--json", "--temperature", "0", "--nproc", "4", "parallel.tp=2", "parallel.pp=2"],
                      timeout=300)
    assert [code for code, _, _ in ranks] == [0] * 4, [err[-2000:] for _, _, err in ranks]
    stdout = ranks[0][1]  # rank 0 prints the answers
    assert [json.loads(line)["tokens"] for line in stdout.splitlines()] == _single()[:2].tolist()


@pytest.mark.parametrize("args,words", [
    (["/nonexistent/run", "--prompt", "x"], "does not exist"),
    (["HF", "--prompt", "x" * 60, "--max-new", "8"], "max_seq_len"),
    (["HF", "--prompt", "x" * 70], "longer than"),
    (["HF", "--prompt", "x", "--max-mem", "100"], "--max-mem"),
    (["HF", "--prompt", "x", "parallel.tp=3"], "does not divide"),
    (["HF", "--prompt", "x", "parallel.cp=2"], "unknown setting"),
    (["HF"], "no prompt"),
    (["HF", "--prompt", "x", "--nproc", "2"], "product"),
])
def test_cli_bad_input_is_one_line_exit_2(hf_dir, tmp_path, monkeypatch, capsys, args, words):
    # in-process (the same main() the subprocess tests run): validation happens before anything starts
    from shardlab.generate.cli import main
    monkeypatch.chdir(tmp_path)
    assert main([str(hf_dir) if a == "HF" else a for a in args]) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert out == "" and list(tmp_path.iterdir()) == []


def _train_tp2(run: Path) -> None:
    """What `shardlab train --config configs/tiny.toml --nproc 2 parallel.tp=2 ...` runs on each rank, on the
    module's pool (a real tp=2 CLI run is test_tp_compose.py's)."""
    import contextlib
    import io

    from shardlab import comm, config
    from shardlab.launch import launcher as launch
    from shardlab.train.trainer import Trainer

    cfg = config.load(Path(__file__).resolve().parents[2] / "configs" / "tiny.toml",
                      ["parallel.tp=2", "parallel.dp=ddp", "train.steps=2", "train.eval_every=0"])
    cfg = config.validate(cfg, comm.world_size())
    if comm.rank() == 0:
        launch.write_config(run, cfg)
    with contextlib.redirect_stdout(io.StringIO()):
        Trainer(cfg, run).run()


def test_checkpoint_of_a_tp_training_run_loads_and_equals_its_hf_export(tmp_path, pool2):
    # A checkpoint written by tensor-parallel training (2 ranks, sharded DTensors) loads on one device
    # through DCP's reshard path; its HF export gives the same weights and the same tokens.
    from shardlab.checkpoint.hf import export_hf
    from shardlab.generate.load import load_model, step_dir
    run = tmp_path / "run"
    pool2.run(_train_tp2, run, timeout=300)
    ours = load_model(run)
    exported = load_model(export_hf(step_dir(run), tmp_path / "hf"))
    for (name, a), (_, b) in zip(ours.named_parameters(), exported.named_parameters()):
        assert torch.equal(a, b), name
    opts = Options(max_new=8)
    assert torch.equal(generate(ours, PROMPTS, opts)[0], generate(exported, PROMPTS, opts)[0])


def test_pipeline_lanes_post_what_the_checker_proves(pool2):
    """Two stages, two lanes: the real posting log is lanes.py's plan, post for post, and it completes
    under NCCL's rules (the plan over pp 2..8 x lanes 1..8 is test_p2p_order.py's)."""
    from p2p_harness import logged

    from shardlab.generate.lanes import p2p_plans
    from shardlab.parallel.p2p_order import Post, check_all, from_logs

    real = from_logs(dict(pool2.run(logged, "generate_harness", "run_layout", 1, 2, 1, 2)))
    check_all(real)
    planned = p2p_plans(2, 2, 12)
    for r in (0, 1):
        got = [tuple((m.kind, m.peer) for m in e.msgs) for e in real[r] if isinstance(e, Post)]
        assert got == [tuple((m.kind, m.peer) for m in e.msgs) for e in planned[r] if isinstance(e, Post)]
