"""The host's network interfaces: which exist, and the IPv4 address of one (what gloo and NCCL bind to when
GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME name it)."""
from __future__ import annotations

import fcntl
import socket
import struct

_SIOCGIFADDR = 0x8915  # linux/sockios.h


def names() -> list[str]:
    return [name for _, name in socket.if_nameindex()]


def ipv4(iface: str) -> str | None:
    """The interface's IPv4 address, or None when it has none (down, or IPv6 only)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", iface.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])
