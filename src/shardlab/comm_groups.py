"""Who this rank is, and the names and members of its process groups (re-exported by comm.py, the one door).

A record's `group` is the name its process group has here: "world" for the default group, the mesh dimension
for a DeviceMesh group (torch describes those as `mesh_<dim>`), or what the caller registered with
`name_group(pg, name)`; `group_info` gives (name, members' global ranks), cached per group. See comm.py's
docstring for how records use them, and for group-local against global ranks.
"""
from __future__ import annotations

import weakref

import torch.distributed as dist


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank(group=None) -> int:
    return dist.get_rank(group) if is_initialized() else 0


def world_size(group=None) -> int:
    return dist.get_world_size(group) if is_initialized() else 1


# pg -> readable name; pg -> (name, members). Weak keys: a group that is destroyed takes its entry along.
_NAMES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_INFO: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def name_group(group, name: str) -> None:
    """Give a process group the name its records carry (a mesh dimension: "dp_shard", "tp", "pp").
    Name it before its first collective: the sequence numbers count per (name, members). The default
    group stays "world" (a mesh dimension that spans the world is the default group on gloo)."""
    if group is None or not is_initialized() or group is dist.GroupMember.WORLD:
        return
    _NAMES[group] = name
    _INFO.pop(group, None)


def _derive_name(group) -> str:
    if group in _NAMES:
        return _NAMES[group]
    desc = getattr(group, "group_desc", "") or ""
    if desc == "default_pg":
        return "world"
    if desc.startswith("mesh_"):  # DeviceMesh names its groups mesh_<dim>
        return desc[len("mesh_"):]
    return f"group{getattr(group, 'group_name', '')}"  # an unnamed new_group(): torch's id for it


def group_info(group) -> tuple[str, tuple[int, ...]]:
    """(name, member global ranks) of a process group; None is the default group ("world")."""
    if not is_initialized():
        return "world", (0,)
    if group is None:
        group = dist.GroupMember.WORLD
    info = _INFO.get(group)  # cached: every record asks
    if info is None and group is dist.GroupMember.WORLD:
        info = _INFO[group] = ("world", tuple(range(dist.get_world_size())))
    if info is None:
        info = _INFO[group] = (_derive_name(group), tuple(dist.get_process_group_ranks(group)))
    return info


def global_rank(group, group_rank: int) -> int:
    """The global rank of position `group_rank` in `group`."""
    if group is None or not is_initialized():
        return group_rank
    return dist.get_global_rank(group, group_rank)


def group_rank(group, global_rank: int) -> int:
    """The position of global rank `global_rank` in `group`."""
    if group is None or not is_initialized():
        return global_rank
    return dist.get_group_rank(group, global_rank)


def new_group(ranks: list[int], name: str | None = None, backend: str | None = None):
    """A process group of `ranks` (every rank must call it, members or not); `name` for its records."""
    group = dist.new_group(ranks, backend=backend)
    if name is not None and group is not None and group != dist.GroupMember.NON_GROUP_MEMBER:
        name_group(group, name)
    return group
