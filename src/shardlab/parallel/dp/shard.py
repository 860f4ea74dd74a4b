"""The flat-shard layout shared by zero1, zero2 and zero3: wrap units, dim-0 shards, one flat buffer per unit.

Every parameter is split on dim 0 with `torch.chunk` semantics, like FSDP2 and DTensor `Shard(0)`:
with N ranks each rank owns `chunk = ceil(rows / N)` rows; rank r owns rows [r*chunk, (r+1)*chunk),
the last rank(s) fewer or none. Every rank stores a full `chunk` (the missing rows are zero
*padding*), so all ranks hold equally sized shards and a rank's shard of a unit is one flat buffer:

    flat shard (rank r) = [ shard_r(p0) | shard_r(p1) | ... ]          S = sum(chunk_i * row_numel_i)
    full flat buffer    = [ flat shard 0 | flat shard 1 | ... ]         N * S  (viewed as N rows of S)

That is exactly the input of a reduce-scatter and the output of an all-gather, so one **wrap unit**
(a transformer block, say) costs one collective, not one per parameter. Parameters themselves are kept
as *padded full* tensors (N * chunk rows; the model's parameter is a view of the first `rows`), so a
shard is a plain view `full[r*chunk:(r+1)*chunk]` and packing to/from the flat layout is one copy.

A parameter may bring its own **gather encoding** (`param.gather_encoding`, the `GatherEncoding` protocol
below): a zero3 unit gathering for compute then sends what the encoding makes of the shard (float8 weights
with an agreed scale, say) instead of its elements, as bytes, and the encoding writes the full values back.
Gathers whose values must be exact (zero1/zero2's parameters, checkpoints, `full_parameters`) never encode.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from shardlab import comm
from shardlab.model import anatomy
from shardlab.parallel import materialize

MAX_REDUCE_SCATTERS_IN_FLIGHT = 2  # zero2/3: bounds the memory of packed gradient buffers during backward


class ShardedParam:
    """One parameter of a unit: its full shape, this rank's rows, and where its shard sits in the flat shard."""

    def __init__(self, fqn: str, param: nn.Parameter, registrations: list, rank: int, world: int, offset: int):
        if param.dim() == 0:
            raise ValueError(f"{fqn}: 0-dim parameters cannot be sharded on dim 0; give it shape (1,)")
        self.fqn, self.param, self.registrations = fqn, param, registrations  # [(module, attr, fqn), ...]
        self.shape = param.shape
        self.rows = param.shape[0]
        self.row_numel = param[0].numel()
        self.chunk = -(-self.rows // world)  # torch.chunk: ceil(rows / N) rows per rank
        self.numel = self.chunk * self.row_numel  # padded shard size in elements
        self.offset = offset  # of this shard inside the unit's flat shard
        self.start = rank * self.chunk
        self.local_rows = max(0, min(self.rows - self.start, self.chunk))  # rows without padding
        self.full: torch.Tensor | None = None  # padded full tensor, (N * chunk, *rest)
        self.shard: nn.Parameter | None = None  # what the optimizer updates, (chunk, *rest)
        self.full_grad: torch.Tensor | None = None  # zero1 only: padded full gradient, like `full`

    @property
    def padding(self) -> int:
        """Padding elements in this rank's shard."""
        return (self.chunk - self.local_rows) * self.row_numel

    def local(self, t: torch.Tensor) -> torch.Tensor:
        """The unpadded part of a shard-shaped tensor: the local tensor of the DTensor Shard(0)."""
        return t[: self.local_rows]

    def shard_of(self, full: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a full (unpadded) tensor, zero-padded to the shard shape."""
        out = full.new_zeros((self.chunk, *self.shape[1:]))
        out[: self.local_rows].copy_(full[self.start: self.start + self.local_rows])
        return out


def scatter_rows(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Write `src` (a full tensor, padded or not) into `dst`, an (N, numel) column block of a full flat
    buffer: row r receives rank r's chunk; rows past the end of `src` are padding and get zeros."""
    n = dst.shape[1]
    flat = src.reshape(-1)
    full_rows, rest = divmod(flat.numel(), n)
    dst[:full_rows].copy_(flat[: full_rows * n].view(full_rows, n))
    if full_rows < dst.shape[0]:
        dst[full_rows, :rest].copy_(flat[full_rows * n:])
        dst[full_rows, rest:].zero_()
        dst[full_rows + 1:].zero_()


class GatherEncoding:
    """What a parameter that brings its own all-gather encoding provides (duck-typed: `param.gather_encoding`).

    For one gather: `agree(shard)` gives a small fp32 vector that is max-reduced over the shard group in one
    collective for the whole unit (a statistic every rank must encode with, e.g. the amax of the whole
    tensor); `encode(shard, agreed)` the bytes this rank sends (a uint8 tensor of `nbytes(shard.numel())`
    bytes); `decode(rows, full)` writes the full (padded) tensor from the gathered bytes, `rows` (world,
    nbytes). `release()`: the full values go away (reshard) or were written exactly by a plain gather.
    `label` names the encoding in the collectives' tags. `agree_also` (optional, a process group): the
    parameter is a piece of a tensor split over that group too (tensor parallelism), so the agreed vector
    is max-reduced over it as well (one more collective per unit; every encoding of a unit names the same)."""
    label = "encoded"

    def agree(self, shard: torch.Tensor) -> torch.Tensor: ...
    def nbytes(self, numel: int) -> int: ...
    def encode(self, shard: torch.Tensor, agreed: torch.Tensor) -> torch.Tensor: ...
    def decode(self, rows: torch.Tensor, full: torch.Tensor) -> None: ...
    def release(self) -> None: ...


class FlatParamUnit:
    """One wrap unit: the parameters it owns and its collectives.

    `shard_at_rest` (zero3): parameters live as shards between uses; `unshard()` all-gathers them into
    their padded full storage, `reshard()` frees that storage again. Otherwise (zero1/zero2) the full
    parameters live permanently and the shards are views of them.
    """

    def __init__(self, name: str, module: nn.Module, params: list[tuple[str, nn.Parameter, list]],
                 group, shard_at_rest: bool, home=None, device=None):
        self.name, self.module, self.group = name, module, group
        self.rank, self.world = comm.rank(group), comm.world_size(group)
        self.infos: list[ShardedParam] = []
        offset = 0
        for fqn, p, regs in params:
            info = ShardedParam(fqn, p, regs, self.rank, self.world, offset)
            self.infos.append(info)
            offset += info.numel
        self.shard_numel = offset  # S
        self.shard_at_rest = shard_at_rest
        # zero3 with parallel.offload=params: the tier (offload.py) where the flat shard lives between uses;
        # it is fetched to the device when the all-gather starts (one unit ahead with prefetch)
        self.home = home if shard_at_rest else None
        self.flat_shard: torch.Tensor | None = None  # zero3: the parameters' home
        self.grad_shard: torch.Tensor | None = None  # zero2/zero3: the reduced gradient shard
        self.unsharded = not shard_at_rest
        self._gather: tuple | None = None  # (handle, buffer) of an all-gather in flight
        self._init_storage(device)

    # --- layout ---------------------------------------------------------------------------------------
    def _init_storage(self, device=None) -> None:
        """The shards and the padded full storage. A parameter with no storage yet (a meta-built model:
        parallel/materialize.py) gets its storage here, on `device`, with no values (they are drawn into the
        shards afterwards): zero3 allocates only its flat shard (the full storage starts freed), zero1/zero2
        the full parameters they keep anyway."""
        p0 = self.infos[0].param if self.infos else None
        self.device = device if p0 is not None and materialize.is_unallocated(p0) and device is not None \
            else (p0.device if p0 is not None else None)
        with torch.no_grad():
            if self.shard_at_rest:
                if self.home is not None and p0 is not None:
                    self.flat_shard = self.home.empty(self.shard_numel, p0.dtype).zero_()
                else:
                    self.flat_shard = torch.zeros(self.shard_numel, dtype=p0.dtype if p0 is not None else None,
                                                  device=self.device)
            for info in self.infos:
                p = info.param
                empty = materialize.is_unallocated(p)
                full = torch.empty if empty and self.shard_at_rest else torch.zeros
                full = full((self.world * info.chunk, *info.shape[1:]), dtype=p.dtype, device=self.device)
                if not empty:
                    full[: info.rows].copy_(p.detach())
                info.full = full
                if empty:  # a meta tensor takes no data in place: a new parameter, wherever it is registered
                    # (`.data =`, as below: the parameter keeps its own version counter, not the storage's,
                    # so an all-gather into `full` does not invalidate what autograd saved of it)
                    p = info.param = materialize.successor(p, nn.Parameter(full.new_empty(0), p.requires_grad))
                    p.data = full[: info.rows]
                    for module, attr, _ in info.registrations:
                        module._parameters[attr] = p
                else:
                    p.data = full[: info.rows]  # the model's parameter is now a view of the padded storage
                if self.shard_at_rest:
                    view = self.flat_shard[info.offset: info.offset + info.numel].view(info.chunk, *info.shape[1:])
                    if not empty:
                        view.copy_(full[info.start: info.start + info.chunk])
                    info.shard = nn.Parameter(view, requires_grad=p.requires_grad)
                    if empty:  # zero3: the full storage comes when first gathered (one parameter's worth at a time)
                        full.untyped_storage().resize_(0)
                else:
                    info.shard = nn.Parameter(full[info.start: info.start + info.chunk], requires_grad=p.requires_grad)
            if self.shard_at_rest:
                self._free_full()
                self._register(shard=True)
                self.release()

    def release(self) -> None:
        """Offloaded (disk): the flat shard's pages leave the process after a use (a fetch, an update)."""
        if self.home is not None and self.flat_shard is not None:
            self.home.release(self.flat_shard)

    def _register(self, shard: bool) -> None:
        """Point the modules at the shards (at rest) or at the full parameters (in use)."""
        for info in self.infos:
            t = info.shard if shard else info.param
            for module, attr, _ in info.registrations:
                module._parameters[attr] = t  # plain dict write: no checks, nothing else changes

    def _free_full(self) -> None:
        for info in self.infos:
            info.full.untyped_storage().resize_(0)  # views saved by autograd stay valid; memory goes

    def _alloc_full(self) -> None:
        for info in self.infos:
            st = info.full.untyped_storage()
            if st.size() == 0:
                st.resize_(info.full.numel() * info.full.element_size())

    def full_bytes(self) -> int:
        """Bytes of the unit's full flat buffer (N x S): all-gather output, reduce-scatter input."""
        return self.world * self.shard_numel * (self.infos[0].param.element_size() if self.infos else 4)

    # --- parameters: all-gather ------------------------------------------------------------------------
    def pack_shards(self) -> torch.Tensor:
        """This rank's shards as one flat buffer (zero1/zero2 build it from the full parameters)."""
        if self.home is not None:  # offloaded: fetch the shard to the device (the all-gather's input)
            buf = self.flat_shard.to(self.device, copy=True, non_blocking=self.flat_shard.is_pinned())
            self.release()
            return buf
        if self.flat_shard is not None:
            return self.flat_shard
        return torch.cat([i.full[i.start: i.start + i.chunk].reshape(-1) for i in self.infos])

    def encodings(self, exact: bool) -> list:
        """Each parameter's gather encoding (None: its elements as they are); all None for an exact gather
        and where parameters live whole (zero1/zero2: the gathered values are the parameters)."""
        if exact or not self.shard_at_rest:
            return [None] * len(self.infos)
        return [getattr(i.param, "gather_encoding", None) for i in self.infos]

    def start_all_gather(self, exact: bool = False) -> None:
        """Launch the unit's all-gather (no-op when already unsharded or in flight). `exact`: every
        parameter's own elements, even where one brings an encoding."""
        if self.unsharded or self._gather is not None or not self.infos:
            return
        inp = self.pack_shards()
        codecs = self.encodings(exact)
        if any(c is not None for c in codecs):
            self._gather = self._start_encoded(inp, codecs)
            return
        buf = inp.new_empty(self.world * self.shard_numel)
        handle = comm.all_gather(buf, inp, group=self.group, async_op=True, tag=f"ag:{self.name}")
        self._gather = (handle, buf, None)

    def _start_encoded(self, inp: torch.Tensor, codecs: list) -> tuple:
        """One max all-reduce of what the encodings must agree on, then one all-gather of bytes: each
        parameter's encoded shard, or its raw bytes where it has no encoding. Returns (handle, buffer, layout)."""
        shards = [inp[i.offset: i.offset + i.numel].view(i.chunk, *i.shape[1:]) for i in self.infos]
        label = next(c.label for c in codecs if c is not None)
        agreed = [c.agree(s) if c is not None else None for c, s in zip(codecs, shards)]
        sizes = [a.numel() for a in agreed if a is not None]
        if sizes:
            flat = torch.cat([a.reshape(-1).float() for a in agreed if a is not None])
            comm.all_reduce(flat, op=comm.ReduceOp.MAX, group=self.group, tag=f"ag:{self.name}:{label} agree")
            also = next((c.agree_also for c in codecs if getattr(c, "agree_also", None) is not None), None)
            if also is not None:  # the parameters are pieces of larger tensors split over another group (TP)
                comm.all_reduce(flat, op=comm.ReduceOp.MAX, group=also, tag=f"ag:{self.name}:{label} agree")
            parts = iter(flat.split(sizes))
            agreed = [next(parts) if a is not None else None for a in agreed]
        pieces, layout, offset = [], [], 0
        with torch.no_grad():
            for c, s, a in zip(codecs, shards, agreed):
                b = c.encode(s, a) if c is not None else s.reshape(-1).view(torch.uint8)
                pieces.append(b.reshape(-1))
                layout.append((c, offset, b.numel()))
                offset += b.numel()
        inp8 = torch.cat(pieces)
        buf = inp8.new_empty(self.world * offset)
        handle = comm.all_gather(buf, inp8, group=self.group, async_op=True, tag=f"ag:{self.name}:{label}")
        return handle, buf, layout

    def finish_all_gather(self) -> None:
        """Wait for the all-gather and copy each parameter out of the flat buffer into its full storage
        (an encoded gather: each encoding decodes its parameter's bytes)."""
        handle, buf, layout = self._gather
        self._gather = None
        handle.wait()
        self._alloc_full()
        if layout is not None:
            rows = buf.view(self.world, -1)
            with torch.no_grad():
                for info, (c, off, n) in zip(self.infos, layout):
                    cols = rows[:, off: off + n]
                    if c is None:
                        info.full.view(self.world, info.numel).view(torch.uint8).copy_(cols)
                    else:
                        c.decode(cols, info.full)
            return
        rows = buf.view(self.world, self.shard_numel)
        with torch.no_grad():
            for info, c in zip(self.infos, self.encodings(False)):
                info.full.view(self.world, info.numel).copy_(rows[:, info.offset: info.offset + info.numel])
                if c is not None:  # exact values now: what an earlier encoded gather decoded is gone
                    c.release()

    def unshard(self, exact: bool = False) -> None:
        if self.unsharded:
            return
        self.start_all_gather(exact)
        if self._gather is not None:
            self.finish_all_gather()
        self._register(shard=False)
        self.unsharded = True

    def reshard(self) -> None:
        if not self.shard_at_rest or not self.unsharded:
            return
        self._register(shard=True)
        self._free_full()
        for c in self.encodings(False):
            if c is not None:
                c.release()
        self.unsharded = False

    # --- gradients: reduce-scatter -------------------------------------------------------------------
    def start_reduce_scatter(self, grads: list[torch.Tensor | None], dtype: torch.dtype):
        """Pack full gradients (None = zeros) into the flat layout and launch the reduce-scatter.
        Returns (handle, output shard); the caller frees the full gradients right away."""
        buf = torch.empty((self.world, self.shard_numel), dtype=dtype, device=self.infos[0].param.device)
        with torch.no_grad():
            for info, g in zip(self.infos, grads):
                cols = buf[:, info.offset: info.offset + info.numel]
                if g is None:
                    cols.zero_()
                else:
                    scatter_rows(cols, g)
        out = buf.new_empty(self.shard_numel)
        handle = comm.reduce_scatter(out, buf.view(-1), group=self.group, async_op=True, tag=f"rs:{self.name}")
        return handle, out, buf

    def shard_views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Per-parameter shard-shaped views of a flat shard-sized buffer."""
        return [flat[i.offset: i.offset + i.numel].view(i.chunk, *i.shape[1:]) for i in self.infos]


# --- wrap policy -----------------------------------------------------------------------------------------

def unit_modules(model: nn.Module, policy: str) -> list[tuple[str, nn.Module]]:
    """The modules that become units, in forward (pre-)order; the root (the whole model) comes first.

    whole: one unit.  block: each transformer block, the root keeps embeddings, final norm and the tied
    head.  layer: finer: blocks[i].attn and blocks[i].mlp each a unit, the block keeps its two norms.
    """
    if policy not in ("block", "layer", "whole"):
        raise ValueError(f"parallel.wrap={policy!r}: must be block, layer or whole")
    out = [("", model)]
    if policy == "whole":
        return out
    anat = anatomy.of(model)
    for i, block in anat.named_blocks(model):
        out.append((anat.block(i), block))
        if policy == "layer":
            out += [(f"{anat.block(i)}.{c}", getattr(block, c)) for c in (anat.attention, anat.mlp) if hasattr(block, c)]
    return out


def build_units(model: nn.Module, policy: str, group, shard_at_rest: bool, home=None,
                device=None) -> list[FlatParamUnit]:
    """Give every parameter to the innermost unit module that contains it (FSDP's rule). A parameter
    registered twice (the tied embedding/head) is one parameter, kept under its first name (wte.weight)."""
    mods = unit_modules(model, policy)
    owned: dict[str, list] = {name: [] for name, _ in mods}
    regs: dict[int, list] = {}
    for mname, mod in model.named_modules(remove_duplicate=False):
        for attr, p in mod._parameters.items():
            if p is not None:
                regs.setdefault(id(p), []).append((mod, attr, f"{mname}.{attr}" if mname else attr))
    for fqn, p in model.named_parameters():
        owner = max((name for name, _ in mods if name == "" or fqn.startswith(name + ".")), key=len)
        owned[owner].append((fqn, p, regs[id(p)]))
    return [FlatParamUnit(name or "root", mod, owned[name], group, shard_at_rest, home, device)
            for name, mod in mods if owned[name]]
