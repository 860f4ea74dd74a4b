"""`train.tracker`'s names and the packages they need: parsed and checked at config validation, before any rank
starts (a tracker whose package is missing is one line, exit 2). Torch-free and importing none of the packages;
the trackers themselves are train/trackers.py, which reads its names from here."""
from __future__ import annotations

import importlib.util

from shardlab.errors import ConfigError

# name -> (the module it needs, the pip package that provides it)
PACKAGES = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow-skinny"),
            "wandb": ("wandb", "wandb")}
NAMES = tuple(PACKAGES)


def parse(spec: str) -> list[str]:
    """`train.tracker`'s value -> the tracker names, in order; ConfigError on an unknown one."""
    names = [n.strip() for n in spec.split(",") if n.strip() and n.strip() != "none"]
    for n in names:
        if n not in PACKAGES:
            raise ConfigError(f"train.tracker={spec}: unknown tracker {n!r}; choose from none, {', '.join(NAMES)} "
                              "(several comma-separated, e.g. tensorboard,mlflow)")
    if len(set(names)) != len(names):
        raise ConfigError(f"train.tracker={spec} names a tracker twice; name each once")
    return names


def check(spec: str) -> list[str]:
    """The names, after checking each one's package is importable (cheap: nothing is imported)."""
    names = parse(spec)
    for n in names:
        module, package = PACKAGES[n]
        if not installed(module):
            raise ConfigError(f"train.tracker={n} needs the {package} package, which is not installed: "
                              f"pip install 'shardlab[track]' (or pip install {package}), or drop {n} from "
                              "train.tracker")
    return names


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


