"""Two "hosts" with network stacks of their own: two network namespaces joined by a veth pair, each end with a
private address. Created and removed by the caller (root only).

    with TwoHosts() as hosts:        # Unavailable (the reason) when it cannot be made here
        hosts.exec(0, [...])         # the command prefixed with `ip netns exec NS0`
        hosts.addr[1], hosts.iface[1]
"""
from __future__ import annotations

import os
import shutil
import subprocess


class Unavailable(Exception):
    pass


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise Unavailable(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")


class TwoHosts:
    def __init__(self, subnet: str = "10.77.0"):
        tag = f"{os.getpid() % 100000}"
        self.ns = [f"shl{tag}a", f"shl{tag}b"]
        self.iface = [f"shl{tag}va", f"shl{tag}vb"]  # (interface names: at most 15 characters)
        self.addr = [f"{subnet}.1", f"{subnet}.2"]

    def __enter__(self) -> "TwoHosts":
        if os.geteuid() != 0:
            raise Unavailable("network namespaces need root")
        if shutil.which("ip") is None:
            raise Unavailable("no `ip` command (iproute2)")
        try:
            for ns in self.ns:
                _ip("netns", "add", ns)
            _ip("link", "add", self.iface[0], "type", "veth", "peer", "name", self.iface[1])
            for ns, iface, addr in zip(self.ns, self.iface, self.addr):
                _ip("link", "set", iface, "netns", ns)
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", iface)
                _ip("-n", ns, "link", "set", iface, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def exec(self, host: int, cmd: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns[host], *cmd]

    def __exit__(self, *exc) -> None:
        for ns in self.ns:  # deleting a namespace deletes the veth end in it, and with it the pair
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
