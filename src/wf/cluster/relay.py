"""A real node's way to the cluster's services on the host: TCP listeners inside the node's own network namespace,
each forwarding to a port on the host's 127.0.0.1.

Pods on a real node live in network namespaces of their own behind a bridge in the node's namespace, which has
no route out (wf.cluster.realnode), so the API server and the artifact store on 127.0.0.1 are out of their reach.
No kube-proxy and no iptables run here; instead the node's namespace holds the Services' cluster IPs on its
loopback device, and this process listens there (the `kubernetes` Service's 10.0.0.1:443, which the kubelet puts
in every pod's KUBERNETES_SERVICE_HOST/PORT, and the artifact store's) and copies bytes both ways to the host's
listener. A socket belongs to the network namespace its thread was in when it was made: the listeners are made
after setns(2) into the node's, the connections to the host after switching back, so one process serves both
sides and nothing listens anywhere but in the node's namespace. TLS passes through untouched: pods check the API
server's own certificate, which names 10.96.0.1 (wf.cluster.supervise).

Run by wf.cluster.realnode: python -m wf.cluster.relay --netns /run/netns/wf-ID --ready FILE --forward IP:PORT=PORT
(repeated); FILE is written once every listener is bound.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from wf.cluster.processes import LOOPBACK

log = logging.getLogger("wf.relay")

_CLONE_NEWNET = 0x40000000  # linux/sched.h
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Forward:
    """Listen on `address:port` in the node's namespace; forward to 127.0.0.1:`target` on the host."""

    address: str
    port: int
    target: int

    def argument(self) -> str:
        return f"{self.address}:{self.port}={self.target}"

    @classmethod
    def parse(cls, text: str) -> Forward:
        listen, _, target = text.partition("=")
        address, _, port = listen.rpartition(":")
        if not address or not port.isdigit() or not target.isdigit():
            raise argparse.ArgumentTypeError(f"{text!r}: expected IP:PORT=TARGET_PORT")
        return cls(address, int(port), int(target))


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def listen_in(netns: str, forwards: Sequence[Forward]) -> list[socket.socket]:
    """Listening sockets for `forwards`, made inside the network namespace at path `netns`; the calling thread is
    back in its own namespace when this returns."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    sockets: list[socket.socket] = []
    try:
        _setns(target)
        try:
            for forward in forwards:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((forward.address, forward.port))
                sock.listen(128)
                sock.setblocking(False)
                sockets.append(sock)
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)
    return sockets


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


def _relay_to(target: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(LOOPBACK, target)
        except OSError as exc:
            log.warning("connecting to %s:%d: %s", LOOPBACK, target, exc)
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        upstream_writer.close()
        writer.close()

    return relay


async def _serve(sockets: Sequence[socket.socket], forwards: Sequence[Forward]) -> None:
    servers = []
    for sock, forward in zip(sockets, forwards, strict=True):
        servers.append(await asyncio.start_server(_relay_to(forward.target), sock=sock))
        log.info("relaying %s:%d to %s:%d", forward.address, forward.port, LOOPBACK, forward.target)
    await asyncio.gather(*(server.serve_forever() for server in servers))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m wf.cluster.relay", description=__doc__.splitlines()[0])
    parser.add_argument("--netns", required=True, help="the node's network namespace (a path under /run/netns)")
    parser.add_argument("--ready", type=Path, required=True, help="written once every listener is bound")
    parser.add_argument("--forward", type=Forward.parse, action="append", required=True,
                        help="IP:PORT=TARGET_PORT, repeated")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sockets = listen_in(args.netns, args.forward)
    args.ready.write_text("listening\n")
    asyncio.run(_serve(sockets, args.forward))


if __name__ == "__main__":
    main()
