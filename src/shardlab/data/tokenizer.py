"""Byte-level tokenizer: a token is one UTF-8 byte, so the vocabulary is exactly 256.

No training, no merges, no unknown tokens: any text (and any file) round-trips.
"""
import numpy as np

VOCAB_SIZE = 256


def encode(text: str) -> np.ndarray:
    """UTF-8 bytes of `text` as a 1-D uint16 array (uint16 to match the on-disk token format)."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)


def decode(ids) -> str:
    """Token ids (list, numpy array or CPU/GPU tensor) back to text; invalid UTF-8 becomes U+FFFD."""
    if hasattr(ids, "detach"):  # a torch tensor, without importing torch here
        ids = ids.detach().cpu().numpy()
    ids = np.asarray(ids).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= VOCAB_SIZE):
        raise ValueError(f"token id out of range 0..{VOCAB_SIZE - 1}: got {ids.min()}..{ids.max()}")
    return ids.astype(np.uint8).tobytes().decode("utf-8", errors="replace")
