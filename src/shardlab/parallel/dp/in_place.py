"""Applying a state dict that was loaded in place: what is left to do.

A checkpoint load (DCP) writes into the tensors of the state dicts it was given; for the replicating
layers (single, DDP) those are the live parameters and the live optimizer state themselves. Applying them
afterwards with torch's `set_model_state_dict` / `set_optimizer_state_dict` then copies every tensor onto
itself, after resolving every parameter's name again (~0.1 s of a gpt2 load, as much as reading a
quarter of its bytes). These checks say when that is so, from the tensors' memory alone (no names):

- model: every value is the memory of a live parameter or buffer (same address, dtype, shape, strides),
  every parameter is covered, and no module changes what loading means (a `_load_from_state_dict` of its
  own, or load hooks): then `load_state_dict` would copy each tensor onto itself, and nothing is done;
- optimizer: the state's tensors are exactly the live state's (one for one: the same objects, or the same
  memory): then only the hyperparameters are new, and torch's own `Optimizer.load_state_dict` is given the
  optimizer's own state dict with the checkpoint's hyperparameters (no name resolution; its hooks and
  `__setstate__` run as before).

Anything else (DTensors, a copy, a missing tensor, a custom load) returns False / None: the caller takes
torch's path unchanged.
"""
from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager

import torch
import torch.nn as nn


def where(t: torch.Tensor) -> tuple:
    return t.data_ptr(), t.dtype, t.shape, t.stride()  # (a torch.Size is a tuple: equal, and hashed, as one)


_held: dict | None = None  # while a load holds the modules still: (what, id(module)) -> (module, its value)


@contextmanager
def held_still():
    """Within: nothing changes the modules (their tensors, their classes' state-dict methods, their hooks)
    but loads into their tensors' memory: a checkpoint load, from handing out the state dicts to applying
    them. The walk over the modules and the model's signature (sd_names.py) are then taken once per module
    instead of once by each state dict taken or applied (three times a load). A module with state-dict or
    load hooks is walked every time (a hook may change it)."""
    global _held
    outer, _held = _held, {}
    try:
        yield
    finally:
        _held = outer


def held(what: str, module, compute, keep=lambda value: value is not None):
    """`compute()`, once per `module` while a load holds it still (held_still) and `keep(value)`."""
    if _held is None:
        return compute()
    hit = _held.get((what, id(module)))
    if hit is not None and hit[0] is module:
        return hit[1]
    value = compute()
    if keep(value):
        _held[(what, id(module))] = (module, value)
    return value


def walk(module: nn.Module) -> tuple[list, list, bool, bool]:
    """`module.parameters()` and `module.buffers()` (the same tensors in the same order), and whether every
    module saves and loads as nn.Module does (no `_save_to_state_dict` / `get_extra_state` /
    `_load_from_state_dict` of its own, no state-dict or load hooks), in one pass over the modules: each
    of those walks them again, and the walks were most of a per-load check's cost. Once per load (held)."""
    return held("walk", module, lambda: _walk(module), keep=lambda w: w[2] and w[3])  # (hooks: walked again)


def _walk(module: nn.Module) -> tuple[list, list, bool, bool]:
    params, buffers, seen_p, seen_b = [], [], set(), set()
    plain_save = plain_load = True
    for m in module.modules():
        for p in m._parameters.values():
            if p is not None and id(p) not in seen_p:
                seen_p.add(id(p))
                params.append(p)
        for b in m._buffers.values():
            if b is not None and id(b) not in seen_b:
                seen_b.add(id(b))
                buffers.append(b)
        t = type(m)
        if plain_save and (t._save_to_state_dict is not nn.Module._save_to_state_dict or t.get_extra_state
                           is not nn.Module.get_extra_state or m._state_dict_hooks or m._state_dict_pre_hooks):
            plain_save = False
        if plain_load and (t._load_from_state_dict is not nn.Module._load_from_state_dict
                           or m._load_state_dict_pre_hooks or m._load_state_dict_post_hooks):
            plain_load = False
    return params, buffers, plain_save, plain_load


def model_loaded_in_place(module: nn.Module, sd: dict) -> bool:
    """Whether `sd` (flat: fqn -> tensor) is the live memory of `module`'s parameters and buffers, covering
    every parameter, with nothing loaded another way: applying it would copy each tensor onto itself."""
    if not sd or any(type(v) is not torch.Tensor for v in sd.values()):
        return False
    ps, _, _, plain_load = walk(module)
    at = places(module)
    params = set(at[:len(ps)])  # a parameter's memory is its detached view's
    given = {where(v) for v in sd.values()}
    return given <= set(at) and params <= given and plain_load


def places(module: nn.Module) -> tuple:
    """`where` of the module's parameters, then its buffers (walk's order). Once per load (held)."""
    def compute():
        ps, bs, _, _ = walk(module)
        return tuple(where(t) for t in ps + bs)

    return held("places", module, compute)


def _tensors(state: dict) -> list | None:
    """The tensors of an optimizer state ({key: {name: value}}), or None when a value is not a plain tensor."""
    if not all(isinstance(d, dict) for d in state.values()):
        return None
    out = [v for per_param in state.values() for v in per_param.values()]
    return out if all(type(v) is torch.Tensor for v in out) else None


def same_state(optimizer: torch.optim.Optimizer, sd: dict) -> bool:
    """Whether `sd["state"]`'s tensors are exactly the live state's, one for one (loaded in place)."""
    given, live = _tensors(sd.get("state", {})), _tensors(optimizer.state)
    if given is None or live is None or len(given) != len(live):
        return False
    ids = set(map(id, live))
    # The handed-out state dict holds the live tensor objects themselves (a read copies into them): one for
    # one by identity, which is what equal memory says, at a set of ids' cost. Else compare the memory.
    if len(ids) != len(live) or set(map(id, given)) != ids:
        places = {where(v) for v in live}
        if len(places) != len(live) or {where(v) for v in given} != places:
            return False
    return True


def native_optim_state(optimizer: torch.optim.Optimizer, sd: dict) -> dict | None:
    """The optimizer's own state dict (torch's format, by parameter index) carrying `sd`'s hyperparameters,
    when `sd["state"]`'s tensors are exactly the live state's, one for one (loaded in place); else None.
    The caller checks the param groups' count first."""
    if not same_state(optimizer, sd):
        return None
    native = optimizer.state_dict()
    native["param_groups"] = [{**saved, "params": cur["params"]}
                              for saved, cur in zip(sd["param_groups"], native["param_groups"])]
    return native


def load_optim_in_place(optimizer: torch.optim.Optimizer, sd: dict) -> bool:
    """Load `sd` into `optimizer` when its state is the live state (loaded in place): what is left is the
    checkpoint's hyperparameters, around the live state. True when done; False: the caller takes torch's
    name-resolving path. The caller checks the param groups' count first.

    Torch's `Optimizer.load_state_dict`, given the optimizer's own state dict, builds new param groups (a
    deep copy of the saved ones with the live `params` lists), new per-parameter state dicts holding the
    same tensors (its casts to the parameter's dtype and device return the tensor itself when it already
    is), and hands both to `__setstate__`; its packing and unpacking (~1.6 ms for gpt2's 148 parameters)
    resolve nothing here. `_plain_groups` / `_kept_state` build the very same two objects directly when
    nothing can differ (no load hooks, torch's own `load_state_dict` and `__setstate__`, the hyperparameters
    plain values, no tensor cast, the same fused / capturable / differentiable / foreach); `__setstate__` runs
    as in torch's. Anything else: torch's `load_state_dict` itself."""
    if not same_state(optimizer, sd):
        return False
    groups = _plain_groups(optimizer, sd["param_groups"])
    state = _kept_state(optimizer, groups) if groups is not None else None
    if state is None:
        optimizer.load_state_dict(native_optim_state(optimizer, sd))
    else:
        optimizer.__setstate__({"state": state, "param_groups": groups})
    return True


_ATOMS = (float, int, bool, str, type(None))
_FLAGS = ("fused", "capturable", "differentiable", "foreach")


def _atom(v) -> bool:
    """A value deepcopy returns as itself: a plain scalar, or a tuple of them (Adam's betas)."""
    return type(v) in _ATOMS or (type(v) is tuple and all(type(x) in _ATOMS for x in v))


def _plain_groups(optimizer, saved: list) -> list | None:
    """The param groups torch's load would build from the checkpoint's `saved` ones ({**saved, "params":
    the live list}, deep-copied: plain values are their own copies), or None where it may differ."""
    cls = type(optimizer)
    if (optimizer._optimizer_load_state_dict_pre_hooks or optimizer._optimizer_load_state_dict_post_hooks
            or cls.load_state_dict is not torch.optim.Optimizer.load_state_dict
            or not getattr(cls.__setstate__, "__module__", "").startswith("torch.optim.")):
        return None
    groups = []
    for live, g in zip(optimizer.param_groups, saved):
        if (any(k != "params" and not _atom(v) for k, v in g.items())
                or any(g.get(f, False) != live.get(f, False) for f in _FLAGS)):
            return None
        new = {**g, "params": live["params"]}
        if "param_names" in live and "param_names" not in new:
            new["param_names"] = live["param_names"]
        groups.append(new)
    return groups


def _kept_state(optimizer, groups: list) -> dict | None:
    """The optimizer state torch's load would build: a new dict per parameter holding the same tensors,
    when each of torch's casts keeps its tensor (`_process_value_according_to_param_policy`: `step` as it
    is, or float32 on the parameter's device under fused / capturable; the rest the parameter's dtype,
    if floating, and device); else None."""
    cast_step = {id(p) for g in groups if g.get("fused") or g.get("capturable") for p in g["params"]}
    params = {id(p) for g in groups for p in g["params"]}
    state = defaultdict(dict)
    for p, per_param in optimizer.state.items():
        if id(p) not in params:  # (torch's state_dict() fails on a state of no group's parameter)
            return None
        floating, device = p.is_floating_point(), p.device
        for k, v in per_param.items():
            if k == "step":
                if id(p) in cast_step and (v.dtype is not torch.float32 or v.device != device):
                    return None
            elif (floating and v.dtype is not p.dtype) or v.device != device:
                return None
        state[p] = dict(per_param)
    return state
