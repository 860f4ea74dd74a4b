"""The one declaration a layer makes: `Spec`, a torch-free record every layer package exports.

A layer (a parallel package, recompute, compile, and the converters of later versions) says here, once,
everything the code around it needs to know without importing it:

    impls          its implementations: name -> "module:attribute" of `apply(part, cfg, dims) -> Layer`
                   (the data-parallel layer's: of its class), each with what it composes with
    choose         the config key that picks the implementation ("parallel.tp_impl"; "" = the only one)
    dim            the mesh dimension whose degree > 1 turns it on ("" = a feature, applied on every part)
    keys           its config keys with their help line and allowed values (`--help-keys` reads them)
    checks         "module:function" entries `(cfg, dims) -> None` that config validation runs (ConfigError)
    cost           the planner's formulas for it: "bytes" / "memory" / "flops" -> "module:function"
    composes_with  other layer -> the implementations of it this layer composes with (the rules table,
                   parallel/rules.py, turns them into one-line refusals)
    checks_last    its checks run after every other layer's (the pipeline's stage split assumes the rest holds)
    inference      how `shardlab generate`'s composition applies it: "" as in training, an entry of its own
                   (the pipeline: one stage per rank, no schedule), or None: not at all (a feature is skipped, a
                   mesh dimension > 1 refused)

`parallel/layers.py` lists the specs in the order the composition applies them; `compose.build`, config
validation, the help text and the planner iterate over that list. Pure data: importing a spec never loads
torch (tests/parallel/test_specs.py checks it), so `shardlab --help` and bad input stay fast.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Impl:
    name: str  # the value of the spec's `choose` key
    entry: str  # "module:attribute", imported on first use
    composes_with: dict[str, tuple[str, ...]] = field(default_factory=dict)  # overrides the spec's, per layer
    tags: frozenset[str] = frozenset()  # properties other code asks by name (dp: "replicating", "hsdp")


@dataclass(frozen=True)
class Key:
    name: str  # "parallel.tp_impl"
    help: str  # one line: what it does
    allowed: str  # the values it takes, as --help-keys shows them


@dataclass(frozen=True)
class Spec:
    name: str  # the layer's name in the composition ("tp"): its handle's `Layer.name`
    title: str  # "tensor parallelism": how errors and docs name it
    impls: tuple[Impl, ...]
    choose: str = ""
    dim: str = ""
    keys: tuple[Key, ...] = ()
    checks: tuple[str, ...] = ()
    cost: dict[str, str] = field(default_factory=dict)
    composes_with: dict[str, tuple[str, ...]] = field(default_factory=dict)
    checks_last: bool = False  # its checks run after every other layer's (they assume the rest holds)
    inference: str | None = ""  # at inference: "" = as in training, "module:attribute" = that apply, None = not

    @property
    def names(self) -> tuple[str, ...]:
        """Every implementation's name, in declaration order (the choices of `choose`)."""
        return tuple(i.name for i in self.impls)

    def table(self) -> dict[str, str]:
        """name -> "module:attribute": the registry table of this layer."""
        return {i.name: i.entry for i in self.impls}

    def impl(self, name: str) -> Impl | None:
        return next((i for i in self.impls if i.name == name), None)

    def chosen(self, cfg) -> str:
        """The implementation `cfg` picks (the only one when the spec has no `choose` key)."""
        if not self.choose:
            return self.impls[0].name
        section, _, key = self.choose.partition(".")
        value = getattr(getattr(cfg, section), key)
        # a value KIND:ARGUMENT (parallel.pp_schedule=file:PATH) picks the implementation named "KIND:"
        return value if self.impl(value) is not None or ":" not in str(value) else str(value).split(":", 1)[0] + ":"

    def on(self, dims) -> bool:
        """Whether this layer applies to a run of these degrees (a feature always does)."""
        return not self.dim or dims.size(self.dim) > 1

    def allows(self, impl: str, other: str, other_impl: str) -> bool:
        """Whether implementation `impl` of this layer composes with `other_impl` of layer `other`."""
        own = self.impl(impl)
        ok = (own.composes_with if own is not None and other in own.composes_with else self.composes_with).get(other)
        return ok is None or other_impl in ok

    def partners(self, impl: str, other: str) -> tuple[str, ...] | None:
        """The implementations of `other` that `impl` composes with; None when it composes with all."""
        own = self.impl(impl)
        return (own.composes_with if own is not None and other in own.composes_with else self.composes_with).get(other)

    def with_tag(self, tag: str) -> tuple[str, ...]:
        return tuple(i.name for i in self.impls if tag in i.tags)


def load(entry: str):
    """Import "module:attribute" and return the attribute."""
    import importlib

    mod, _, attr = entry.partition(":")
    return getattr(importlib.import_module(mod), attr)
