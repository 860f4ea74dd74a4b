"""The fault-tolerant exchange: messages through a key-value store (parallel/ft/periodic.py).

Fault tolerance's own transport, beside quorum.py: these are not collectives of a process group, but they are
recorded like them (through comm_record, as comm records its collectives)."""
from __future__ import annotations

import torch.distributed as dist

from shardlab.comm_record import RECORDER, SKIP_FILES

SKIP_FILES.add(__file__)  # a store record's stack starts at its caller

# Replicas that may die cannot share a process group (a collective with a dead member errors or hangs), so
# their outer step goes through a torch.distributed.TCPStore that outlives any of them. Recorded like a
# point-to-point message on the pseudo-group "store": bytes = wire bytes = the value (each direction crosses
# the network through the store's host). Control values (membership, join requests) count 0 bytes, as
# all_gather_object does.
_STORE = ("store", ())


def connect_store(address: str, timeout_s: float):
    """A client of the TCPStore at HOST:PORT (`shardlab lighthouse` hosts one)."""
    import datetime
    host, port = address.rsplit(":", 1)
    return dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=timeout_s),
                         wait_for_workers=False)


def host_store(host: str, port: int):
    """Host a TCPStore (the lighthouse's side); port 0 picks a free one (`.port` says which)."""
    import datetime
    return dist.TCPStore(host, port, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=60))


def store_check(store, key: str) -> bool:
    """Whether `key` exists. Not recorded: no payload, and polling would fill the flight recorder."""
    return store.check([key])


# A value no writer stores: `store_peek`'s compare never matches it
_NEVER = "\x00shardlab: no such value"


def store_peek(store, key: str) -> bytes | None:
    """The value of `key`, or None when it is absent, without waiting: for a key its owner may delete between
    another process's `check` and its `get` (a `get` of a deleted key waits the store's whole timeout). A
    compare-and-set that never matches: TCPStore answers it with the key's value, or with the expected value
    when the key is absent, and changes nothing. Not recorded: polled, like `store_check`."""
    value = store.compare_set(key, _NEVER, _NEVER)
    return None if value == _NEVER.encode() else value


def store_delete(store, key: str) -> None:
    store.delete_key(key)


def store_set(store, key: str, value: bytes, tag: str = "control") -> None:
    n = 0 if tag == "control" else len(value)
    rec = RECORDER.add("store_set", n, n, "uint8", (len(value),), _STORE, tag)
    store.set(key, value)
    RECORDER.done(rec)


def store_get(store, key: str, tag: str = "control") -> bytes:
    """The value of `key`. Recorded once it arrived (its size is known then); callers ask only for keys that
    exist (`store.check`) and that nobody deletes, so the call does not wait (else: `store_peek`)."""
    value = store.get(key)
    n = 0 if tag == "control" else len(value)
    RECORDER.done(RECORDER.add("store_get", n, n, "uint8", (len(value),), _STORE, tag))
    return value


def store_compare_set(store, key: str, expected: str, desired: str) -> str:
    """Atomic: set `key` to `desired` if it holds `expected` ("" = absent); returns what it holds after."""
    rec = RECORDER.add("store_compare_set", 0, 0, "uint8", (), _STORE, "control")
    value = store.compare_set(key, expected, desired)
    RECORDER.done(rec)
    return value.decode()
