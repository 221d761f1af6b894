"""Who can reach the rig's vLLM endpoint: its API key and its firewall rule, created with the TPU and
deleted with it, so nothing it opened outlives it (DESIGN §3 "Endpoint access").

Why: on the default VPC, tcp:8000 on a node's external IP is closed from the internet (the
``default-allow-internal`` rule admits only 10.128.0.0/9), so the endpoint times out from the user's
machine; and vLLM's API has no authentication unless it is given a key. So every rig gets:

- the API key in Secret Manager (`tpu_devops.provisioning.api_key`), fetched by the VM at boot and sent by this
  server only to this rig's endpoint;
- one Compute Engine firewall rule, named for the rig (`rule_name`: ``tpu-devops-<rig>``; rules carry
  no labels, so the name prefix plus the description's ``managed-by=tpu-devops rig=<rig>`` mark it as
  ours): ingress ``tcp:VLLM_PORT`` only, only from the allowed source ranges, only to instances with
  the rig's network tag (the same name, set as the node's ``tags`` by
  `tpu_devops.provisioning.requests.build_request`).

Allowed source ranges, in order: the ``allowed_source_ranges`` argument, ``ALLOWED_SOURCE_RANGES``,
else the caller's public IPv4 as a /32, detected when the create is planned by asking
``PUBLIC_IP_LOOKUP_URL`` (default ``https://api.ipify.org``; under a local fake, the fake's own
``/public-ip``) and shown for confirmation. Ranges that together admit a large part of the internet
(more public addresses than a /16, e.g. ``0.0.0.0/0`` or ``0.0.0.0/1`` + ``128.0.0.0/1``) need
``open_to_internet=true`` and come with a loud warning (`tpu_devops.config.exposure`, the GKE
LoadBalancer's rule too). With ``TPU_EXTERNAL_IP=0`` the node has no external address: no rule is made unless ranges
are given (clients inside the VPC, e.g. 10.0.0.0/8), and the endpoint is reached from inside the VPC
(``VLLM_URL``) or through an IAP tunnel (README).
"""

from __future__ import annotations

import hashlib
import ipaddress
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from tpu_devops.config import Settings, exposure, require_project, source_ranges_setting
from tpu_devops.errors import CloudError, ConfigError, NotFoundError, OwnershipError, TpuDevopsError

RULE_PREFIX = "tpu-devops-"
MARK = "managed-by=tpu-devops"
DEFAULT_LOOKUP_URL = "https://api.ipify.org"  # answers the caller's public IPv4 as plain text
LOOKUP_TIMEOUT_S = 5.0
_NAME_MAX = 63  # Compute resource names and network tags: RFC 1035, at most 63 characters


def rule_name(rig: str) -> str:
    """``tpu-devops-<rig>``, the rig's firewall rule and network tag (RFC 1035, <= 63 characters:
    a long rig id is cut and suffixed with 8 hex digits of its sha256 so two rigs never share one)."""
    name = f"{RULE_PREFIX}{rig}"
    if len(name) <= _NAME_MAX:
        return name
    digest = hashlib.sha256(rig.encode()).hexdigest()[:8]
    return f"{name[: _NAME_MAX - 9].rstrip('-')}-{digest}"


def network_tag(rig: str) -> str:
    """The network tag the rig's node carries and its firewall rule targets (same as `rule_name`)."""
    return rule_name(rig)


def description(rig: str) -> str:
    """The rule's description: what it is for and the marks that make it ours."""
    return f"tpu-devops: vLLM port of rig {rig}; {MARK} rig={rig}; deleted with the rig's TPU"


def is_ours(rule: dict[str, Any], rig: str) -> bool:
    """True when ``rule`` is this rig's: its name and its description's marks both say so."""
    return rule.get("name") == rule_name(rig) and f"{MARK} rig={rig};" in str(rule.get("description", ""))


def network_path(settings: Settings) -> str:
    """``projects/P/global/networks/N`` for TPU_NETWORK (default ``default``); a full path is kept."""
    net = settings.network or "default"
    if "/" in net:
        return net.split("compute/v1/", 1)[-1]
    return f"projects/{settings.project}/global/networks/{net}"


class EndpointAccess(BaseModel):
    """How the rig's endpoint is reached and protected (shown by plan, create, find_tpu and status).

    ``firewall_request`` is exactly the Firewall JSON create sends (None when no rule is needed);
    ``action`` after a create: created / updated / unchanged / not needed.
    """

    external_ip: bool
    port: int
    firewall_rule: str | None
    network: str
    target_tag: str
    source_ranges: list[str] = Field(default_factory=list)
    ranges_from: str = Field(description="argument, ALLOWED_SOURCE_RANGES, or your public IPv4 (detected)")
    api_key_secret: str
    firewall_request: dict[str, Any] | None = None
    action: str | None = None
    notes: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        """One line: who may reach which port, and with which key."""
        if self.firewall_rule is None and self.external_ip:
            reach = "no firewall rule planned (your public IPv4 was not detected)"
        elif self.firewall_rule is None:
            reach = "no firewall rule (no external IP): reach it from inside the VPC or through an IAP tunnel"
        else:
            reach = f"firewall rule {self.firewall_rule} admits tcp:{self.port} from {', '.join(self.source_ranges)} ({self.ranges_from})"
        done = f" [{self.action}]" if self.action else ""
        loud = next((w for w in self.warnings if "OPEN TO THE INTERNET" in w), None)
        return ("WARNING: vLLM's port is OPEN TO THE INTERNET: " if loud else "") + (
            f"{reach}{done}; API key in secret {self.api_key_secret}"
        )


def lookup_disclosure(settings: Settings) -> str:
    """What a plan or create says about the public-IP lookup it made: which service was asked (a third
    party unless PUBLIC_IP_LOOKUP_URL or a local fake names it) and how to make no such request."""
    url = lookup_url(settings)
    who = (
        f"{url} (a third-party service)"
        if url == DEFAULT_LOOKUP_URL
        else f"{url} (PUBLIC_IP_LOOKUP_URL)"
        if settings.public_ip_lookup_url
        else f"{url} (the local fake)"
    )
    return (
        f"to find your public IPv4 this asked {who}; to make no such request set ALLOWED_SOURCE_RANGES in "
        "tpu.env or pass allowed_source_ranges (e.g. 203.0.113.7/32)"
    )


def lookup_url(settings: Settings) -> str:
    """Where the caller's public IPv4 is asked: PUBLIC_IP_LOOKUP_URL, else the local fake's
    ``/public-ip`` when TPU_DEVOPS_GCP_ENDPOINT points at one (nothing leaves the machine then),
    else `DEFAULT_LOOKUP_URL`."""
    if settings.public_ip_lookup_url:
        return settings.public_ip_lookup_url
    if settings.gcp_endpoint:
        return settings.gcp_endpoint.rstrip("/") + "/public-ip"
    return DEFAULT_LOOKUP_URL


async def detect_public_ip(settings: Settings) -> str:
    """The caller's public IPv4 as a lookup service sees it (`lookup_url`), e.g. ``203.0.113.7``.

    Raises:
        ConfigError: the service is unreachable or answers something that is not a public IPv4
            (field ``allowed_source_ranges``: pass the ranges instead).
    """
    import httpx

    from tpu_devops.host.bounded import ReadLimitError, bounded_async_transport

    url = lookup_url(settings)
    fix = (
        "pass allowed_source_ranges (e.g. your address as 203.0.113.7/32), set ALLOWED_SOURCE_RANGES, or point "
        "PUBLIC_IP_LOOKUP_URL at a service that answers your public IPv4 as text"
    )
    try:
        transport = bounded_async_transport(httpx.AsyncHTTPTransport(trust_env=False))
        async with httpx.AsyncClient(
            timeout=LOOKUP_TIMEOUT_S, follow_redirects=False, trust_env=False, transport=transport
        ) as client:
            response = await client.get(url)
            response.raise_for_status()
    except (httpx.HTTPError, ReadLimitError) as exc:
        why = exc.message if isinstance(exc, ReadLimitError) else type(exc).__name__
        raise ConfigError(
            f"could not detect your public IPv4 from {url} ({why})",
            field="allowed_source_ranges", value=None, fix=fix,
        ) from None  # fmt: skip
    text = response.text.strip()[:64]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        ip = None
    if not isinstance(ip, ipaddress.IPv4Address) or not ip.is_global and not _is_documentation(ip):
        raise ConfigError(
            f"{url} did not answer a public IPv4 address (got {text!r})",
            field="allowed_source_ranges", value=None, fix=fix,
        )  # fmt: skip
    return str(ip)


def _is_documentation(ip: ipaddress.IPv4Address) -> bool:
    # TEST-NET ranges (RFC 5737) are what the local fake hands out; they are never routed
    return any(ip in ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"))


async def plan_access(
    settings: Settings,
    *,
    allowed_source_ranges: list[str] | None = None,
    open_to_internet: bool = False,
    preview: bool = False,
) -> EndpointAccess:
    """Decide the rig's firewall rule and key secret for a create (detects the public IP when needed).

    ``preview`` (a plan): a public IP that cannot be detected becomes a warning instead of an error
    (the create detects again and refuses then).

    Raises:
        ConfigError: a malformed range (field ``allowed_source_ranges``), a wide public range without
            ``open_to_internet``, or (not ``preview``) a public IP that could not be detected.
    """
    rig = settings.resource_id
    undetected = asked = ""  # asked: the public-IP lookup made, said in the answer (a third party by default)
    if allowed_source_ranges is not None:
        ranges = list(source_ranges_setting(",".join(allowed_source_ranges), field="allowed_source_ranges"))
        if not ranges:
            raise ConfigError(
                "empty list", field="allowed_source_ranges", value=[],
                fix="omit it to admit only your public IPv4, or list ranges such as 203.0.113.7/32",
            )  # fmt: skip
        ranges_from = "the allowed_source_ranges argument"
    elif settings.allowed_source_ranges:
        ranges, ranges_from = list(settings.allowed_source_ranges), "ALLOWED_SOURCE_RANGES"
    elif settings.external_ip:
        try:
            ranges, ranges_from = (
                [f"{await detect_public_ip(settings)}/32"],
                f"your public IPv4, detected just now by asking {urlsplit(lookup_url(settings)).netloc}",
            )
        except ConfigError as exc:
            if not preview:
                raise
            ranges, ranges_from, undetected = [], "undetected", f"{exc.message}. Fix: {exc.fix}"
        asked = lookup_disclosure(settings)
    else:
        ranges, ranges_from = [], "none (no external IP)"
    access = EndpointAccess(
        warnings=[f"no firewall rule can be planned yet: {undetected}"]
        if ranges_from == "undetected"
        else [],
        external_ip=settings.external_ip,
        port=settings.vllm_port,
        firewall_rule=rule_name(rig) if ranges else None,
        network=network_path(settings) if settings.project else (settings.network or "default"),
        target_tag=network_tag(rig),
        source_ranges=ranges,
        ranges_from=ranges_from,
        api_key_secret=settings.vllm_api_key_secret_id,
    )
    access.warnings += exposure(
        ranges, open_to_internet=open_to_internet, what=f"tcp:{settings.vllm_port}",
        field="allowed_source_ranges" if allowed_source_ranges is not None else "ALLOWED_SOURCE_RANGES",
    )  # fmt: skip
    if ranges:
        access.firewall_request = firewall_body(settings, ranges)
        if ranges_from.startswith("your public"):
            access.notes.append(
                f"only {ranges[0]} may reach tcp:{settings.vllm_port}: check it is your address; from another "
                "network pass allowed_source_ranges"
            )
    if asked:
        access.notes.append(asked)
    if not settings.external_ip:
        access.notes.append(
            "TPU_EXTERNAL_IP=0: the node gets only an internal address; reach vLLM from inside the VPC "
            "(VLLM_URL=http://INTERNAL_IP:PORT) or through an IAP tunnel (README, 'No external IP')"
        )
    return access


def firewall_body(settings: Settings, ranges: list[str]) -> dict[str, Any]:
    """The Compute v1 Firewall JSON for the rig: ingress tcp:VLLM_PORT from ``ranges`` to the rig's tag."""
    rig = settings.resource_id
    return {
        "name": rule_name(rig),
        "description": description(rig),
        "network": network_path(settings),
        "direction": "INGRESS",
        "priority": 1000,
        "allowed": [{"IPProtocol": "tcp", "ports": [str(settings.vllm_port)]}],
        "sourceRanges": list(ranges),
        "targetTags": [network_tag(rig)],
    }


def _compute(settings: Settings) -> Any:
    from tpu_devops.gcp.compute import ComputeApi

    return ComputeApi(settings)


async def _get_rule(settings: Settings, name: str) -> dict[str, Any] | None:
    from tpu_devops.provisioning.cloud import call

    try:
        return await call(_compute(settings).get_firewall, name)
    except NotFoundError:
        return None


async def ensure_access(settings: Settings, access: EndpointAccess) -> EndpointAccess:
    """Before a create: the key secret holds a key, and the rig's firewall rule exists as planned
    (created, or its ranges / port / tag updated). Returns ``access`` with ``action`` and notes.

    Raises:
        OwnershipError: a rule with the rig's name exists but is not ours (left alone).
        PermissionError_ / CloudError: Secret Manager or Compute refused (with the IAM fix).
    """
    from tpu_devops.provisioning import api_key
    from tpu_devops.provisioning.cloud import call

    stored = await api_key.ensure_stored_key(settings)
    access.notes.append(stored.describe())
    if stored.warning:
        access.warnings.append(stored.warning)
    body = access.firewall_request
    if body is None:
        access.action = "not needed"
        return access
    require_project(settings)
    existing = await _get_rule(settings, body["name"])
    if existing is None:
        try:
            await call(_compute(settings).insert_firewall, body)
            access.action = "created"
            return access
        except NotFoundError as exc:  # Compute names the missing network: the seed's lost afternoon
            raise ConfigError(
                f"the VPC network for the firewall rule does not exist: {exc.message}",
                field="TPU_NETWORK",
                value=settings.network or "default",
                fix="set TPU_NETWORK to an existing VPC (gcloud compute networks list), or leave it empty for the "
                "project's default network",
            ) from None
        except CloudError as exc:
            # A concurrent create of this rig (another server) made the rule a moment ago: check it as ours.
            if getattr(exc, "status", None) != "ALREADY_EXISTS":
                raise
            existing = await _get_rule(settings, body["name"])
            if existing is None:
                raise
    if not is_ours(existing, settings.resource_id):
        raise OwnershipError(
            f"a firewall rule named {body['name']} exists and was not made by tpu-devops for this rig "
            f"(description: {str(existing.get('description', ''))[:120]!r}); it is left alone",
            field="RESOURCE_ID",
            value=settings.resource_id,
            fix="rename or delete that rule yourself, or use another RESOURCE_ID",
        )
    wanted = {k: body[k] for k in ("allowed", "sourceRanges", "targetTags", "description")}
    if any(_norm(existing.get(k)) != _norm(v) for k, v in wanted.items()):
        await call(_compute(settings).patch_firewall, body["name"], wanted)
        access.action = "updated"
    else:
        access.action = "unchanged"
    return access


def _norm(value: Any) -> Any:
    if isinstance(value, list):
        return (
            sorted(_norm(v) for v in value)
            if all(isinstance(v, str) for v in value)
            else [_norm(v) for v in value]
        )
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in sorted(value.items())}
    return value


class FirewallState(BaseModel):
    """The rig's firewall rule as it is now (status, check_setup). ``exists`` False: none."""

    name: str
    exists: bool
    ours: bool = False
    source_ranges: list[str] = Field(default_factory=list)
    ports: list[str] = Field(default_factory=list)
    error: str | None = None

    def line(self) -> str:
        """One line for a status view."""
        if self.error:
            return f"firewall rule {self.name}: could not be read ({self.error})"
        if not self.exists:
            return f"firewall rule {self.name}: none (tcp to vLLM is closed from outside the VPC)"
        owner = "" if self.ours else " (NOT made by tpu-devops for this rig)"
        return f"firewall rule {self.name}{owner}: tcp:{','.join(self.ports) or '?'} from {', '.join(self.source_ranges) or 'nowhere'}"


async def firewall_state(settings: Settings) -> FirewallState:
    """Read the rig's firewall rule (never raises: a failure is reported in ``error``)."""
    name = rule_name(settings.resource_id)
    try:
        rule = await _get_rule(settings, name)
    except TpuDevopsError as exc:
        return FirewallState(name=name, exists=False, error=exc.message)
    if rule is None:
        return FirewallState(name=name, exists=False)
    ports = [p for a in rule.get("allowed", []) or [] for p in a.get("ports", []) or []]
    return FirewallState(
        name=name, exists=True, ours=is_ours(rule, settings.resource_id),
        source_ranges=list(rule.get("sourceRanges", []) or []), ports=ports,
    )  # fmt: skip


async def delete_rig_rule(settings: Settings) -> str:
    """Delete the rig's firewall rule when it is ours. Returns what happened: ``deleted``,
    ``already gone``.

    Raises:
        OwnershipError: a rule of that name exists but is not ours (left alone).
        CloudError: Compute refused.
    """
    from tpu_devops.provisioning.cloud import call

    name = rule_name(settings.resource_id)
    rule = await _get_rule(settings, name)
    if rule is None:
        return "already gone"
    if not is_ours(rule, settings.resource_id):
        raise OwnershipError(
            f"firewall rule {name} was not made by tpu-devops for this rig; left alone",
            field="firewall_rule", value=name, fix="delete it yourself if it is no longer needed",
        )  # fmt: skip
    try:
        await call(_compute(settings).delete_firewall, name)
    except NotFoundError:
        return "already gone"
    except CloudError:
        raise
    return "deleted"
