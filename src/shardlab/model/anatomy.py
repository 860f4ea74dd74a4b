"""The models' anatomy: where each part of GPT-2 and Llama lives and what role it plays, as data.

Everything that works on a model from outside (tensor parallelism's own layers and its DTensor plan, the
pipeline's stage cut, context parallelism's attention seam, the Hugging Face import and export, the doctor,
the observers, the planner) reads the module names here instead of spelling them, so a model whose modules
are called otherwise needs one new `Anatomy` row and nothing else.

A model is:
- an embedding (`embedding`, token ids -> d_model), optionally a position table (`positions`, GPT-2's);
- `blocks`, a ModuleDict keyed "0".."n-1" (the keys are the block's index in the whole model, so a
  pipeline stage keeps the names of the blocks it holds);
- per block, two norms, an attention module (`attention`) whose core is the replaceable attribute
  `attend` (the attention seam: context parallelism swaps it), and an MLP (`mlp`), or on MoE blocks a
  routed mixture (`router` plus `experts`, each expert a copy of the MLP);
- a final norm and the head; the head's weight is the embedding's when the config ties them.

Linear layers carry a role (Megatron's split): `column` (its output features split: whole heads, MLP
hidden units), `row` (its input features split; the output summed), `kv` (column-parallel key/value
heads, which grouped-query attention may replicate instead), and `expert` (inside an MoE: never split by
tensor parallelism, spread whole over expert-parallel ranks).

Stages may be cut between any two blocks: the first stage holds the embedding (and positions), the last
the final norm and the head, and with a tied head the embedding as well (only for its weight).

Pure data and attribute lookups: no torch import, so the planner and config validation read it cheaply.
"""
from __future__ import annotations

from dataclasses import dataclass, field

COLUMN, ROW, KV, EXPERT = "column", "row", "kv", "expert"


@dataclass(frozen=True)
class Anatomy:
    arch: str
    embedding: str = "wte"
    positions: str | None = "wpe"
    embed_dropout: str | None = "drop"  # the dropout after the embedding (on the model)
    blocks: str = "blocks"
    final_norm: str = "ln_f"
    head: str = "lm_head"
    # per block
    norms: tuple[str, ...] = ("ln_1", "ln_2")
    norm_kind: str = "layernorm"  # layernorm (weight, bias) | rmsnorm (weight)
    residual_dropout: str | None = "drop"
    attention: str = "attn"
    attend: str = "attend"  # the attention core: an attribute of the attention module (the seam)
    rotary_positions: str | None = None  # rotary models: the attention's positions seam (None: from the cache / 0..t-1)
    mlp: str = "mlp"
    # (name inside the attention / the MLP, role); in forward order
    attention_linears: tuple[tuple[str, str], ...] = (("q", COLUMN), ("k", KV), ("v", KV), ("proj", ROW))
    mlp_linears: tuple[tuple[str, str], ...] = (("fc", COLUMN), ("proj", ROW))
    router: str = "router"  # an MoE block's MLP: its router and its experts (a ModuleList of MLPs)
    experts: str = "experts"
    # the model's names in Hugging Face's export of this family: top-level {ours: theirs} and, per block,
    # {ours under blocks.N: theirs under hf_block_prefix.N}
    hf_top: dict = field(default_factory=dict)
    hf_block_prefix: str = ""
    hf_block: dict = field(default_factory=dict)
    hf_prefix: str = ""  # a prefix the export writes and an import may find absent (GPT2Model without its head)
    bias: bool = True  # the linears and norms have biases
    hf_transposed: bool = False  # the export stores linear weights (in, out) (GPT-2's Conv1D)
    hf_buffers: tuple[str, ...] = ()  # suffixes of buffers HF saved beside the weights (recomputed: skipped)
    # fused name -> its parts, concatenated in order along dim 0 (GPT-2's HF c_attn is q, k, v; shardlab
    # checkpoints written before q, k, v were split hold the same rows under attn.qkv)
    fused: dict = field(default_factory=dict)

    # --- names --------------------------------------------------------------------------------------------
    def block(self, i) -> str:
        """Block `i`'s module name: blocks.i."""
        return f"{self.blocks}.{i}"

    def weight(self, name: str) -> str:
        """A module's weight key: `wte` -> wte.weight."""
        return f"{name}.weight"

    def tied_key(self, fqn: str) -> str:
        """The key a tied head's weight is registered under (the embedding's); any other key as it is."""
        return self.weight(self.embedding) if fqn == self.weight(self.head) else fqn

    def linear_names(self, moe: bool = False) -> list[tuple[str, str]]:
        """(name inside a block, role) of its dense linear layers: attention then MLP. An MoE block's MLP
        linears are inside its experts: they are listed by `expert_linears`."""
        out = [(f"{self.attention}.{n}", role) for n, role in self.attention_linears]
        if not moe:
            out += [(f"{self.mlp}.{n}", role) for n, role in self.mlp_linears]
        return out

    def linear_roles(self) -> dict[str, str]:
        """Every block linear weight's role by its name inside a block, an expert's without its index
        (mlp.experts.fc): the dense linears' (`linear_names`) and the experts' (EXPERT); not the router."""
        return {**dict(self.linear_names()), **{f"{self.mlp}.{self.experts}.{n}": EXPERT for n, _ in self.mlp_linears}}

    def expert_linears(self, n_experts: int) -> list[tuple[str, str]]:
        """(name inside an MoE block, EXPERT) of every expert's linear layers, and the router."""
        out = [(f"{self.mlp}.{self.router}", COLUMN)]
        for e in range(n_experts):
            out += [(f"{self.mlp}.{self.experts}.{e}.{n}", EXPERT) for n, _ in self.mlp_linears]
        return out

    def mlp_role_names(self, role: str) -> tuple[str, ...]:
        return tuple(n for n, r in self.mlp_linears if r == role)

    def attention_role_names(self, *roles: str) -> tuple[str, ...]:
        return tuple(n for n, r in self.attention_linears if r in roles)

    def replicated(self) -> tuple[str, ...]:
        """Block modules every tensor-parallel rank holds whole (their parameters): the norms."""
        return self.norms

    def is_norm(self, name: str) -> bool:
        """Whether a name inside a block is one of its norms."""
        return name in self.norms

    # --- a model's parts ------------------------------------------------------------------------------------
    def named_blocks(self, model):
        """(key, block) pairs of the model's (or a stage's) blocks, keyed by index in the whole model; none
        for a module without blocks (one a test or a bench brings)."""
        blocks = getattr(model, self.blocks, None) or {}
        return blocks.items() if hasattr(blocks, "items") else enumerate(blocks)

    def attention_of(self, block):
        return getattr(block, self.attention)

    def set_attend(self, block, core) -> None:
        """Replace block's attention core (the seam: `attend(q, k, v, dropout_p[, doc_pos=...])`)."""
        setattr(self.attention_of(block), self.attend, core)

    def mlp_of(self, block):
        return getattr(block, self.mlp)

    def is_moe(self, mlp) -> bool:
        return hasattr(mlp, self.router) and hasattr(mlp, self.experts)

    def get(self, model, name: str | None):
        """A top-level part (None when the model, or this stage, has none)."""
        return getattr(model, name, None) if name else None

    def set(self, model, name: str | None, module) -> None:
        if name and hasattr(model, name):
            setattr(model, name, module)

    def tied(self, model) -> bool:
        """Whether the head's weight is the embedding's (read from the model; GPT-2's default)."""
        return getattr(model, "tied_head", True)

    # --- where stages may be cut ----------------------------------------------------------------------------
    def stage_drops(self, first: bool, last: bool, tied: bool) -> tuple[str, ...]:
        """The top-level parts a stage that holds some of the blocks does not hold: the positions off the
        first stage, the embedding off every stage but the first (and the last when tied: its head's
        weight), the final norm and the head off every stage but the last."""
        drops = []
        if not first and self.positions:
            drops.append(self.positions)
        if not first and (not last or not tied):
            drops.append(self.embedding)
        if not last:
            drops += [self.final_norm, self.head]
        return tuple(drops)

    def cut(self, part, keep, first: bool, last: bool, tied: bool | None = None):
        """Cut `part` (a copy of the whole model) in place down to blocks `keep` (indices in the whole model)
        and the top-level parts its place in the pipeline holds. Every kept name is unchanged."""
        tied = self.tied(part) if tied is None else tied
        blocks = getattr(part, self.blocks)
        setattr(part, self.blocks, type(blocks)({str(i): blocks[str(i)] for i in keep}))
        for name in self.stage_drops(first, last, tied):
            if hasattr(part, name):
                setattr(part, name, None)
        return part


GPT2 = Anatomy(
    arch="gpt2",
    hf_top={"wte.weight": "transformer.wte.weight", "wpe.weight": "transformer.wpe.weight",
            "ln_f.weight": "transformer.ln_f.weight", "ln_f.bias": "transformer.ln_f.bias",
            "lm_head.weight": "lm_head.weight"},
    hf_block_prefix="transformer.h", hf_prefix="transformer.", hf_transposed=True,
    hf_buffers=(".attn.bias", ".attn.masked_bias"), fused={"attn.qkv": ("attn.q", "attn.k", "attn.v")},
    # GPT-2 fuses q, k, v into one Conv1D, c_attn (checkpoint/hf.py concatenates them in this order)
    hf_block={"ln_1": "ln_1", "attn.qkv": "attn.c_attn", "attn.proj": "attn.c_proj", "ln_2": "ln_2",
              "mlp.fc": "mlp.c_fc", "mlp.proj": "mlp.c_proj"},
)

LLAMA = Anatomy(
    arch="llama", positions=None, rotary_positions="rope_positions", bias=False, embed_dropout=None, norm_kind="rmsnorm", residual_dropout=None,
    mlp_linears=(("gate", COLUMN), ("up", COLUMN), ("down", ROW)),
    hf_top={"wte.weight": "model.embed_tokens.weight", "ln_f.weight": "model.norm.weight",
            "lm_head.weight": "lm_head.weight"},
    hf_block_prefix="model.layers", hf_buffers=(".rotary_emb.inv_freq",),
    hf_block={"ln_1": "input_layernorm", "attn.q": "self_attn.q_proj", "attn.k": "self_attn.k_proj",
              "attn.v": "self_attn.v_proj", "attn.proj": "self_attn.o_proj", "ln_2": "post_attention_layernorm",
              "mlp.gate": "mlp.gate_proj", "mlp.up": "mlp.up_proj", "mlp.down": "mlp.down_proj"},
)

ANATOMIES = {a.arch: a for a in (GPT2, LLAMA)}


def of(model_or_cfg) -> Anatomy:
    """The anatomy of a model, a stage of one, or a model config (by its `arch`; GPT-2 when it has none)."""
    cfg = getattr(model_or_cfg, "cfg", model_or_cfg)
    return by_arch(getattr(cfg, "arch", None))


def by_arch(arch: str | None) -> Anatomy:
    """The anatomy of a family by name (checkpoint metadata's `arch`; absent: GPT-2, older checkpoints)."""
    return ANATOMIES[arch or "gpt2"]


def tp_region_tags() -> tuple[str, ...]:
    """The comm tags own tensor parallelism gives its region collectives ("tp.<module>"), by prefix: the
    embedding, the head and the blocks of every family."""
    tags = []
    for a in ANATOMIES.values():
        tags += [f"tp.{a.embedding}", f"tp.{a.head}", f"tp.{a.blocks}."]
    return tuple(dict.fromkeys(tags))
