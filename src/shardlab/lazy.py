"""A package's public names, imported from their modules on first use (PEP 562).

Config validation and the launcher read packages (`model`, `checkpoint`, `doctor`) whose modules load
torch; importing torch costs seconds on every launch, so these packages name where each public name lives
and load the module only when the name is asked for:

    __getattr__ = lazy_names(__name__, {"Doctor": "core", ...})   # shardlab.doctor.Doctor -> doctor/core.py
"""
from __future__ import annotations

import importlib


def lazy_names(package: str, where: dict[str, str]):
    """A module-level `__getattr__` for `package`: name -> getattr(package.where[name], name)."""
    def __getattr__(name):
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__
