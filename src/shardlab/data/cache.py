"""The on-disk cache of encoded corpora and trained tokenizers: where it is, and how a file gets there whole."""
import os
import tempfile
from pathlib import Path

import numpy as np


def cache_dir() -> Path:
    """Where encoded corpora are cached: $SHARDLAB_CACHE, else ~/.cache/shardlab."""
    return Path(os.environ.get("SHARDLAB_CACHE") or Path.home() / ".cache" / "shardlab")


def write_atomic(path: Path, tokens: np.ndarray) -> None:
    """Write to a temp file in the same folder, then rename: a reader (another rank starting at the
    same moment) sees either no cache or a complete one, never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(tokens.tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
