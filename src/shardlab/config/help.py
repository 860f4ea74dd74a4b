"""What `shardlab train --help-keys` says about each config key: one line of help and the allowed values.

One entry per key of `shardlab.config`; tests/config/test_config.py fails for a key without one, and checks that the
listed choices are exactly the ones validation accepts.
"""
from __future__ import annotations

from shardlab.config import schema as config
from shardlab import precision
from shardlab.optim import registry as optim_registry
from shardlab.parallel import layers

# key -> (what it does, allowed values); each layer's keys are declared in its spec (parallel/layers.py)
KEY_HELP: dict[str, tuple[str, str]] = {
    "model.preset": ("model size: tiny (2 layers, d 64: tests), small (4 layers, d 256, ~3.3M params), "
                     "gpt2 (GPT-2 small, 124M); llama-tiny, llama-small (byte vocabulary, CPU sizes), llama3-8b, "
                     "llama3-70b, llama3-405b (Meta's shapes: the planner, meta-device counts); custom = give "
                     "n_layer, n_head, d_model (docs/models.md)",
                     "tiny | small | gpt2 | llama-tiny | llama-small | llama3-8b | llama3-70b | llama3-405b | custom"),
    "model.arch": ("model family: GPT-2 (LayerNorm, learned positions, GELU, tied head) or Llama (RMSNorm, "
                   "rotary positions, SwiGLU, grouped-query attention, untied head); a llama-* preset sets llama",
                   "gpt2 | llama"),
    "model.n_layer": ("transformer blocks; 0 = the preset's", "0 | int >= 1"),
    "model.n_head": ("attention heads (must divide d_model); 0 = the preset's", "0 | int >= 1"),
    "model.d_model": ("embedding width; 0 = the preset's", "0 | int >= 1"),
    "model.vocab_size": ("vocabulary size (byte-level data needs 256); 0 = the preset's", "0 | int >= 256"),
    "model.max_seq_len": ("learned positions; 0 = train.seq_len", "0 | int >= train.seq_len"),
    "model.dropout": ("dropout probability (gpt2 only: llama trains without)", "0.0 <= float < 1"),
    "model.n_kv_heads": ("llama: key/value heads of grouped-query attention (n_head = multi-head, 1 = "
                         "multi-query); must divide n_head; 0 = the preset's", "0 | int dividing n_head"),
    "model.rope_theta": ("llama: base of the rotary position frequencies; 0 = the preset's "
                         "(10000 for llama-tiny/small, 500000 for llama3-*)", "0 | float > 0"),
    "model.ffn_multiple_of": ("llama: the SwiGLU width is rounded up to a multiple of this; 0 = the preset's",
                              "0 | int >= 1"),
    "model.ffn_dim_multiplier": ("llama: scales the SwiGLU width 2/3 x 4 d_model before rounding "
                                 "(Llama 3: 1.3 for 8B/70B, 1.2 for 405B); 0 = the preset's", "0 | float > 0"),
    "model.intermediate_size": ("llama: the SwiGLU hidden width as given (an imported model's); 0 = Llama 3's "
                                "rule from ffn_multiple_of and ffn_dim_multiplier", "0 | int >= 1"),
    "model.rope_scaling": ("llama: none = plain rotary frequencies; llama3 = Llama 3.1's long-context "
                           "scaling (model.rope_factor, ...; docs/models.md)", "none | llama3"),
    "model.rope_factor": ("llama3 rope scaling: long wavelengths are divided by this; 0 = 8 (Llama 3.1)",
                          "0 | float > 0"),
    "model.rope_low_freq_factor": ("llama3 rope scaling: wavelengths fitting fewer times than this into the "
                                   "original context are divided by rope_factor; 0 = 1", "0 | float > 0"),
    "model.rope_high_freq_factor": ("llama3 rope scaling: wavelengths fitting more times than this are kept, "
                                    "those between are blended; 0 = 4", "0 | float > rope_low_freq_factor"),
    "model.rope_original_max_seq": ("llama3 rope scaling: the context the model was pre-trained at; 0 = 8192",
                                    "0 | int >= 1"),
    "model.norm_eps": ("epsilon of every LayerNorm (gpt2) or RMSNorm (llama); 0 = 1e-5", "0 | float > 0"),
    "model.tie_embeddings": ("the output head's weight is the token embedding's: auto = the family's (gpt2 "
                             "tied, llama untied); an imported model sets it", "auto | true | false"),
    "model.moe_experts": ("mixture of experts: routed copies of the MLP in every moe_every-th block "
                          "(docs/moe.md); 0 = a dense model", "0 | int >= 1 (a multiple of parallel.ep)"),
    "model.moe_top_k": ("experts each token is routed to; their router probabilities, renormalised when > 1, "
                        "weight their outputs", "1 <= int <= model.moe_experts"),
    "model.moe_every": ("which blocks' MLPs are MoE layers: blocks moe_every-1, 2 x moe_every-1, ... "
                        "(1 = all)", "int >= 1"),
    "model.moe_capacity": ("capacity factor: each expert takes ceil(factor x seq_len x top_k / experts) "
                           "token-slots per sequence, the rest are dropped (the residual carries them); "
                           "0 = dropless", "float >= 0"),
    "model.moe_aux_weight": ("weight of the load-balancing loss (Switch: experts x sum of routed share x mean "
                             "probability, per sequence)", "float >= 0"),
    "model.moe_z_weight": ("weight of the router z-loss (ST-MoE: mean squared logsumexp of the router "
                           "logits)", "float >= 0"),
    "model.moe_bias_update": ("auxiliary-loss-free balancing (DeepSeek-V3): a per-expert bias on the router "
                              "probabilities for the top-k choice only, moved by this much per step against the "
                              "step's load (summed over data ranks); 0 = off (docs/moe.md)", "float >= 0"),
    "model.moe_router_lr_scale": ("the routers' learning rate as a multiple of the schedule's (own optimizer "
                                  "group, no weight decay); < 1 keeps Adam's per-step move on the router small, "
                                  "so loads swing less from step to step (docs/moe.md)", "float > 0"),
    "data.source": ("training text: the Python standard library's source, a text file (or every text file "
                    "under a folder), a nanoGPT-style uint16 token file, or a directory `shardlab data prepare` "
                    "wrote (docs/data.md)", "stdlib | text:PATH | bin:PATH | tokens:DIR"),
    "data.tokenizer": ("how text becomes tokens: UTF-8 bytes (vocabulary 256), a byte-level BPE of vocabulary N "
                       "trained here on the source, a Hugging Face tokenizer.json (or a directory with one), or a "
                       "tiktoken ranks file; model.vocab_size follows it; a tokens: source carries its own",
                       "bytes | bpe:N | PATH | tiktoken:FILE"),
    "data.val_fraction": ("share of the tokens held out for validation", "0 < float < 0.5"),
    "data.uneven": ("when one rank runs out of data first: stop with an error, or let it shadow the "
                    "collectives with zero-weight steps", "error | join"),
    "data.shares": ("each data-parallel rank's share of the global batch: equal, fixed weights per rank "
                    "(e.g. 1,3), or auto (measured compute speed, docs/balance.md)", "equal | auto | w0,w1,..."),
    "data.shares_window": ("data.shares=auto: steps per measurement of each rank's compute per sample",
                           "int >= 1"),
    "data.shares_drift": ("data.shares=auto: re-set the shares when a new measurement moves a rank's share by "
                          "more than this fraction of the global batch", "0 <= float < 1"),
    "data.shares_resume": ("data.shares=auto on resume: keep the checkpoint's shares or measure again",
                           "keep | measure"),
    "data.doc_mask": ("packed documents: each token attends only to earlier tokens of its own document (documents "
                      "end with the tokenizer's EOS id; bytes: 0) and positions restart at every document, under "
                      "every layout (docs/data.md)", "bool"),
    "train.steps": ("optimizer steps in total (the cosine schedule ends here)", "int >= 1"),
    "train.micro_batch": ("sequences per forward/backward on one rank", "int >= 1"),
    "train.grad_accum": ("microbatches per optimizer step (derived when train.global_batch is set)", "int >= 1"),
    "train.global_batch": ("sequences per optimizer step over all ranks; 0 = micro_batch x grad_accum x world. "
                           "Set it to keep the same batch at any world size", "0 | multiple of micro_batch x world"),
    "train.seq_len": ("tokens per sequence", "int >= 1"),
    "train.seed": ("seeds the model init and the sample order", "int"),
    "train.lr": ("peak learning rate (AdamW)", "min_lr <= float < 1"),
    "train.min_lr": ("learning rate at the end of the cosine decay", "0 <= float <= lr"),
    "train.warmup_steps": ("linear warm-up steps", "int >= 0"),
    "train.weight_decay": ("AdamW weight decay (not on 1-D parameters)", "float >= 0"),
    "train.beta1": ("AdamW beta1", "0 <= float < 1"),
    "train.beta2": ("AdamW beta2", "0 <= float < 1"),
    "train.grad_clip": ("global gradient-norm clip; 0 = no clipping (the norm is still measured)", "float >= 0"),
    "train.dtype": ("compute precision: fp32, bf16 autocast, or fp16 autocast with loss scaling "
                    "(fp16 is very slow on CPU: use bf16 there)", " | ".join(precision.NAMES)),
    "train.eval_every": ("validation loss every N steps (and at step 0, and at the end); 0 = never", "int >= 0"),
    "train.eval_seqs": ("validation sequences per evaluation, the same set at any world size", "int >= 1"),
    "train.log_every": ("a metrics line every N steps (skips and rollbacks are always logged)", "int >= 1"),
    "train.tracker": ("experiment trackers beside metrics.jsonl, fed the same numbers and the resolved config, on "
                      "rank 0, files under the run directory only (no network): tensorboard (tb/), mlflow "
                      "(mlflow.db, local SQLite store), wandb (wandb/, offline mode); several comma-separated, "
                      "e.g. tensorboard,mlflow; pip install 'shardlab[track]'; docs/training.md",
                      "none | tensorboard | mlflow | wandb[,...]"),
    "train.threads": ("torch threads per rank (one per rank on CPU keeps ranks off each other's cores)", "int >= 1"),
    "train.retain_host_memory": ("CPU runs: glibc keeps the memory it frees instead of returning it, so a step's "
                                 "activations are not page-faulted in afresh every step (a few percent of a step); "
                                 "the resident set stays at its peak; skipped when a MALLOC_*_ variable is set; "
                                 "docs/training.md", "bool"),
    "parallel.layout": ("manual = the layout keys as given; auto = the planner picks the fastest layout shardlab "
                        "runs at this world that fits parallel.mem_budget_gb (dp layer, tp, pp and its schedule), "
                        "prints the choice, the runner-up and why, and writes it into those keys; docs/explain.md",
                        "manual | auto"),
    "parallel.mem_budget_gb": ("parallel.layout=auto: memory per rank a layout must fit (GB); 0 = the GPU's "
                               "memory, on CPU the machine's available memory divided by the ranks", "float >= 0"),
    "parallel.backend": ("collective backend; auto = nccl with CUDA, else gloo", "auto | gloo | nccl"),
    "parallel.sync": ("how data-parallel replicas stay together: every_step (gradients all-reduced each step), "
                      "local_sgd (each replica steps alone, parameters averaged every parallel.sync_every steps), "
                      "diloco (the averaged pseudo-gradient start - end applied by an outer Nesterov SGD) or async "
                      "(rank 0 a parameter server, the other ranks workers pushing gradients and pulling parameters "
                      "without waiting for each other); docs/sync.md; ddp or single, or for local_sgd/diloco "
                      "zero1/2/3 with parallel.dp_replicate > 1 (HSDP: synced across replicas, sharded within)",
                      "every_step | local_sgd | diloco | async"),
    "parallel.sync_every": ("H: inner optimizer steps between two synchronisations (local_sgd, diloco)", "int >= 1"),
    "parallel.outer_lr": ("DiLoCo's outer learning rate on the averaged pseudo-gradient (1 with no momentum = "
                          "local SGD)", "float > 0"),
    "parallel.outer_momentum": ("DiLoCo's outer Nesterov momentum (0 = plain outer SGD)", "float in [0, 1)"),
    "parallel.max_staleness": ("async: τ, the bound on a gradient's staleness (server version when applied - "
                               "version it was computed on); a worker's pull waits until it holds (0: the workers "
                               "take turns)", "int >= 0"),
    "parallel.outer_dtype": ("precision DiLoCo averages the pseudo-gradient in (bf16/fp16 halve its bytes)",
                             " | ".join(precision.OUTER_NAMES)),
    "parallel.fault_tolerant": ("replicas that may die and rejoin: each replica is its own `shardlab train`; "
                                "every_step: any layout inside, gradients averaged over each step's quorum "
                                "(docs/fault_tolerance.md); diloco/local_sgd: `--nproc 1`, the outer step through "
                                "the store at parallel.ft_store (docs/sync.md)", "true | false"),
    "parallel.replicas": ("R: the fault-tolerant job's replicas (its data is split R ways)", "int >= 1"),
    "parallel.replica_id": ("this process's replica in a fault-tolerant job", "0 .. parallel.replicas - 1"),
    "parallel.ft_store": ("HOST:PORT of the TCPStore the replicas meet at (`shardlab lighthouse --port P` hosts one)",
                          "HOST:PORT"),
    "parallel.ft_timeout": ("the bound on a quorum or a cross-replica collective: seconds a quorum waits for a "
                            "replica (every_step: also the gloo timeout of the quorum's all-reduce; DiLoCo: its "
                            "pseudo-gradient) before the step goes on without it", "float > 0"),
    "parallel.ft_join_timeout": ("seconds a starting replica waits for the others (founding) or for a peer's "
                                 "state (joining); also the longest the replicas train on with their last quorum "
                                 "while the lighthouse cannot be reached", "float > 0"),
    "parallel.ft_job": ("the fault-tolerant job's name: its keys in the lighthouse's store are namespaced by it "
                        "(several jobs may share one lighthouse)", "a name without /"),
    "parallel.ft_job_dir": ("every_step fault tolerance: a directory every replica reaches: the job's quorum log, "
                            "the replicas' run directories and its epoch, so a stopped job resumes at the newest "
                            "step every replica committed; \"\" = none", "\"\" | path"),
    "parallel.fragments": ("F: streaming DiLoCo (and local SGD): the parameters cut into F contiguous groups of "
                           "blocks, fragment f synced H/F*f steps after fragment 0, so no burst sends the whole "
                           "model (docs/sync.md)", "int in [1, parallel.sync_every]"),
    "ckpt.every": ("save a checkpoint every N steps; 0 = only the final one (ckpt.final)", "int >= 0"),
    "ckpt.final": ("save a checkpoint at the end of the run", "true | false"),
    "ckpt.keep": ("keep the last N checkpoints; 0 = keep all", "int >= 0"),
    "ckpt.keep_every": ("also keep every checkpoint whose step is a multiple of N; 0 = off", "int >= 0"),
    "ckpt.async": ("save in a background thread while training continues", "true | false"),
    "ckpt.resume": ("resume from the run's latest checkpoint, or a run / checkpoint path; none: from step 0 "
                    "on purpose (see also `shardlab resume RUN`)", "\"\" | none | latest | PATH"),
    "ckpt.init_from": ("start from this checkpoint's model weights (a run, checkpoints/ dir or step dir, e.g. "
                       "what `shardlab ckpt import --hf` wrote): the model's dimensions are taken from it, the "
                       "optimizer is fresh, the run starts at step 0, under any layout; the run's own "
                       "checkpoints win when it resumes", "\"\" | PATH"),
    "ckpt.format": ("what a save writes: dcp (the full resumable state) or hf (the model alone as Hugging Face "
                    "safetensors + config.json + tokenizer in RUN/hf/step_NNNNNN, loadable by transformers; not "
                    "resumable) (docs/checkpoint.md)", "dcp | hf"),
    "ckpt.on_signal": ("on SIGINT/SIGTERM every rank stops at the next step boundary and saves a checkpoint, "
                       "then the job exits 130/143 (docs/training.md, \"When a run is interrupted\")",
                       "true | false"),
    "ckpt.signal_grace_s": ("seconds from SIGINT/SIGTERM to the exit at most: a save that would take longer is "
                            "cut, `latest` untouched; keep it under the scheduler's grace (Slurm KillWait, "
                            "Kubernetes terminationGracePeriodSeconds); 0 = no limit", "float >= 0"),
    "trace.enabled": ("record per-rank compute and communication spans into RUN/trace/", "true | false"),
    "trace.profile": ("torch.profiler over training steps A..B: RUN/profile/rank{R}_top.txt (top kernels by self "
                      "device time) and a Chrome trace", "A-B, e.g. 10-12; empty = off"),
    "doctor.spike_factor": ("loss spike alarm: loss > factor x running median; 0 = off", "0 | float > 1"),
    "doctor.on_anomaly": ("on a NaN/Inf or spike: stop the run, skip the step everywhere, or roll back to "
                          "the latest checkpoint (needs ckpt.every)", "stop | skip | rollback"),
    "doctor.checksum_every": ("compare replica checksums every N steps; 0 = only at the end", "int >= 0"),
    "doctor.hang_timeout_s": ("hang watchdog: dump flight records and exit after this long without "
                              "progress; 0 = off", "float >= 0"),
    "doctor.verify_collectives": ("debug: check every own collective's op and size across ranks first",
                                  "true | false"),
    "debug.inject_nan": ("debug: make MODULE's output NaN on RANK at STEP (0-based), e.g. 7:1:blocks.2.mlp",
                         "\"\" | STEP:RANK:MODULE"),
    "debug.hang_rank": ("debug: rank R hangs at the start of step STEP (the watchdog fires), e.g. 1@5", "\"\" | R@STEP"),
    "debug.mismatch_rank": ("debug: rank R sends a wrongly sized collective at step STEP", "\"\" | R@STEP"),
    "debug.corrupt_expert": ("debug: under parallel.ep, debug.corrupt_rank perturbs an expert parameter (its copies within the edp group diverge) instead of a dense one", "true | false"),
    "debug.corrupt_rank": ("debug: rank R flips a parameter after step STEP (replicas diverge; under DiLoCo its θ_start)", "\"\" | R@STEP"),
    "debug.uneven_rank": ("debug: rank R has no data from step STEP on (uneven inputs)", "\"\" | R@STEP"),
    "debug.slow_rank": ("debug: this rank sleeps debug.slow_ms at each step (a straggler); -1 = none",
                        "-1 | rank"),
    "debug.slow_ms": ("debug: the straggler's delay per step (ms)", "float >= 0"),
    "debug.slow_factor": ("debug: the straggler's compute is this many times slower (it sleeps in proportion "
                          "to its measured compute); 1 = off", "float >= 1"),
    "debug.ft_absent": ("debug: fault-tolerant replica R sits out the quorums of steps A..B and is healed at B+1 "
                        "(give it to every replica: a failure drill's reference run)", "\"\" | R@A-B"),
}
KEY_HELP.update(layers.key_help())  # the keys of every layer: its spec declares them with their help
KEY_HELP.update(optim_registry.KEYS)  # the optimizers' and the schedule's keys: optim/registry.py declares them

HELP_NOTES = """\
Notes:
  0 means "derive it": model.n_layer/n_head/d_model/vocab_size = 0 take the preset's value; train.global_batch = 0
  is micro_batch x data-parallel size x grad_accum; parallel.dp_replicate / dp_shard = 0 follow the data-parallel
  layer. The mesh degrees (pp, dp_replicate, dp_shard, cp, tp) multiply to the world size; one may be -1 (fill it).
  debug.* keys inject faults on purpose (for the doctor and its tests): STEP is the 0-based step index, RANK/R a
  global rank, MODULE a module name as in model.named_modules() (e.g. blocks.0.attn, blocks.2.mlp)."""



def help_text() -> str:
    """`shardlab train --help-keys`: every key with its default, allowed values and one line of help."""
    defaults = config.Config()
    lines = []
    for key in config.all_keys():
        text, allowed = KEY_HELP[key]
        default = config.get_key(defaults, key)
        shown = '""' if default == "" else str(default).lower() if isinstance(default, bool) else repr(default)
        lines.append(f"{key} = {shown}   [{allowed}]")
        lines.append(f"    {text}")
    return "\n".join(lines) + "\n\n" + HELP_NOTES
