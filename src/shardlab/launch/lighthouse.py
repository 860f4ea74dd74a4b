"""`shardlab lighthouse`: host the TCPStore the replicas of a fault-tolerant job meet at (docs/sync.md)."""
from __future__ import annotations

import sys
import time

from shardlab.parallel.ft.store import host_store
from shardlab.errors import OneLineParser


def main(argv: list[str]) -> int:
    """`shardlab lighthouse [--port P] [--host H]`: host the store a fault-tolerant job's replicas meet at."""
    p = OneLineParser(prog="shardlab lighthouse", description="Host the TCPStore the replicas of a fault-tolerant "
                       "job (parallel.fault_tolerant=true) meet at; runs until stopped (docs/sync.md).")
    p.add_argument("--port", type=int, default=29510, help="TCP port (0 = any free one, printed)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on")
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    if not 0 <= args.port < 65536:
        print(f"shardlab lighthouse: error: --port {args.port}: must be in 0..65535", file=sys.stderr)
        return 2
    try:
        serve(args.port, args.host)
    except KeyboardInterrupt:
        return 0
    except Exception as e:  # noqa: BLE001 - the port is taken, the address is not this machine's, ...
        print(f"shardlab lighthouse: error: cannot host a store at {args.host}:{args.port} ({type(e).__name__}); "
              "choose another --port (0 = any free one)", file=sys.stderr)
        return 2
    return 0


def serve(port: int, host: str = "0.0.0.0") -> None:
    """`shardlab lighthouse`: host the store the replicas of a fault-tolerant job meet at, until stopped."""
    store = host_store(host, port)
    print(f"[shardlab lighthouse] store at {host}:{store.port}; replicas use parallel.ft_store=HOST:{store.port}",
          flush=True)
    while True:
        time.sleep(3600)
