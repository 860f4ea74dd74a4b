"""The one rule between optimizers and the layers that shard parameters: serve or refuse, in one line.

Every layer that decides which tensors the optimizer steps declares what it hands it of each matrix
(`optimizer_hands`: None for whole matrices; a phrase such as "dim-0 row shards" for parts; or `Pieces`:
that phrase and, per parameter, how its pieces make the whole). Before it builds the optimizer it asks `serve`.
An elementwise optimizer (AdamW, SGD) is served by any layer: each shard is updated alone, bitwise as the
whole. An optimizer whose update needs the whole matrix (its row says `whole_matrix`) is served where the
layer hands whole matrices, or where it declares `Pieces` and the optimizer assembles matrices itself (its row
says `gathers`: Muon, optim/muon/exchange.py); the `Pieces` are handed to its factory. Anywhere else the run
stops here, before any state is allocated, with one line naming both sides.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from shardlab.errors import ConfigError
from shardlab.optim.registry import OptimizerRow


@dataclass(frozen=True)
class Split:
    """How the pieces of one parameter make the tensor a layer was handed: the pieces of `group`'s ranks,
    equally long along `dim`, concatenated in group-rank order, the first `length` kept (the rest is padding)."""
    group: object
    dim: int
    length: int


@dataclass(frozen=True)
class Pieces:
    """A layer's `optimizer_hands` when it hands parts it can describe: `split(fqn) -> Split`, or None for a
    parameter it holds whole. Reads as its phrase (the refusal line names it)."""
    phrase: str
    split: Callable

    def __str__(self) -> str:
        return self.phrase


@dataclass(frozen=True)
class Hands:
    """A sharding layer's serving declaration, as data: what it hands the optimizer of each matrix it splits
    (`phrase`), and whether at run time it describes those parts (`describes`: it declares `Pieces`, so an
    optimizer that gathers is served)."""
    phrase: str
    describes: bool


# Every layer implementation that hands the optimizer parts of matrices, by the name config validation
# knows it by (the dp layer's name; "tp:<parallel.tp_impl>"). The layers' `optimizer_hands` read their
# phrase here, so the refusal config validation gives before any rank starts is the line the built layer
# would give (`check`). A layer not listed hands whole matrices (ddp, torch-zero1, pipeline stages, EP).
HANDS: dict[str, Hands] = {
    "zero": Hands("dim-0 row shards of each matrix (flat ZeRO shards)", describes=True),
    "torch-fsdp2": Hands("DTensor dim-0 shards of each matrix (FSDP2)", describes=True),
    "tp:own": Hands("its column or row slice of each split matrix (own TP)", describes=True),
    "tp:dtensor": Hands("DTensor shards of each split matrix (DTensor TP)", describes=True),
}
_DECLARED_AS = {"zero1": "zero", "zero2": "zero", "zero3": "zero"}


@dataclass
class Factory:
    """An optimizer factory that knows its registry row: `factory(named_params) -> optimizer`. `pieces`: the
    layers' `Pieces` (outermost layer first: the order in which they are undone), handed to the build of an
    optimizer that gathers."""
    row: OptimizerRow
    build: Callable
    pieces: dict = field(default_factory=dict)

    def __call__(self, named_params):
        if getattr(self.row, "gathers", False):
            return self.build(named_params, pieces=list(self.pieces.values()))
        return self.build(named_params)


def serve(factory, layer: str, hands: str | None) -> None:
    """Refuse, with one line, an optimizer that needs whole matrices from a layer that hands it parts.
    `factory`: a registry `Factory` (a plain callable is taken as elementwise: the tests' own); `layer`:
    the layer's name as the config spells it; `hands`: its `optimizer_hands` declaration."""
    row = getattr(factory, "row", None)
    if row is None or not row.whole_matrix or hands is None:
        return
    if isinstance(hands, Pieces) and getattr(row, "gathers", False):
        factory.pieces[layer] = hands  # the optimizer gathers each matrix from these pieces
        return
    able = "ddp, torch-ddp, torch-zero1" + (", zero1/2/3, torch-fsdp2, tp" if getattr(row, "gathers", False) else "")
    raise ConfigError(f"optimizer {row.name} needs whole matrices, and {layer} hands it {hands}: "
                      f"choose a layer that keeps whole matrices or describes its pieces ({able}) or an "
                      "elementwise optimizer")

def factory_for(cfg, no_decay: set[str], routers: set[str] = frozenset(), name: str | None = None) -> Factory:
    """The factory of the optimizer the run names (`registry.training_name`), carrying its row."""
    from shardlab.optim import registry

    row = registry.get(name or registry.training_name(cfg))
    return Factory(row, row.load()(cfg, no_decay, routers))


def check(cfg, dims) -> None:
    """Config validation's turn of the rule: the optimizer the run names against the layers its layout
    applies, from the declarations above (pure data: no rank has started, nothing is imported). The same
    one line as the built layer's `serve`. The layers are found as the composition finds them: the dp
    layer (none, "single", when every rank is busy with tp/pp/cp: parallel/dp/apply.py), then TP at degree > 1."""
    from shardlab.optim import registry

    row = registry.get(registry.training_name(cfg))
    if not row.whole_matrix:
        return
    p = cfg.parallel
    if p.offload != "none":  # the offloaded step updates a few layers at a time (parallel/dp/offload)
        raise ConfigError(f"train.optimizer={row.name} with parallel.offload={p.offload}: the offloaded step "
                          f"updates a group of layers at a time, and {row.name} gathers every matrix in one "
                          "exchange; use parallel.offload=none, or train.optimizer=adamw")
    dp = "single" if dims.size("dp_cp") == 1 and dims.world_size > 1 else p.strategy
    present = [(dp, _DECLARED_AS.get(dp, dp))]
    if dims.size("tp") > 1:
        present.append(("tp", f"tp:{p.tp_impl}"))
    for layer, key in present:
        hands = HANDS.get(key)
        if hands is not None:
            serve(Factory(row, None), layer, Pieces(hands.phrase, None) if hands.describes else hands.phrase)
