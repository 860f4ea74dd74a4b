"""Activation bytes per transformer block, counted exactly, and the formula they must match.

    with ActivationBytes(model) as acts:
        out = model(x)            # the forward whose activations are counted; keep `out` alive
    acts.saved["0"], acts.held["0"]   # bytes, per block (keys of model.blocks)

Two counts, both deduplicated by storage (a view and its base are one allocation; parameters are not
activations and never count):

- `saved`: what autograd keeps for backward, seen by `torch.autograd.graph.saved_tensors_hooks` while the
  block runs. Exact for a block that is not recomputed. Inside a recomputed block the checkpoint's own
  saved-tensor hooks win (innermost hooks do) and nothing is kept through them: what is seen is the
  checkpoint saving its inputs, i.e. the block's input.
- `held`: what the block really leaves in memory between forward and backward, whoever holds it: the
  block's input plus every storage allocated during its forward (seen by a TorchDispatchMode) that is still
  alive when the forward is over. The block's output is the next block's input and counted there. This is
  what recompute changes: full keeps the input only, selective the input plus the outputs its policy
  saves. Without recompute `held` equals `saved`.

`HeldActivations` counts the same saved tensors over time instead of per block: which microbatches'
activations autograd holds at each moment of a pipeline step, and the peak (docs/pipeline.md).

`formula_bytes` is the closed form for this model (docs/memory.md derives it): Korthikanti et al.'s
sbh(34 + 5as/h), redone for GPT-2 with separate q/k/v projections, fused attention, fp32, dropout off.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from shardlab.model import anatomy


def _ref(t) -> StorageWeakRef | None:
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
        return None
    try:
        return StorageWeakRef(t.untyped_storage())
    except (RuntimeError, NotImplementedError):  # a wrapper subclass without storage of its own
        return None


def _nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def _is_param(t: torch.Tensor) -> bool:
    return isinstance(t, nn.Parameter) or isinstance(getattr(t, "_base", None), nn.Parameter)


class _Allocations(TorchDispatchMode):
    """Reports each op's outputs that own a new storage (not an alias of one of the op's inputs)."""

    def __init__(self, on_new):
        super().__init__()
        self.on_new = on_new

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {r for r in map(_ref, tree_leaves((args, kwargs))) if r is not None}
        for t in tree_leaves(out):
            r = _ref(t)
            if r is not None and r not in inputs:
                self.on_new(r, _nbytes(t))
        return out


class ActivationBytes:
    """Count per-block activation bytes of the forward run inside the `with` (see the module doc)."""

    def __init__(self, model: nn.Module, blocks: dict[str, nn.Module] | None = None):
        self.blocks = dict(blocks.items() if blocks is not None else anatomy.of(model).named_blocks(model))
        self.saved: dict[str, int] = {}
        self.held: dict[str, int] = {}
        self._current: str | None = None
        self._saved: dict[str, dict] = {k: {} for k in self.blocks}  # block -> {storage ref: bytes}
        self._held: dict[str, dict] = {k: {} for k in self.blocks}
        self._handles: list = []

    # --- recording ---------------------------------------------------------------------------------------
    def _pack(self, t: torch.Tensor):
        if self._current is not None and not _is_param(t):
            r = _ref(t)
            if r is not None:
                self._saved[self._current][r] = _nbytes(t)
        return t

    def _new(self, ref: StorageWeakRef, nbytes: int) -> None:
        if self._current is not None:
            self._held[self._current][ref] = nbytes

    def _pre(self, name: str, module, args) -> None:
        self._current = name
        for t in tree_leaves(args):  # the input is this block's to keep (it may come from the block before)
            r = _ref(t)
            if r is not None:
                for held in self._held.values():
                    held.pop(r, None)
                self._held[name][r] = _nbytes(t)

    def _post(self, name: str, module, args, output) -> None:
        for t in tree_leaves(output):  # the output is the next block's input (or the head's)
            r = _ref(t)
            if r is not None:
                self._held[name].pop(r, None)
        self._current = None

    # --- context -----------------------------------------------------------------------------------------
    def __enter__(self) -> "ActivationBytes":
        for name, block in self.blocks.items():
            self._handles.append(block.register_forward_pre_hook(lambda m, a, n=name: self._pre(n, m, a)))
            self._handles.append(block.register_forward_hook(lambda m, a, o, n=name: self._post(n, m, a, o)))
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._mode = _Allocations(self._new)
        self._hooks.__enter__()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        self._hooks.__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        # Counted now, while the caller still holds the forward's output (and so its graph).
        self.saved = {k: sum(n for r, n in v.items() if not r.expired()) for k, v in self._saved.items()}
        self.held = {k: sum(n for r, n in v.items() if not r.expired()) for k, v in self._held.items()}
        self._saved = self._held = {}


class HeldActivations:
    """Saved-tensor bytes held per microbatch over a pipeline step, and their peak.

        held = HeldActivations()
        with held.saving(mb):     # around a microbatch's forward: what autograd saves is mb's
            out = stage(x)
        held.sample()             # between instructions: what is still held now

    A saved tensor is held for as long as its storage lives (autograd frees it after the backward; a
    zero-bubble W keeps its inputs until it runs: still held, rightly). Storages are counted once,
    parameters never; a storage saved by two microbatches (a shared buffer, or the batch tensor the
    microbatches' tokens are views of: not an activation) is dropped from the count, in every sample. `peak_microbatches` is the most microbatches with something held at once:
    the schedules' memory argument (1F1B at most p, GPipe all m) measured rather than derived."""

    def __init__(self):
        # storage -> (microbatch key, bytes, the weak ref itself). A dead storage's address can be reused
        # by a new one that then compares equal, so every lookup checks the stored ref is still alive
        self._owner: dict[StorageWeakRef, tuple] = {}
        self._shared: dict[StorageWeakRef, StorageWeakRef] = {}
        self._shared_ids: set[int] = set()  # owner entries found shared after they were sampled
        self._samples: list[list[tuple]] = []  # [(key, bytes, ref)] alive at each sample
        self._key = None

    def _pack(self, t: torch.Tensor):
        if self._key is None or _is_param(t):
            return t
        r = _ref(t)
        if r is None:
            return t
        shared = self._shared.get(r)
        if shared is not None:
            if not shared.expired():
                return t
            del self._shared[r]
        prev = self._owner.get(r)
        if prev is not None and not prev[2].expired() and prev[0] != self._key:
            del self._owner[r]
            self._shared[r] = r
            self._shared_ids.add(id(prev[2]))
        elif prev is None or prev[2].expired():
            self._owner.pop(r, None)
            self._owner[r] = (self._key, _nbytes(t), r)
        return t

    def saving(self, key) -> "_SavingAs":
        """Attribute what autograd saves inside the `with` to microbatch `key`."""
        return _SavingAs(self, key)

    def sample(self) -> dict:
        """Bytes held now per microbatch key (freed storages forgotten)."""
        now = []
        for r, (key, n, ref) in list(self._owner.items()):
            if ref.expired():
                del self._owner[r]
            else:
                now.append((key, n, ref))
        self._samples.append(now)
        return self._per_key(now)

    def _per_key(self, sample) -> dict:
        out: dict = {}
        for key, n, ref in sample:
            if id(ref) not in self._shared_ids:
                out[key] = out.get(key, 0) + n
        return out

    @property
    def peak_microbatches(self) -> int:
        """The most microbatches holding saved tensors at one sample."""
        return max((len(self._per_key(s)) for s in self._samples), default=0)

    @property
    def peak_bytes(self) -> int:
        return max((sum(self._per_key(s).values()) for s in self._samples), default=0)

    @property
    def bytes_per_microbatch(self) -> int:
        """The most one microbatch held (its forward's saved bytes)."""
        return max((n for s in self._samples for n in self._per_key(s).values()), default=0)


class _SavingAs(torch.autograd.graph.saved_tensors_hooks):
    """HeldActivations' hooks, with the microbatch being saved for set while they are active."""

    def __init__(self, held: HeldActivations, key):
        super().__init__(held._pack, lambda t: t)
        self.held, self.key = held, key

    def __enter__(self):
        self.held._key = self.key
        return super().__enter__()

    def __exit__(self, *exc):
        self.held._key = None
        return super().__exit__(*exc)


def formula_bytes(batch: int, seq: int, d_model: int, n_head: int, mode: str = "none") -> int:
    """Activation bytes one GPT-2 block keeps for backward, fp32, dropout off, fused attention
    (docs/memory.md derives each term). s = seq, b = batch, h = d_model, a = n_head.

    none:      sbh(64 + (16 + 4a)/h)  = 4 bytes x (16 sbh tensors + 4 sb LayerNorm statistics + abs log-sum-exp)
    full:      4 sbh                  (the block's input)
    selective: 4 (11 sbh + abs)       (input, q, k, v, attention output, attention log-sum-exp, the two
                                       projections' outputs, the 4h MLP matmul output)
    """
    s, b, h, a = seq, batch, d_model, n_head
    sbh = s * b * h
    if mode == "none":
        return 4 * (16 * sbh + 4 * s * b + a * s * b)
    if mode == "full":
        return 4 * sbh
    if mode == "selective":
        return 4 * (11 * sbh + a * s * b)
    raise ValueError(f"recompute mode {mode!r}: must be none, full or selective")
