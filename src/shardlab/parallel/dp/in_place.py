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

import torch
import torch.nn as nn


def where(t: torch.Tensor) -> tuple:
    return t.data_ptr(), t.dtype, tuple(t.shape), t.stride()


def walk(module: nn.Module) -> tuple[list, list, bool, bool]:
    """`module.parameters()` and `module.buffers()` (the same tensors in the same order), and whether every
    module saves and loads as nn.Module does (no `_save_to_state_dict` / `get_extra_state` /
    `_load_from_state_dict` of its own, no state-dict or load hooks), in one pass over the modules: each
    of those walks them again, and the walks were most of a per-load check's cost."""
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
    ps, bs, _, plain_load = walk(module)
    params = {where(p) for p in ps}  # a parameter's memory is its detached view's
    live = params | {where(b) for b in bs}
    given = {where(v) for v in sd.values()}
    return given <= live and params <= given and plain_load


def _tensors(state: dict) -> list | None:
    """The tensors of an optimizer state ({key: {name: value}}), or None when a value is not a plain tensor."""
    out = []
    for per_param in state.values():
        if not isinstance(per_param, dict):
            return None
        for v in per_param.values():
            if type(v) is not torch.Tensor:
                return None
            out.append(v)
    return out


def native_optim_state(optimizer: torch.optim.Optimizer, sd: dict) -> dict | None:
    """The optimizer's own state dict (torch's format, by parameter index) carrying `sd`'s hyperparameters,
    when `sd["state"]`'s tensors are exactly the live state's, one for one (loaded in place); else None.
    The caller checks the param groups' count first."""
    given, live = _tensors(sd.get("state", {})), _tensors(optimizer.state)
    if given is None or live is None or len(given) != len(live):
        return None
    ids = {id(v) for v in live}
    # The handed-out state dict holds the live tensor objects themselves (a read copies into them): one for
    # one by identity, which is what equal memory says, at a set of ids' cost. Else compare the memory.
    if len(ids) != len(live) or {id(v) for v in given} != ids:
        places = {where(v) for v in live}
        if len(places) != len(live) or {where(v) for v in given} != places:
            return None
    native = optimizer.state_dict()
    native["param_groups"] = [{**saved, "params": cur["params"]}
                              for saved, cur in zip(sd["param_groups"], native["param_groups"])]
    return native

