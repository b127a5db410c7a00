"""Several hosts on one machine for tests: a bridge in this network namespace (address <subnet>.1) and one network
namespace per host, joined to the bridge by a veth pair with the host's own address (ip netns + veth; needs root and
iproute2). A host is cut off from all the others by taking the bridge's end of its veth pair down."""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


class Hosts:
    def __init__(self, subnet: str, hosts: dict[str, int]) -> None:
        """`hosts`: name -> last octet of its address in `subnet` (a /24 given as its first three octets)."""
        tag = uuid.uuid4().hex[:5]
        self.subnet, self.octets = subnet, hosts
        self.bridge = f"efsbr{tag}"
        self.ns = {name: f"efs-{tag}-{name}" for name in hosts}
        self.veth = {name: (f"efs{tag}h{i}", f"efs{tag}n{i}") for i, name in enumerate(hosts)}  # (bridge end, host end)

    @property
    def bridge_addr(self) -> str:
        """The address of this namespace on the bridge (reachable from every host)."""
        return f"{self.subnet}.1"

    def addr(self, name: str) -> str:
        return f"{self.subnet}.{self.octets[name]}"

    def exec_prefix(self, name: str) -> list[str]:
        """Prepend to a command to run it on host `name`."""
        return ["ip", "netns", "exec", self.ns[name]]

    def up(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.bridge_addr}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for name, ns in self.ns.items():
            outer, inner = self.veth[name]
            ip("netns", "add", ns)
            ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            ip("link", "set", inner, "netns", ns)
            ip("link", "set", outer, "master", self.bridge)
            ip("link", "set", outer, "up")
            ip("-n", ns, "addr", "add", f"{self.addr(name)}/24", "dev", inner)
            ip("-n", ns, "link", "set", inner, "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def cut(self, name: str) -> None:
        """Partition host `name` from everything else (its packets go nowhere; it keeps running)."""
        ip("link", "set", self.veth[name][0], "down")

    def heal(self, name: str) -> None:
        ip("link", "set", self.veth[name][0], "up")

    def down(self) -> None:
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10, check=False)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10, check=False)


@contextmanager
def hosts_or_skip(subnet: str, hosts: dict[str, int]) -> Iterator[Hosts]:
    """The hosts, up; removed again on exit. Skips the test, saying why, where the machine can't create them."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (ip netns)")
    h = Hosts(subnet, hosts)
    try:
        h.up()
    except (subprocess.CalledProcessError, OSError) as e:
        h.down()
        pytest.skip(f"cannot create network namespaces here: {getattr(e, 'stderr', b'')!r}")
    try:
        yield h
    finally:
        h.down()
