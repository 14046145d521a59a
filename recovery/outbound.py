"""Outbound HTTP: the one check every URL Reckon calls out to passes, when it is configured and when
it is called.

Reckon calls receivers that an administrator configures: a tool's lookup, retry and compensation
(``recovery.adapters``), and webhook, Slack and PagerDuty channels (``notify``). A URL that reaches
the machine Reckon runs on, or its private network, would let whoever configures it (or an agent,
through a URL template's arguments) probe and call services that trust their network: the
database, Redis, Reckon's own API, a cloud's metadata service at 169.254.169.254. So a URL must be
http or https without credentials in it, and every address its host resolves to must be public:
none of loopback, link-local, private, multicast, unspecified or reserved (``ipaddress``'s
properties), and global. A host listed in ``RECKON_OUTBOUND_ALLOW`` (alone for every port, or as
``host:port``) is called whatever it resolves to: a receiver the operator runs nearby.

When a URL is configured (``url_check``), the rules apply to what its host resolves to then; a name
that does not resolve yet is accepted, since every call checks again. When it is called, the
connection classes here resolve the host, check every address, and connect to a checked address
itself, so a name that resolves elsewhere a moment later (DNS rebinding) cannot slip past the
check. http.client follows no redirect: a 3xx answer is an answer, never a second request.
"""

from __future__ import annotations

import http.client
import ipaddress
import os
import socket
import ssl
import urllib.parse

from django.conf import settings

SETTING = "RECKON_OUTBOUND_ALLOW"
_DEFAULT_PORTS = {"http": 80, "https": 443}


class OutboundRefused(ValueError):
    """A URL Reckon must not call; the message says which, and why."""


def _shown(url: str) -> str:
    """The URL as a message quotes it: without any credentials it carries."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="[credentials removed]@" + parts.netloc.rpartition("@")[2]))


def url_target(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``url``, or OutboundRefused when it is not http(s), carries
    credentials or names no host: what is checked of a URL before its host is resolved."""
    if not isinstance(url, str):
        raise OutboundRefused(f"{url!r} is not a URL")
    parts = urllib.parse.urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise OutboundRefused(f"{_shown(url)!r} is refused: only http:// and https:// URLs are called")
    if "@" in parts.netloc:
        raise OutboundRefused(f"{_shown(url)!r} is refused: a URL must not carry credentials (user:password@); give a secret in its own field")
    if "{" in parts.netloc or "}" in parts.netloc:
        raise OutboundRefused(f"{url!r} is refused: the host must be written out, not filled in from a call")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise OutboundRefused(f"{url!r} is refused: it names no host")
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        raise OutboundRefused(f"{url!r} is refused: its port is not a number from 0 to 65535") from None
    return scheme, host, port


def _allowed(host: str, port: int) -> bool:
    for entry in settings.RECKON_OUTBOUND_ALLOW:
        entry = entry.lower()
        if entry.startswith("["):
            name, _, rest = entry[1:].partition("]")
            entry_port = rest[1:] if rest.startswith(":") else ""
        else:
            name, _, entry_port = entry.partition(":")
        if name.rstrip(".") == host.lower() and (not entry_port or int(entry_port) == port):
            return True
    return False


def _problem(address: str) -> str | None:
    """Why an address must not be called (the first kind it is), or None for a public one."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) is no part of the address
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        ip = mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    for kind in ("unspecified", "loopback", "link_local", "multicast", "reserved", "private"):  # the narrowest first: most are private too
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    if not ip.is_global:
        return "non-public"
    return None


def _addresses(host: str, port: int) -> list[tuple]:
    """What ``host`` resolves to (getaddrinfo's entries, TCP), each checked unless the host is
    allowed; OutboundRefused naming the first refused address. socket.gaierror when it does not resolve."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not _allowed(host, port):
        for info in infos:
            address = info[4][0]
            kind = _problem(address)
            if kind is not None:
                shown = host if host == address else f"{host} ({address})"
                raise OutboundRefused(
                    f"{shown} port {port} is refused: {address} is a {kind} address, which Reckon does not call unless {SETTING} names the host"
                )
    return infos


def url_check(url: str) -> str:
    """``url`` as given if Reckon may call it; OutboundRefused saying why not (the rules above).

    For a URL being configured: a host that does not resolve now is accepted, and checked again at
    every call. A URL template's placeholders may stand in the path and query, never in the host."""
    _, host, port = url_target(url)
    try:
        _addresses(host, port)
    except OSError:  # not resolvable now (socket.gaierror): the call checks it again
        pass
    except OutboundRefused as exc:
        raise OutboundRefused(f"{_shown(url)!r}: {exc}") from None
    return url


def _connect(host: str, port: int, timeout, source_address) -> socket.socket:
    """A TCP connection to a checked address of ``host``: the address connected to is one that was
    checked, never a second resolution's."""
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in _addresses(host, port):
        try:
            sock = socket.create_connection(sockaddr[:2], timeout, source_address)
        except OSError as exc:
            error = exc
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client's own connect does
        return sock
    raise error or OSError(f"{host} resolves to no address")


class OutboundHTTPConnection(http.client.HTTPConnection):
    """http.client's connection, connecting only to a checked address (``connect`` is its
    documented point for opening the socket)."""

    def connect(self):
        self.sock = _connect(self.host, self.port, self.timeout, self.source_address)


class OutboundHTTPSConnection(http.client.HTTPSConnection):
    """The same for HTTPS: the certificate is verified against the URL's host name."""

    def __init__(self, host, port=None, *, timeout: float, context: ssl.SSLContext | None = None):
        self.tls = context or ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)

    def connect(self):
        sock = _connect(self.host, self.port, self.timeout, self.source_address)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


def outbound_allow(*hosts: str) -> None:
    """Add ``hosts`` (host or host:port) to RECKON_OUTBOUND_ALLOW for this process and the processes
    it starts: for a command that runs its own receivers on this machine (the demo's example ledger,
    the benchmarks' receivers), as an operator would name them."""
    listed = tuple(settings.RECKON_OUTBOUND_ALLOW)
    added = tuple(h for h in hosts if h not in listed)
    if added:
        settings.RECKON_OUTBOUND_ALLOW = listed + added
        os.environ[SETTING] = ",".join(settings.RECKON_OUTBOUND_ALLOW)


def connection(scheme: str, netloc: str, *, timeout: float) -> http.client.HTTPConnection:
    """A connection to ``netloc`` that checks where it connects (for ``scheme`` http or https)."""
    if scheme not in _DEFAULT_PORTS:
        raise OutboundRefused(f"{scheme}://{netloc} is refused: only http:// and https:// URLs are called")
    cls = OutboundHTTPSConnection if scheme == "https" else OutboundHTTPConnection
    return cls(netloc, timeout=timeout)


__all__ = ["OutboundRefused", "connection", "outbound_allow", "url_check", "url_target"]
