"""`shardlab generate RUN_OR_CHECKPOINT --prompt TEXT ... [key=value ...]`.

Everything is validated in the launching process first (bad input: one line on stderr, exit 2, nothing
started); with --nproc > 1 it then re-executes itself under torchrun and every rank runs the engine.
Rank 0 streams the first prompt's text to stdout (or, with --json, prints one JSON object per prompt and
nothing else there); the figures (KV cache size, time to first token, latency, tokens/s, comm bytes) go
to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

KEYS = {"parallel.tp": "tp", "parallel.pp": "pp", "parallel.dp_replicate": "dp", "parallel.pp_microbatches": "lanes"}


ARGV_ENV = "SHARDLAB_GENERATE_ARGV"  # the launching process's arguments, for the ranks it starts


class BadInput(ValueError):
    pass


def parser() -> argparse.ArgumentParser:
    from shardlab.errors import OneLineParser

    p = OneLineParser(prog="shardlab generate", description="Generate text from a trained checkpoint or an "
                       "exported Hugging Face directory, on one device or under tp / pp / dp layouts.",
                       epilog="keys: parallel.tp, parallel.pp, parallel.dp_replicate (degrees; their product is "
                              "the world), parallel.pp_microbatches (request lanes under pp; default: one per stage)")
    p.add_argument("path", metavar="RUN_OR_CHECKPOINT", help="run directory, checkpoints/ dir, step dir, or HF export dir")
    p.add_argument("--prompt", action="append", default=[], help="prompt text (repeat for a batch)")
    p.add_argument("--prompts", type=Path, help="file with one prompt per line")
    p.add_argument("--max-new", type=int, default=32, help="tokens to generate per prompt (default 32)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8); 0 = greedy")
    p.add_argument("--top-k", type=int, default=40, help="sample among the k most likely tokens (default 40; 0 = all)")
    p.add_argument("--repetition-penalty", type=float, default=1.1, help="sampling: divide the logits of the "
                   "last 64 generated tokens by this (default 1.1; 1 = off; greedy never applies it)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed: the same seed gives the same text at any layout")
    p.add_argument("--nproc", type=int, default=None, help="ranks (default: the product of the degrees)")
    p.add_argument("--json", action="store_true", help="one JSON object per prompt on stdout: prompt, tokens, text")
    p.add_argument("--max-mem", type=int, default=None, metavar="BYTES", help="refuse a KV cache larger than this")
    p.add_argument("--no-cache", action="store_true", help="recompute the whole sequence every step (for comparison)")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    return p


def resolve(args) -> dict:
    """Check everything a rank would trip on; return the plan. Raises BadInput."""
    from shardlab.generate import load
    from shardlab.generate.engine import Layout, kv_cache_bytes

    layout = {"tp": 1, "pp": 1, "dp": 1, "lanes": 0}
    for item in args.overrides:
        key, eq, value = item.partition("=")
        if not eq or key not in KEYS:
            raise BadInput(f"unknown setting {item!r}; generate takes {', '.join(KEYS)} (as key=value)")
        try:
            layout[KEYS[key]] = int(value)
        except ValueError:
            raise BadInput(f"{key}={value!r}: expected a whole number") from None
        if layout[KEYS[key]] < (0 if key == "parallel.pp_microbatches" else 1):
            raise BadInput(f"{key}={value}: must be at least 1")
    if args.max_new < 1:
        raise BadInput(f"--max-new {args.max_new}: must be at least 1")
    if args.temperature < 0 or args.top_k < 0:
        raise BadInput("--temperature and --top-k must not be negative")
    if args.repetition_penalty < 1:
        raise BadInput(f"--repetition-penalty {args.repetition_penalty}: must be at least 1 (1 = off)")
    texts = list(args.prompt)
    if args.prompts is not None:
        try:
            texts += [line for line in args.prompts.read_text(encoding="utf-8").splitlines() if line]
        except (OSError, UnicodeDecodeError) as e:
            raise BadInput(f"--prompts {args.prompts}: cannot read it ({type(e).__name__}); give a UTF-8 text "
                           "file, one prompt per line") from None
    if not texts:
        raise BadInput("no prompt: give --prompt TEXT or --prompts FILE")
    if any(not t for t in texts):
        raise BadInput("an empty prompt: every prompt needs at least one character")
    try:
        cfg = load.model_config(args.path)
    except load.LoadError as e:
        raise BadInput(str(e)) from None
    tok = tokenizer_of(args.path, cfg.vocab_size)
    prompts = [[int(x) for x in tok.encode(t)] for t in texts]
    for t, p in zip(texts, prompts):
        if not p:
            raise BadInput(f"prompt {t[:20]!r} encodes to no tokens with the model's tokenizer ({tok.spec})")
        if len(p) + args.max_new > cfg.max_seq_len:
            what = "is longer than" if len(p) > cfg.max_seq_len else "plus --max-new exceeds"
            raise BadInput(f"prompt {t[:20]!r}... has {len(p)} tokens; that {what} the model's max_seq_len "
                           f"{cfg.max_seq_len}; shorten it or lower --max-new")
    lay = Layout(tp=layout["tp"], pp=layout["pp"], dp=layout["dp"])
    from shardlab.parallel.tp.own import check_divisible
    try:  # GPT-2: heads and d_model; llama also its key/value heads and SwiGLU width (tp.py's rule)
        check_divisible(cfg.n_head, cfg.d_model, lay.tp, getattr(cfg, "n_kv_heads", None),
                        getattr(cfg, "ffn_hidden", None))
    except ValueError as e:
        raise BadInput(f"{e} (the model's dimensions)") from None
    if lay.pp > cfg.n_layer:
        raise BadInput(f"parallel.pp={lay.pp} exceeds the model's {cfg.n_layer} layers")
    world = args.nproc if args.nproc is not None else lay.world
    if world != lay.world:
        raise BadInput(f"--nproc {world} but tp={lay.tp} x pp={lay.pp} x dp_replicate={lay.dp} = {lay.world}; "
                       "their product must equal the number of ranks")
    kv = kv_cache_bytes(cfg, lay, prompts, args.max_new)
    if args.max_mem is not None and kv > args.max_mem:
        raise BadInput(f"the KV cache needs {kv:,} bytes per rank (2 x layers x batch x length x d_model x 4), "
                       f"more than --max-mem {args.max_mem:,}; use fewer or shorter prompts, a lower --max-new, "
                       "or more tp / pp / dp ranks")
    return {"cfg": cfg, "texts": texts, "prompts": prompts, "layout": lay, "lanes": layout["lanes"],
            "world": world, "kv": kv, "tokenizer": tok}


def tokenizer_of(path: str, vocab_size: int):
    """The tokenizer the model was trained with: an HF export's files, the checkpoint's tokenizer/, its run's,
    or bytes (checkpoints written before tokenizers travelled with them)."""
    from shardlab.data import DataError, tokenizer as tk
    from shardlab.generate import load

    p = Path(path)
    if load.is_hf_dir(p):
        where = [p] if (p / tk.HF_FILE).is_file() else []
    else:
        step = load.step_dir(p)
        where = [d for d in (step / "tokenizer", step.parent.parent / "tokenizer") if d.is_dir()]
    try:
        tok = tk.load(where[0]) if where else tk.BYTES
    except DataError as e:
        raise BadInput(str(e)) from None
    if tok.vocab_size > vocab_size:
        raise BadInput(f"{path}: its tokenizer ({tok.spec}) has {tok.vocab_size} tokens, more than the model's "
                       f"vocabulary {vocab_size}; the checkpoint and its tokenizer do not belong together")
    return tok


class Stream:
    """Text of a growing list of ids, given out as it becomes final: decoding all ids each time (a token may
    complete a character that earlier ones began), holding back a trailing U+FFFD (an unfinished one)."""

    def __init__(self, tok):
        self.tok, self.ids, self.out = tok, [], ""

    def add(self, token: int) -> str:
        self.ids.append(token)
        return self._new(self.tok.decode(self.ids).rstrip("\ufffd"))

    def close(self) -> str:
        return self._new(self.tok.decode(self.ids))

    def _new(self, text: str) -> str:
        if not text.startswith(self.out):  # a later token rewrote earlier text (rare): print what is new
            self.out = text[:len(self.out)]
        new, self.out = text[len(self.out):], text
        return new


def main(argv: list[str]) -> int:
    from shardlab.launch import launcher as launch
    from shardlab.errors import fail

    if launch.under_torchrun() and ARGV_ENV in os.environ:  # a rank of the re-execution below
        argv = json.loads(os.environ[ARGV_ENV])
    if not argv:
        return fail("missing RUN_OR_CHECKPOINT: the run, checkpoint or HF export to generate from "
                    "(see shardlab generate --help)")
    try:
        args = parser().parse_intermixed_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    try:
        plan = resolve(args)
    except BadInput as e:
        return fail(str(e))
    if plan["world"] > 1 and not launch.under_torchrun():
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={plan['world']}",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{launch.free_port()}", "--nnodes=1",
               "-m", "shardlab", "generate"]
        # The user's arguments reach the ranks through the environment, not torchrun's command line:
        # torchrun parses every argument that looks like one of its options, even after the module name,
        # and takes abbreviations (`--nproc` is ambiguous between --nproc-per-node and --nproc_per_node).
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONUNBUFFERED="1",
                   **{ARGV_ENV: json.dumps(argv)})
        return subprocess.call(cmd, env=env)
    return run(args, plan)


def run(args, plan: dict) -> int:
    import torch

    from shardlab import comm
    from shardlab.generate.engine import Options, generate
    from shardlab.generate.load import load_model

    if plan["world"] > 1:
        comm.init()
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    me = comm.rank()
    lay, texts = plan["layout"], plan["texts"]

    def say(msg: str) -> None:
        if me == 0:
            print(f"[generate] {msg}", file=sys.stderr, flush=True)

    say(f"KV cache: {plan['kv']:,} bytes per rank (2 x layers x batch x length x d_model x 4 B), allocating")
    opts = Options(max_new=args.max_new, temperature=args.temperature, top_k=args.top_k, seed=args.seed,
                   repetition_penalty=args.repetition_penalty,
                   use_cache=not args.no_cache, lanes=plan["lanes"])
    # one rank: the whole model, as it always was; more: each rank builds its part on the meta device and
    # reads only that part's bytes (generate/shard_load.py), never the whole model
    model = load_model(args.path) if plan["world"] == 1 else args.path
    streaming = me == 0 and not args.json
    detok = plan["tokenizer"].decode
    stream = Stream(plan["tokenizer"])
    if streaming:
        sys.stdout.write(texts[0])
        sys.stdout.flush()

    def on_token(index: int, token: int) -> None:
        if streaming and index == 0:
            sys.stdout.write(stream.add(token))
            sys.stdout.flush()

    tokens, stats = generate(model, plan["prompts"], opts, lay, on_token)
    if me == 0:
        if args.json:
            for text, ids in zip(texts, tokens.tolist()):
                print(json.dumps({"prompt": text, "tokens": ids, "text": detok(ids)}))
        else:
            sys.stdout.write(stream.close() + "\n")
            for i, (text, ids) in enumerate(zip(texts, tokens.tolist())):
                if i:
                    print(f"--- prompt {i + 1} ---\n{text}{detok(ids)}")
        sys.stdout.flush()
        per_tok = {op: b / max(1, stats.local_tokens) for op, b in stats.comm_bytes.items()}
        say(f"time to first token {stats.ttft_s * 1e3:.1f} ms, per-token latency {stats.per_token_s * 1e3:.2f} ms, "
            f"{stats.tokens_per_s:.1f} tokens/s ({stats.tokens} tokens in {stats.wall_s:.2f} s, "
            f"tp={lay.tp} pp={lay.pp} dp={lay.dp}, {'no ' if args.no_cache else ''}KV cache)")
        if per_tok:
            say("rank 0 comm bytes per generated token: " + ", ".join(f"{op} {v:,.0f}" for op, v in per_tok.items()))
    if plan["world"] > 1:
        comm.shutdown()
    return 0
