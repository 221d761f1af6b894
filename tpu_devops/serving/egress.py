"""Which URLs the serving tools may dial, checked on the URL and again when a connection opens.

A ``base_url`` argument (or ``VLLM_URL``, or a discovered node) is a request this server makes on the
caller's behalf, from wherever the server runs, possibly a VM whose metadata server hands out its
service account's tokens. So, for every serving request whatever its source:

- the URL must be plain ``http(s)://host[:port][/path]``: no userinfo (``http://a:b@host``, or the
  parser-confusion form ``http://127.0.0.1:8000@169.254.169.254/``), query, fragment, backslash,
  whitespace or control character;
- metadata servers and link-local addresses are refused: the names in `BLOCKED_NAMES`
  (``metadata.google.internal``: Compute Engine "About VM metadata"), IPv4 ``169.254.0.0/16`` and IPv6
  ``fe80::/10`` (link-local, RFC 3927 / RFC 4291), ``fd00:ec2::254`` (the EC2 instance metadata
  service's IPv6 address) and ``100.100.100.200`` (Alibaba Cloud's metadata server); every spelling
  that lands there counts: decimal, hex, octal or short IPv4 forms (``2852039166``, ``0xa9fea9fe``,
  ``0251.0376.0251.0376``, ``169.254.43518``), IPv4-mapped / -compatible / 6to4 / NAT64 IPv6 forms, and
  DNS names that resolve to one of them.

What an endpoint may receive depends on whose it is. An *owned* endpoint (``VLLM_URL``, this rig's
discovered node, a ``base_url`` that is one of them, a GKE deployment of ours: `mark_owned`) receives
prompts, log evidence, benchmark load and the API key. Any other host is one an argument named: a
prompt-injected model can name any, so it gets probes only, requests without a body or a key (``GET
/health``, ``/v1/models``, ``/metrics``, ``/version``). `refuse_unowned` is the refusal a tool gives
before it sends anything; `PinnedTransport` refuses again per request (a request with a body or an
``Authorization`` header to an origin not owned), so no call site can forget the rule. Owned means the
same scheme, host and port as written: ``localhost`` is not ``127.0.0.1``, ``0.0.0.0``, ``[::1]``, a
decimal or hex spelling of the address, or a name with a trailing dot; such an alias is treated as
another host (set ``VLLM_URL`` to it to use it).

`check_url` refuses such a URL before anything is sent, with the field named. `GuardedBackend` checks
again when httpcore opens a connection: it resolves the host once, refuses if any address is blocked,
and connects to a checked address, so a DNS answer that changes between check and connect (rebinding)
gains nothing. `PinnedTransport` refuses any request through an endpoint's client to another origin,
so the rig's key cannot follow a redirect even if one were followed.

`use_resolver` swaps the name resolver (tests: names that resolve to link-local without real DNS).
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from tpu_devops.errors import InputError

if TYPE_CHECKING:
    import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]

BLOCKED_NAMES = frozenset(
    {
        "metadata.google.internal",  # Compute Engine / GKE metadata server
        "metadata",  # the short name Compute Engine VMs resolve too
        "metadata.goog",
        "instance-data",  # EC2
        "instance-data.ec2.internal",
    }
)
BLOCKED_ADDRESSES = (
    ipaddress.ip_network("169.254.0.0/16"),  # IPv4 link-local: 169.254.169.254 is every major cloud's
    ipaddress.ip_network("fe80::/10"),  # IPv6 link-local
    ipaddress.ip_network("fd00:ec2::254/128"),  # EC2 instance metadata over IPv6
    ipaddress.ip_network("100.100.100.200/32"),  # Alibaba Cloud metadata server
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NUMERIC_HOST = re.compile(r"^(?:0x[0-9a-f]+|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}$", re.I)
_FORBIDDEN_CHARS = re.compile(r"[\s\\\x00-\x1f\x7f]")


class RefusedTarget(Exception):  # noqa: N818 - a refusal, raised inside httpcore's connect path
    """A connection to a blocked address was refused (raised at connect time; never an httpcore error,
    so httpx does not relabel it as a connection failure)."""

    def __init__(self, host: str, reason: str, fix: str | None = None) -> None:
        super().__init__(f"{host}: {reason}")
        self.host = host
        self.reason = reason
        self.fix = fix


async def _system_resolver(host: str, port: int) -> list[str]:
    import anyio

    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]).split("%", 1)[0] for info in infos]


_resolver: Resolver = _system_resolver


@contextlib.contextmanager
def use_resolver(resolver: Resolver) -> Iterator[None]:
    """Resolve host names with ``resolver(host, port) -> [ip, ...]`` inside the block (tests)."""
    global _resolver
    previous, _resolver = _resolver, resolver
    try:
        yield
    finally:
        _resolver = previous


def literal_address(host: str) -> IPAddress | None:
    """The address a host written as an IP literal means, in any spelling ``inet_aton`` accepts
    (``2852039166``, ``0xa9fea9fe``, ``0251.0376.0251.0376``, ``169.254.43518``), or None for a name."""
    bare = host.strip("[]")
    try:
        return ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        pass
    if _NUMERIC_HOST.match(bare):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def _embedded(ip: IPAddress) -> list[IPAddress]:
    """The address plus every IPv4 address an IPv6 form carries (mapped, compatible, 6to4, NAT64)."""
    out: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped:
            out.append(ip.ipv4_mapped)
        if ip.sixtofour:
            out.append(ip.sixtofour)
        if ip in _NAT64 or 1 < int(ip) < 2**32:  # NAT64 64:ff9b::a.b.c.d, deprecated ::a.b.c.d
            out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return out


def blocked_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` may not be dialled (a metadata server or a link-local address), or None."""
    for candidate in _embedded(ip):
        for net in BLOCKED_ADDRESSES:
            if candidate.version == net.version and candidate in net:
                what = "a link-local address" if candidate.is_link_local else "a cloud metadata server"
                shown = "" if candidate == ip else f" (it is {candidate})"
                return f"{ip} is {what}{shown}: serving requests never go there"
    return None


def _name_blocked(host: str) -> str | None:
    name = host.lower().rstrip(".")
    if name in BLOCKED_NAMES or name.endswith(".metadata.google.internal"):
        return f"{host} is a cloud metadata server: serving requests never go there"
    return None


def parse(url: str, field: str) -> httpx.URL:
    """Parse ``url`` as a plain ``http(s)://host[:port][/path]`` base URL (no query, fragment, userinfo).

    Raises:
        InputError: naming ``field``, the value and the fix.
    """
    import httpx

    fix = "pass the server's own address, e.g. http://10.0.0.5:8000 (credentials never go in the URL)"
    text = url.strip()
    if not text or _FORBIDDEN_CHARS.search(text):
        raise InputError("not a plain http(s) URL (empty, or whitespace / backslash / control characters)",
                         field=field, value=url, fix=fix)  # fmt: skip
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, ValueError) as exc:
        raise InputError(f"not a valid URL ({exc})", field=field, value=url, fix=fix) from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InputError("not an http(s) URL with a host", field=field, value=url, fix=fix)
    if parsed.userinfo or "@" in text.split("//", 1)[-1].split("/", 1)[0]:
        raise InputError("a URL with a user name or password (user@host) is refused", field=field,
                         value=_without_userinfo(text), fix=fix)  # fmt: skip
    if parsed.query or parsed.fragment or "?" in text or "#" in text:
        raise InputError("a base URL takes no query or fragment", field=field, value=url, fix=fix)
    return parsed


def _without_userinfo(text: str) -> str:
    scheme, _, rest = text.partition("//")
    netloc, slash, path = rest.partition("/")
    return f"{scheme}//<userinfo removed>@{netloc.rsplit('@', 1)[-1]}{slash}{path}"


async def check_url(url: str, field: str) -> httpx.URL:
    """`parse` ``url``, then refuse it when its host is, spells or resolves to a blocked address.

    A name that does not resolve passes here (the request then fails as ``unresolvable_host``).

    Raises:
        InputError: a malformed URL or a blocked host, naming ``field``.
    """
    parsed = parse(url, field)
    host = parsed.host
    reason = _name_blocked(host)
    ip = literal_address(host)
    if reason is None and ip is not None:
        reason = blocked_reason(ip)
    if reason is None and ip is None:
        try:
            addresses = await _resolver(host, parsed.port or (443 if parsed.scheme == "https" else 80))
        except OSError:
            addresses = []
        reason = next((r for a in addresses if (r := _address_reason(a))), None)
        if reason:
            reason = f"{host} resolves to {reason}"
    if reason:
        raise InputError(reason, field=field, value=url,
                         fix="point it at the vLLM server itself (its node's IP, a tunnel on 127.0.0.1, or VLLM_URL)")  # fmt: skip
    return parsed


def _address_reason(address: str) -> str | None:
    try:
        return blocked_reason(ipaddress.ip_address(address))
    except ValueError:
        return None


async def checked_addresses(host: str, port: int) -> list[str]:
    """The addresses to connect to for ``host``: resolved once and every one checked.

    Raises:
        RefusedTarget: the name, or any address it resolves to, is blocked (fail closed: one bad
            answer refuses the host).
        OSError: the name does not resolve (socket.gaierror).
    """
    if reason := _name_blocked(host):
        raise RefusedTarget(host, reason)
    ip = literal_address(host)
    addresses = [str(ip)] if ip is not None else await _resolver(host, port)
    for address in addresses:
        if reason := _address_reason(address):
            raise RefusedTarget(host, reason)
    if not addresses:
        raise socket.gaierror(socket.EAI_NONAME, f"{host} has no address")
    return addresses


# ---- what an endpoint may receive ------------------------------------------------------------------

# origin -> why it is owned ("VLLM_URL", "discovery", "argument", "deployment"); a discovery replaces the
# node it found before (a recreated node has a new address).
_owned: dict[tuple[str, str, int], str] = {}
BODY_FREE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
UNOWNED_FIX = (
    "leave base_url out to use this rig's endpoint; to use that server, the operator sets VLLM_URL to it "
    "(tpu.env or the MCP server's environment)"
)


def _origin(url: Any) -> tuple[str, str, int]:
    import httpx

    u = url if isinstance(url, httpx.URL) else httpx.URL(str(url))
    return u.scheme, u.host.lower(), u.port or (443 if u.scheme == "https" else 80)


def mark_owned(url: str, why: str) -> None:
    """Record ``url``'s origin as one of ours (see the module docstring); ``why`` is its source."""
    if why == "discovery":
        for origin in [o for o, w in _owned.items() if w == "discovery"]:
            del _owned[origin]
    _owned.setdefault(_origin(url), why)


def forget_owned() -> None:
    """Forget every origin `mark_owned` recorded (tests; a settings reload)."""
    _owned.clear()


def is_owned(url: Any) -> bool:
    """True when ``url``'s origin was marked as ours (`mark_owned`)."""
    try:
        return _origin(url) in _owned
    except Exception:  # an unparsable URL is never ours
        return False


def refuse_unowned(url: str, rig: str | None, sends: str) -> InputError:
    """The refusal for a call that would send ``sends`` (the prompt, log evidence, benchmark load) to a
    ``base_url`` that is not this rig's endpoint (``rig``, or none known)."""
    ours = f"this rig's endpoint ({rig})" if rig else "this rig's endpoint (VLLM_URL, or the discovered node)"
    return InputError(
        f"{sends} go only to {ours} or the one the operator configured (VLLM_URL); base_url {url} is neither, "
        "and a host a tool argument names gets probes only (health, models, metrics), never a prompt, log "
        "evidence, load or the API key",
        field="base_url",
        value=url,
        fix=UNOWNED_FIX,
    )


def _carries_ours(request: Any) -> bool:
    """True for a request with a body or an Authorization header (a prompt, evidence, load, the key)."""
    if request.method.upper() not in BODY_FREE_METHODS:
        return True
    if "authorization" in request.headers:
        return True
    length = request.headers.get("content-length")
    return bool(length and length != "0")


def guarded_backend() -> Any:
    """An httpcore network backend that connects only to checked addresses (see the module docstring)."""
    import httpcore

    class GuardedBackend(httpcore.AsyncNetworkBackend):
        def __init__(self) -> None:
            self._inner = httpcore.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Any = None,
        ) -> Any:
            try:
                addresses = await checked_addresses(host, port)
            except OSError as exc:
                raise httpcore.ConnectError(str(exc)) from exc
            last: Exception | None = None
            for address in addresses:
                try:
                    return await self._inner.connect_tcp(
                        address,
                        port,
                        timeout=timeout,
                        local_address=local_address,
                        socket_options=socket_options,
                    )
                except httpcore.ConnectError as exc:
                    last = exc
            assert last is not None
            raise last

        async def connect_unix_socket(
            self, path: str, timeout: float | None = None, socket_options: Any = None
        ) -> Any:
            raise RefusedTarget(path, "unix sockets are not serving endpoints")

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    return GuardedBackend()


def pinned_transport(origin: httpx.URL, limits: httpx.Limits) -> httpx.AsyncBaseTransport:
    """An httpx transport for one endpoint: connections through `guarded_backend`, requests only to
    ``origin`` (scheme, host, port); anything else raises `RefusedTarget`."""
    import httpcore
    import httpx

    inner = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
    # httpx builds its httpcore pool without a network backend argument; this one carries the guard.
    inner._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=guarded_backend(),
    )
    key = (origin.scheme, origin.host, origin.port)

    class PinnedTransport(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            url = request.url
            if (url.scheme, url.host, url.port) != key:
                raise RefusedTarget(url.host, f"not this endpoint ({origin}): requests never leave it")
            if _carries_ours(request) and not is_owned(url):
                raise RefusedTarget(
                    url.host,
                    f"{origin} is not this rig's endpoint or VLLM_URL: it gets probes only, no request body "
                    "and no API key",
                    UNOWNED_FIX,
                )
            return await inner.handle_async_request(request)

        async def aclose(self) -> None:
            await inner.aclose()

    return PinnedTransport()
