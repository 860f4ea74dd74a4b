"""What is being planned, the recipe side: the training recipe a layout runs (batch, sequence, precision, optimizer,
float8, and the other stacks' inputs a published run needs), as plan/layout.py's Layout is the parallel side."""
from __future__ import annotations

from dataclasses import dataclass

from shardlab.fp8.recipes import NAMES as FP8_RECIPES
from shardlab.optim import registry as optimizers

# Megatron-Core's CUDA-graph scopes the planner counts (transformer_layer.py): the attention (input norm through its
# residual add), the router (pre-MLP norm and router), the dispatcher's preprocess (token counts, permutation)
GRAPH_SCOPES = ("attn", "moe_router", "moe_preprocess")

# *-mixed: Megatron's (16-bit weights and gradients, an fp32 master copy in the optimizer); *-autocast:
# torch.autocast, what `shardlab train` does with train.dtype=bf16|fp16 (fp32 weights, gradients and Adam
# state; matrix products and the activations they save in 16 bits)
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "bf16-autocast", "fp16-autocast")
OPTIMIZERS = tuple(optimizers.planned())  # the registry's rows, by the planner's names: adam, sgd

# Passes over the fp32 gradients and master weights a stack runs around its fused update, per parameter per step:
# (bytes, over one flat buffer). Megatron-LM's bf16 path at the Korthikanti et al. runs (55ba1f7b96, 2022-05): bf16
# forces fp32 accumulation in local DDP's contiguous buffer (arguments.py), which train_step zeroes every step
# (zero_grad_buffer: 4 B written) and allreduce_gradients divides by the data-parallel size in place before its
# all-reduce, at any size (`buffer_.data /= world`: 4 B read, 4 written); Float16OptimizerWithFloat16Params.step clips
# (--clip-grad 1.0: multi_tensor_l2norm reads every fp32 gradient, 4 B; the scale pass only when the norm exceeds
# the limit, not counted) and after apex's FusedAdam copies the fp32 master into the 16-bit params with
# multi_tensor_scale (_copy_main_params_to_model_params: the master read again, 4 B; the 16-bit write is in `per`)
# torch's gradient clipping (clip_grad_norm_: torch.nn.utils' foreach one, FSDP1's method) reads every gradient
# for the norm ("grad_norm") and then multiplies every gradient by the clamped coefficient whatever the norm, to
# spare a host sync (`_clip_grads_with_norm_`: torch._foreach_mul_; FullyShardedDataParallel.clip_grad_norm_:
# grad.mul_, "avoids the host-device sync that would result from `if clip_coef < 1`"): 4 B read and 4 written,
# "clip_scale". torchtitan clips every step (training.max_norm 1.0; train.py at 395a52627, 9dec370, 820504e), as
# llm-foundry's MPT yamls do through Composer's gradient_clipping (clipping_type norm, threshold 1.0)
OPTIMIZER_PASSES = {"zero_grads": (4, True), "grad_divide": (8, True), "grad_norm": (4, False),
                    "master_copy": (4, False), "clip_scale": (8, False)}
CLIP_PASSES = ("grad_norm", "clip_scale")


@dataclass(frozen=True)
class TrainSpec:
    global_batch: int  # sequences per optimizer step
    micro_batch: int = 1  # sequences per forward/backward on one rank (b)
    seq: int | None = None  # defaults to the model's context length
    precision: str = "bf16-mixed"
    optimizer: str = "adam"
    optim_dtype: str = "fp32"  # train.optim_dtype: the optimizer states' bytes per element (optim/registry.py)
    fp32_grad_accum: bool = False  # mixed precision keeps fp32 gradients (Megatron main_grad)
    flash_attention: bool = False  # fused attention: no s x s scores stored
    fp8: str = "none"  # train.fp8: the block linears' float8 recipe (plan/fp8.py)
    # the fused attention in FP8 too (Transformer Engine's fp8_dot_product_attention), in the recipe's format: its
    # kernel at cuDNN's measured FP8 / BF16 ratio for the shape (plan/attention.py, MEASURED_FP8)
    fp8_attention: bool = False
    # the norm as Meta's reference RMSNorm runs it eagerly (torchtitan's default "rmsnorm": x.float(), pow, mean,
    # rsqrt, mul, type_as, * weight, each its own kernel) rather than one fused kernel; a published row's input
    eager_norm: bool = False
    # the model as the run built it, published rows' inputs like eager_norm: dropout probabilities above 0 (the
    # papers' setting, Korthikanti's masks; MPT's defaults are 0) and a fused cross-entropy on 16-bit logits
    # (llm-foundry's default loss_fn, flash-attn's xentropy) rather than F.cross_entropy's fp32 tensors
    dropout: bool = True
    fused_loss: bool = False
    # PaLM's z-loss (the squared log of the softmax's normaliser, OLMo's z_loss_multiplier) computed eagerly beside
    # the loss, `logits.logsumexp(-1).pow(2)` on the fp32 logits: its passes over every logit (ops.Z_LOSS_BYTES);
    # false where there is none or a fused cross-entropy kernel computes it in its own pass; a published row's input
    z_loss: bool = False
    # torch's loss_parallel (DTensor's vocab-parallel cross-entropy, torchtitan's loss under TP) rather than
    # shardlab's vocab-parallel loss: its backward holds 16 B per logit where shardlab's holds 8 (model.logits_bytes)
    dtensor_loss: bool = False
    # AdamW as the run stepped it: one eager kernel per tensor operation (torch's foreach AdamW, torchtitan's
    # default; Composer's DecoupledAdamW, a loop over tensors) rather than one fused kernel; a published row's input
    eager_adam: bool = False
    # train.compile: torch.compile (Inductor) on each block; on GPU presets its fusion changes the block's
    # elementwise bytes, kernel count and float8 casts (plan/fusion.py); false: eager, today's op list
    compile: bool = False
    # each micro batch's 16-bit gradients added into a separate fp32 accumulation buffer by their own kernel,
    # parameter by parameter (apex DistributedFusedAdam's greedy_grad_copy, NeMo's grad accumulation where the
    # wgrad GEMM does not accumulate itself); a published row's input
    grad_copy: bool = False
    # autograd's own accumulation: each micro batch's 16-bit gradient after the first added into param.grad by
    # AccumulateGrad (`grad += new`: 3e B per parameter), where the stack keeps no fp32 buffer of its own
    # (Megatron-LM 2021's fp16 defaults); a published row's input
    grad_accum_add: bool = False
    # passes over the fp32 gradients and master weights outside the fused update, each step, by name
    # (OPTIMIZER_PASSES: the name and its bytes), as the run's code makes them
    # (Megatron-LM's bf16 optimizer and local DDP); a published row's input
    optimizer_passes: tuple = ()
    # the recompute as torch's non-reentrant checkpoint runs it (early stop, default since torch 2.1, and under
    # compile the partitioner's dead-code elimination): it ends where the block's last saved tensor is packed,
    # before the block's last GEMM (plan/recompute.py `early_stop_recomputed`); a published row's input (torchtitan)
    recompute_early_stop: bool = False
    # whose llama module the run built: "own" (shardlab's model/llama.py) or "torchtitan" (its models/llama/model.py:
    # rope in complex fp32, repeat_kv's copies, no head-merge copy, the logits cast to fp32 before the loss;
    # plan/ops.py `titan_attention_kernels`); a published row's input, eager blocks only. "te": Transformer Engine's
    # modules (Megatron-Core's TE spec): what they save for backward (model.te_llama_activation_bytes_per_layer);
    # their kernels are planned as the own block's with fused norms; under fp8 their weights are cast once a step,
    # not each micro batch (plan/fp8.py weights_cast_per_step)
    llama_impl: str = "own"
    # the 16-bit param.grad tensors kept beside the fp32 accumulation buffer, not freed after each copy (DeepSpeed's
    # BF16_Optimizer under its PipelineEngine: clear_lp_grads() only at the next backward's start and
    # update_hp_grads(clear_lp_grads=False), runtime/bf16_optimizer.py and pipe/engine.py, 2022); a row's input
    lp_grads_kept: bool = False
    # DeepSpeed's BF16_Optimizer casts each micro batch's 16-bit gradient to fp32 before adding it into its buffer,
    # one parameter at a time (update_hp_grads: `lp.grad.data.to(hp_grad.dtype)`, a new tensor): the stage's largest
    # parameter's 4-byte copy is live right after a backward (memory only); a row's input
    hp_grad_cast: bool = False
    # the gradient all-reduce takes the optimizer's flat fp32 buffer as one bucket and casts it whole to the wire
    # dtype in a new tensor (DeepSpeed: BF16_Optimizer.get_grads_for_reduction returns its flat groups, and
    # engine.allreduce_bucket's flatten of one tensor is a view, `.to(communication_data_type)` a copy): wire bytes x
    # Psi after the backward (memory only; the calls' count stays the bucket size's); a row's input
    flat_grad_cast: bool = False
    # what a memory figure measures: "allocated" (the plan's peak of live tensors, the default), "reserved" (torch's
    # max_memory_reserved: the caching allocator's segments; nothing derivable is added) or "device" (nvidia-smi: the
    # whole process, with its CUDA context, `cuda_context_mib` as the row's source measured it); a row's input
    mem_measure: str = "allocated"
    # a LayerNorm after the word embedding (BLOOM's --embed-layernorm, Megatron-DeepSpeed's bigscience fork): its
    # saved input and statistics per micro batch in flight on the first stage (memory only); a row's input
    embed_norm: bool = False
    cuda_context_mib: float = 0.0
    # CUDA graphs the run replays (plan/host.py): "none" (eager: the host issues every kernel), "full" (the whole
    # iteration captured: no host time), or Megatron-Core's module scopes, comma-separated (attn, moe_router,
    # moe_preprocess: its cuda_graph_scope under cuda_graph_impl "transformer_engine"; TE blocks only)
    cuda_graphs: str = "none"
    # the routing's load on the busiest expert-parallel rank: max / mean token-slots a rank receives per MoE block
    # (1.0: balanced, as the published benchmarks force it). Under ep > 1 that rank's experts, the passes over their
    # rows, its all-to-all and its activations scale by it (ModelSpec.expert_view); explain takes a run's measured
    # figure (summary.json moe.load_imbalance_ep)
    moe_load: float = 1.0

    def check(self) -> None:
        one_of("precision", self.precision, PRECISIONS)
        one_of("optimizer", self.optimizer, OPTIMIZERS)
        one_of("mem_measure", self.mem_measure, ("allocated", "reserved", "device"))
        one_of("llama_impl", self.llama_impl, ("own", "torchtitan", "te"))
        one_of("fp8", self.fp8, ("none", *FP8_RECIPES))
        if self.fp8_attention and self.fp8 == "none":
            raise ValueError("fp8_attention runs the attention in the fp8 recipe's format: set fp8 to a recipe "
                             f"({', '.join(FP8_RECIPES)}) or leave fp8_attention off")
        for name in self.optimizer_passes:
            one_of("optimizer_passes", name, OPTIMIZER_PASSES)
        if self.global_batch <= 0 or self.micro_batch <= 0:
            raise ValueError("global_batch and micro_batch must be positive")
        if not self.moe_load >= 1.0:
            raise ValueError(f"moe_load is the busiest rank's tokens over the mean, at least 1.0; got {self.moe_load}")
        if self.cuda_graphs not in ("none", "full"):
            for name in self.graph_scopes:
                one_of("cuda_graphs", name, ("none", "full", *GRAPH_SCOPES))
            if self.llama_impl != "te":
                raise ValueError(f"cuda_graphs={self.cuda_graphs} names Megatron-Core's module scopes: they need its "
                                 "Transformer Engine layers (llama_impl=te); use none or full")
            if "moe_preprocess" in self.graph_scopes and "moe_router" not in self.graph_scopes:
                raise ValueError("cuda_graphs moe_preprocess needs moe_router (Megatron-Core captures the two "
                                 "together)")

    @property
    def graph_scopes(self) -> tuple[str, ...]:
        """cuda_graphs' module scopes (empty for none and full)."""
        if self.cuda_graphs in ("none", "full"):
            return ()
        return tuple(x.strip() for x in self.cuda_graphs.split(",") if x.strip())

    @property
    def mixed(self) -> bool:
        return self.precision != "fp32"

    @property
    def autocast(self) -> bool:
        return self.precision.endswith("-autocast")

    @property
    def param_bytes(self) -> int:  # the copy the forward pass reads
        return 2 if self.mixed and not self.autocast else 4

    @property
    def grad_bytes(self) -> int:
        return 4 if (not self.mixed or self.autocast or self.fp32_grad_accum) else 2

    @property
    def optimizer_bytes(self) -> int:
        """K in (2 + 2 + K)Psi: fp32 master copy (mixed only) + the optimizer's states (its registry row:
        Adam m, v; SGD momentum)."""
        states = self.optimizer_row.bytes_per_param_in(self.optim_dtype)
        return states + (4 if self.mixed and not self.autocast else 0)  # autocast: the weights are the master

    def optimizer_bytes_of(self, model, lay) -> float:
        """K for this model: the row's cost hook where it has one (Muon: one state on the blocks' matrices,
        AdamW's two on the rest), else `optimizer_bytes`."""
        cost = self.optimizer_row.plan_cost(model, self, lay)
        if cost is None:
            return self.optimizer_bytes
        return cost["state_bytes_per_param"] + (4 if self.mixed and not self.autocast else 0)

    @property
    def optimizer_row(self):
        """The optimizer's row in the registry (optim/registry.py)."""
        return optimizers.planned()[self.optimizer]

    @property
    def act_bytes_scale(self) -> float:
        """Korthikanti's counts assume 16-bit activations; fp32 doubles them (masks aside)."""
        return 2.0 if self.precision == "fp32" else 1.0


def one_of(key: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{key} must be one of {', '.join(allowed)}; got {value!r}")
