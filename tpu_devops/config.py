"""`Settings`: the deployment parameters from `tpu.env` and the environment, validated once.

Precedence (DESIGN §2): a real environment variable always beats `tpu.env`, which beats the defaults
below. `tpu.env` is read with python-dotenv without overriding anything. Invalid values raise
`ConfigError` naming the variable, the value and the fix; prose spellings of accelerator types
(``v5e-1``) are translated to the API spelling with a notice instead of being rejected.

Where tpu.env is found: `env_file_places` (``TPU_DEVOPS_ENV_FILE`` / ``--env-file``, ``./tpu.env``, a source
checkout's own, ``~/.config/tpu-devops/tpu.env``). Every value remembers where it came from
(`EnvironmentRead.origins`; a value mcp-run.sh copied from the file is the file's), so the project is
labelled correctly and a zone set more strongly than the region brings its own region (`_region`). A
tpu.env key nothing reads is reported with the closest known key (`unknown_keys`) and ignored.

The server itself starts even when the configuration is invalid (a server that exits
before ``initialize`` shows up in an MCP host as a bare "Disconnected"): `load_settings_or_errors`
records each invalid variable, loads the rest, and marks the settings fields that came from a bad
variable (`VARIABLE_FIELDS`). Reading such a field raises its `ConfigError`, so a tool that depends on a
bad setting answers with it while the others work; `get_help` and `check_setup` lead with the errors.
Two settings fail closed instead: an invalid ``TPU_DEVOPS_READ_ONLY`` starts read-only, an invalid
``TPU_DEVOPS_CACHE_DIR`` starts without the schema cache.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from tpu_devops import names, types
from tpu_devops.catalog import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    PROVISIONING_MODELS,
    AcceleratorType,
    provisioning_model_name,
    resolve_accelerator_type,
    safe_memory_utilization_advice,
)
from tpu_devops.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ENV_FILE = PROJECT_ROOT / "tpu.env"

# Names of variables whose values are secrets: never shown by get_help or logged.
SECRET_VARIABLES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "VLLM_API_KEY"})

# Accepted ranges shared by Settings, plan_capacity and render_startup_script (one pair, one place).
MAX_MODEL_LEN_RANGE = (256, 1_048_576)  # tokens per request
GPU_MEMORY_UTILIZATION_RANGE = (0.1, 0.99)  # fraction of HBM vLLM may use
MAX_NUM_BATCHED_TOKENS_RANGE = (16, 1_048_576)  # tokens per engine step (--max-num-batched-tokens)

DEFAULTS: dict[str, str] = {
    "GOOGLE_CLOUD_PROJECT": "",
    "GOOGLE_CLOUD_REGION": "us-west4",
    "GOOGLE_CLOUD_ZONE": "us-west4-a",
    "MODEL_NAME": "google/gemma-4-E2B-it",
    "ACCELERATOR_TYPE": "v5litepod-1",
    "TPU_RUNTIME_VERSION": "v2-alpha-tpuv5-lite",
    "TENSOR_PARALLEL_SIZE": "1",
    "PROVISIONING_MODEL": "flex-start",
    "MAX_RUN_DURATION": "4h",
    "VALID_UNTIL_DURATION": "",
    "RESOURCE_ID": "gemma4-e2b",
    "HF_SECRET_ID": "hf-token",
    "VLLM_API_KEY_SECRET_ID": "vllm-api-key",
    "MAX_MODEL_LEN": "16384",
    "MAX_NUM_BATCHED_TOKENS": "",
    "LIMIT_MM_PER_PROMPT": "",
    "GPU_MEMORY_UTILIZATION": f"{DEFAULT_GPU_MEMORY_UTILIZATION:g}",  # the measured ceiling (catalog)
    "VLLM_IMAGE": "vllm/vllm-tpu:v0.30.0",
    "VLLM_IMAGE_REPOSITORIES": "",  # more repositories the vLLM image may come from (tpu_devops.names)
    "VLLM_PORT": "8000",
    "TPU_NETWORK": "",
    "TPU_SUBNETWORK": "",
    "TPU_EXTERNAL_IP": "1",
    "ALLOWED_SOURCE_RANGES": "",
    "PUBLIC_IP_LOOKUP_URL": "",
    "VLLM_URL": "",
    "VLLM_API_KEY": "",
    "MCP_SERVER_NAME": "",
    "TPU_DEVOPS_READ_ONLY": "0",
    "TPU_DEVOPS_TOOLSETS": "",
    "TPU_DEVOPS_GCP_ENDPOINT": "",
    "TPU_DEVOPS_STATE_DIR": "",
    "TPU_DEVOPS_CACHE_DIR": "",
    "TPU_DEVOPS_LOG_LEVEL": "INFO",
    "TPU_DEVOPS_FILE_ROOTS": "",
    "TPU_DEVOPS_BUCKET": "",
    # Deletions (tpu_devops.host.confirmation): a standing permission for this rig, and whether the MCP
    # host's answer to the server's question counts as a person's.
    "TPU_DEVOPS_UNATTENDED_DELETE": "",
    "TPU_DEVOPS_ELICITATION": "on",
    # A kubeconfig the operator trusts: its exec / auth-provider plugins may run (tpu_devops.gke.connect).
    "TPU_DEVOPS_KUBECONFIG": "",
}

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

_SECRET_ID = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
_PROJECT = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_NETWORK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
# Cloud Storage bucket names (https://cloud.google.com/storage/docs/buckets#naming): 3-63 characters of
# lowercase letters, digits, '-', '_' and '.', starting and ending with a letter or digit.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
BUCKET_SUFFIX = "-tpu-devops"  # the default bucket is <project id>-tpu-devops (at most 41 characters)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
# TPU_DEVOPS_CACHE_DIR values that turn the cache off: the false spellings (empty means the default) and none.
_DISABLED = (_FALSE - {""}) | {"none"}


class SettingError(BaseModel):
    """One invalid variable the server started with (see the module docstring)."""

    variable: str
    value: str | None
    message: str
    fix: str | None
    unknown: bool = False  # a tpu.env key no one reads (`unknown_keys`): reported, taints no setting

    def error(self) -> ConfigError:
        """The `ConfigError` a tool that reads this setting raises."""
        return ConfigError(
            f"{self.message} (the server started with this invalid setting; tools that need it refuse)",
            field=self.variable,
            value=self.value,
            fix=f"{self.fix.rstrip('.') + '; then ' if self.fix else ''}fix it in tpu.env or the MCP server's "
            "environment and restart the server (make check-config shows the result)",
        )

    def __str__(self) -> str:
        return str(ConfigError(self.message, field=self.variable, value=self.value, fix=self.fix))


class Settings(BaseModel):
    """Validated deployment parameters. Durations in seconds, lengths in tokens.

    ``config_errors``: the invalid variables the server started with; ``invalid_fields``: the fields they
    set, which raise the error when read (module docstring).
    """

    model_config = ConfigDict(frozen=True)

    project: str
    region: str
    zone: str
    model_name: str
    accelerator_type: str
    runtime_version: str
    tensor_parallel_size: int
    provisioning_model: str
    max_run_duration_s: int
    valid_until_duration_s: int | None
    resource_id: str
    hf_secret_id: str
    vllm_api_key_secret_id: str
    max_model_len: int | None
    max_num_batched_tokens: int | None
    limit_mm_per_prompt: dict[str, int] | None
    gpu_memory_utilization: float
    vllm_image: str
    image_repositories: tuple[str, ...] = (names.DEFAULT_IMAGE_REPOSITORY,)  # allowed (tpu_devops.names)
    vllm_port: int
    network: str
    subnetwork: str
    external_ip: bool
    allowed_source_ranges: tuple[str, ...]
    public_ip_lookup_url: str
    vllm_url: str
    vllm_api_key: str
    server_name: str
    read_only: bool
    toolsets: tuple[str, ...] = ()  # requested toolset names (`tpu_devops.host.toolsets.select` reads them)
    gcp_endpoint: str
    state_dir: str
    cache_dir: str | None
    file_roots: tuple[str, ...] = ()  # more directories tools may read and write (`tpu_devops.host.files`)
    bucket: str = ""
    unattended_delete: bool = False  # TPU_DEVOPS_UNATTENDED_DELETE names this rig
    elicitation: bool = True  # TPU_DEVOPS_ELICITATION: a host's answer to the question counts
    kubeconfig: str = ""  # TPU_DEVOPS_KUBECONFIG: the operator's trusted kubeconfig (absolute path)
    env_file: str | None
    project_origin: str = ""  # "the environment" or "tpu.env (path)" when GOOGLE_CLOUD_PROJECT is set
    log_level: str = "INFO"
    notices: tuple[str, ...] = ()
    config_errors: tuple[SettingError, ...] = ()
    invalid_fields: frozenset[str] = frozenset()

    def __getattribute__(self, name: str) -> Any:
        values = object.__getattribute__(self, "__dict__")
        invalid = values.get("invalid_fields")
        if invalid and name in invalid:
            raise object.__getattribute__(self, "error_for")(name)
        if name == "project" and not values.get("project") and not values.get("gcp_endpoint"):
            from tpu_devops.gcp.project import detected_project  # google-auth loads only when asked

            found = detected_project()
            return found.project if found else ""
        return object.__getattribute__(self, name)

    @property
    def project_source(self) -> str:
        """Where `project` came from, in words: the environment, tpu.env (its path), or the file or server
        `tpu_devops.gcp.project.detected_project` found it in. Does not wait for a metadata server."""
        return self.project_now()[1]

    def project_now(self, wait: bool = False) -> tuple[str, str]:
        """(project, where it came from), without waiting for a metadata server unless ``wait`` (`get_help`
        answers at once; a tool that needs the project reads `project`, which waits)."""
        if self.__dict__["project"]:
            return self.__dict__["project"], self.__dict__["project_origin"]
        if self.gcp_endpoint:
            return (
                "",
                "none configured (TPU_DEVOPS_GCP_ENDPOINT is set: no credentials or gcloud files are read)",
            )
        from tpu_devops.gcp.project import detected_project, missing_project_reason

        found = detected_project(wait=wait)
        return (found.project, found.source) if found else ("", missing_project_reason())

    def error_for(self, field: str) -> ConfigError:
        """The `ConfigError` of the invalid variable that set ``field``."""
        errors = [e for e in object.__getattribute__(self, "__dict__")["config_errors"] if not e.unknown]
        for err in errors:
            if field in VARIABLE_FIELDS.get(err.variable, ()) or err.variable not in VARIABLE_FIELDS:
                return err.error()
        if not errors:
            return ConfigError("invalid configuration", field=field, fix="run make check-config")
        return errors[0].error()

    @property
    def accelerator(self) -> AcceleratorType:
        """The catalog entry for `accelerator_type`."""
        return resolve_accelerator_type(self.accelerator_type)

    def deletion_policy(self) -> Any:
        """The standing configuration every destructive tool's confirmation reads
        (`tpu_devops.host.confirmation.Policy`)."""
        from tpu_devops.host.confirmation import Policy

        return Policy(unattended=self.unattended_delete, ask=self.elicitation)

    @property
    def rig_labels(self) -> dict[str, str]:
        """Labels that mark a resource as ours: ``managed-by=tpu-devops`` plus ``rig=<resource_id>``."""
        return {"managed-by": "tpu-devops", "rig": self.resource_id}

    def public_summary(self, wait: bool = False) -> dict[str, Any]:
        """Every setting safe to show (the API key is reduced to set / not set); invalid ones say so, and
        ``configuration_errors`` (variable, value, fix) comes first when there are any. ``wait``: wait for a
        metadata server's answer before naming the project (`project_now`)."""
        data = self.model_dump(exclude={"config_errors", "invalid_fields", "project_origin"})
        data["vllm_api_key"] = "(set)" if self.__dict__["vllm_api_key"] else "(not set)"
        # tuples would print as Python reprs ("()") in text views
        data["allowed_source_ranges"] = (
            ", ".join(data["allowed_source_ranges"]) or "(your public IPv4, detected)"
        )
        data["notices"] = list(data["notices"]) or "none"
        data["file_roots"] = (
            ", ".join(data["file_roots"]) or "(none: the state directory and working directory only)"
        )
        data["toolsets"] = ", ".join(data["toolsets"]) or "(default)"
        data["image_repositories"] = ", ".join(data["image_repositories"])
        if "project" not in self.invalid_fields:
            data.pop("project", None)
            project, source = self.project_now(wait)
            data = {"project": project, "project_source": source, **data}
        for err in self.config_errors:
            for field in VARIABLE_FIELDS.get(err.variable, ()):
                data[field] = f"(invalid: {err.variable})"
        if self.config_errors:
            data = {"configuration_errors": [str(e) for e in self.config_errors], **data}
        return data


def parse_duration(value: str, *, variable: str, minimum_s: int = 0, maximum_s: int | None = None) -> int:
    """`tpu_devops.types.parse_duration` for the setting ``variable``. Raises ConfigError naming it."""
    return types.parse_duration(value, field=variable, minimum_s=minimum_s, maximum_s=maximum_s)


def _int(env: Mapping[str, str], var: str, *, lo: int, hi: int, optional: bool = False) -> int | None:
    raw = env[var].strip()
    if raw == "" and optional:
        return None
    try:
        value = int(raw.replace("_", "").replace(",", ""))
    except ValueError:
        raise ConfigError(
            "not a whole number", field=var, value=raw, fix=f"set {var} to an integer between {lo} and {hi}"
        ) from None
    if not lo <= value <= hi:
        raise ConfigError(
            f"{value} is out of range", field=var, value=raw, fix=f"use a value between {lo} and {hi}"
        )
    return value


def _directory(env: Mapping[str, str], var: str, xdg_base: Path) -> str:
    """``var`` with ``~`` expanded, or ``<xdg_base>/tpu-devops`` when empty.

    Raises:
        ConfigError: a relative path (MCP hosts start the server in a directory of their choosing).
    """
    value = env[var].strip()
    if not value:
        return str(xdg_base / "tpu-devops")
    return _absolute(
        value, var, f"use an absolute path such as {xdg_base / 'tpu-devops'}, or leave {var} empty"
    )


def _absolute(value: str, var: str, fix: str) -> str:
    """``value`` with ``~`` expanded. Raises ConfigError (with ``fix``) for a relative path: MCP hosts
    start the server in a directory of their choosing."""
    path = Path(value.strip()).expanduser()
    if not path.is_absolute():
        raise ConfigError(
            "not an absolute path (the server's working directory depends on the MCP host)",
            field=var,
            value=value,
            fix=fix,
        )
    return str(path)


def _bool(env: Mapping[str, str], var: str) -> bool:
    raw = env[var].strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError("not a boolean", field=var, value=env[var], fix=f"set {var}=1 or {var}=0")


def _url(env: Mapping[str, str], var: str) -> str:
    raw = env[var].strip().rstrip("/")
    if raw and not re.match(r"^https?://[^\s/]+(/[^\s]*)?$", raw):
        raise ConfigError(
            "not an http(s) URL",
            field=var,
            value=raw,
            fix=f"set {var} like http://10.0.0.5:8000, or leave it empty",
        )
    return raw


def _secret_id(env: Mapping[str, str], var: str, example: str) -> str:
    value = env[var].strip()
    if not _SECRET_ID.match(value):
        raise ConfigError(
            "not a valid Secret Manager secret id",
            field=var,
            value=value,
            fix=f"use letters, digits, '-' and '_' only, e.g. {example}",
        )
    return value


_IPV4_CIDR = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}(?:/(?:[0-9]|[12][0-9]|3[0-2]))?$")


def source_ranges_setting(raw: str, field: str = "ALLOWED_SOURCE_RANGES") -> tuple[str, ...]:
    """Comma- or space-separated IPv4 CIDR ranges (``203.0.113.7/32, 198.51.100.0/24``), normalised.

    An address without a prefix length is read as ``/32``; host bits are cleared (``203.0.113.7/24`` is
    ``203.0.113.0/24``). Empty means "detect the caller's public IPv4 at plan time"
    (`tpu_devops.provisioning.access`). Refused: IPv6 (a firewall rule's ``sourceRanges`` may not mix
    IPv4 and IPv6, and a TPU node's external address is IPv4: Compute Engine firewall rules reference),
    and non-canonical spellings such as ``0.0.0.0/00``, ``10.0.0.0/08`` or ``010.0.0.0/8`` (read by some
    parsers as another range than intended). The same rule serves the VM firewall and the GKE
    LoadBalancer (`exposure`).

    Raises:
        ConfigError: a value that is not an IPv4 address or CIDR range (named, with the fix).
    """
    import ipaddress

    out: list[str] = []
    for item in re.split(r"[\s,]+", raw.strip()):
        if not item:
            continue
        net = None
        if _IPV4_CIDR.match(item):
            try:
                net = ipaddress.ip_network(item, strict=False)
            except ValueError:
                net = None
        if net is None or net.version != 4:
            raise ConfigError(
                "not an IPv4 address or CIDR range (no leading zeros, prefix /0-/32)",
                field=field,
                value=item,
                fix="write ranges like 203.0.113.7/32 or 198.51.100.0/24, separated by commas",
            )
        if str(net) not in out:
            out.append(str(net))
    return tuple(out)


# Exposure: more public IPv4 addresses than one /16 admitted by a set of ranges, taken together, is "open
# to the internet" and needs an explicit open_to_internet. Not globally routable blocks (RFC 1918, CGNAT,
# loopback, link-local, documentation, reserved: IANA IPv4 Special-Purpose Address Registry) do not count.
OPEN_ADDRESSES = 1 << 16
_NOT_PUBLIC = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "240.0.0.0/4",
)  # fmt: skip


def public_addresses(ranges: list[str] | tuple[str, ...]) -> int:
    """How many public IPv4 addresses the ranges admit together (overlaps counted once, `_NOT_PUBLIC`
    blocks left out)."""
    import ipaddress

    # IPv4 only: `source_ranges_setting` refuses IPv6 ranges before they get here
    nets = list(ipaddress.collapse_addresses(ipaddress.IPv4Network(r) for r in ranges))
    private = [ipaddress.IPv4Network(p) for p in _NOT_PUBLIC]
    total = 0
    for n in nets:
        total += n.num_addresses - sum(
            min(n, p, key=lambda x: x.num_addresses).num_addresses for p in private if n.overlaps(p)
        )
    return total


def exposure(
    ranges: list[str] | tuple[str, ...], *, open_to_internet: bool, field: str, what: str
) -> list[str]:
    """The one rule for who may reach an endpoint (the VM firewall rule, the GKE LoadBalancer): ranges
    that together admit more than `OPEN_ADDRESSES` public addresses need ``open_to_internet``, and then
    come with a loud warning. ``ranges``: normalised (`source_ranges_setting`); ``what``: the endpoint
    in words (``tcp:8000``). Returns the warnings (none for a small set).

    Raises:
        ConfigError: a wide set without ``open_to_internet`` (field ``field``, the fix).
    """
    public = public_addresses(ranges)
    if public <= OPEN_ADDRESSES:
        return []
    shown = ", ".join(ranges)
    if not open_to_internet:
        raise ConfigError(
            f"{shown} would admit {public:,} public addresses (more than a /16) to {what}: a large part of "
            "the internet",
            field=field,
            value=list(ranges),
            fix="admit only your own address or network (e.g. 203.0.113.7/32), or pass open_to_internet=true "
            "if you really mean it (the API key is then all that protects the endpoint)",
        )
    return [
        f"WARNING: {what} OPEN TO THE INTERNET ({shown}: {public:,} public addresses, open_to_internet=true): "
        "anyone can reach vLLM; only the API key stands between them and free inference on your TPU"
    ]


# Variables tpu.env may hold that are not settings of this server: Google's client libraries, gcloud and
# HTTP clients read them from the environment (mcp-run.sh exports every tpu.env line; `export_passthrough`
# does the same for a server started without it). Sources: google-auth ``environment_vars.py``, gcloud's
# CLOUDSDK_* properties, requests/httpx proxy and CA variables, huggingface_hub's HF_* variables.
PASSTHROUGH_VARIABLES = frozenset(
    {
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_CLOUD_QUOTA_PROJECT",
        "GCLOUD_PROJECT",
        "CLOUDSDK_CONFIG",
        "CLOUDSDK_CORE_PROJECT",
        "CLOUDSDK_ACTIVE_CONFIG_NAME",
        "GCE_METADATA_HOST",
        "GCE_METADATA_ROOT",
        "GCE_METADATA_IP",
        "GCE_METADATA_TIMEOUT",
        "GCE_METADATA_DETECT_RETRIES",
        "NO_GCE_CHECK",
        "GOOGLE_API_USE_CLIENT_CERTIFICATE",
        "GOOGLE_API_USE_MTLS_ENDPOINT",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "KUBECONFIG",
        "HF_HOME",
        "HF_HUB_OFFLINE",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "OPENAI_API_KEY",
        "XDG_CONFIG_HOME",
        "XDG_CACHE_HOME",
        "XDG_STATE_HOME",
    }
)
# Set by mcp-run.sh: the tpu.env keys it exported (so a value it copied from the file is not labelled as
# set in the environment).
EXPORTED_MARKER = "TPU_DEVOPS_FROM_ENV_FILE"
ENV_FILE_VARIABLE = "TPU_DEVOPS_ENV_FILE"
# Known names that are neither settings nor passthrough: how the file itself is found.
_LAUNCH_VARIABLES = frozenset({ENV_FILE_VARIABLE, EXPORTED_MARKER})
_OFF = {"none", "off", os.devnull}


def user_config_env_file(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/tpu-devops/tpu.env`` (``~/.config/tpu-devops/tpu.env`` by default)."""
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "tpu-devops" / "tpu.env"


def checkout_env_file() -> Path | None:
    """The tpu.env of the source checkout this package runs from (None for an installed wheel)."""
    return DEFAULT_ENV_FILE if (PROJECT_ROOT / "pyproject.toml").is_file() else None


def env_file_places(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Where tpu.env is looked for, first found wins: ``TPU_DEVOPS_ENV_FILE`` (``--env-file``) alone when
    set (``none`` / ``off``: no file); else ``./tpu.env`` in the working directory, the checkout's tpu.env
    when running from a source checkout, and ``~/.config/tpu-devops/tpu.env`` (``XDG_CONFIG_HOME``)."""
    env = os.environ if environ is None else environ
    explicit = env.get(ENV_FILE_VARIABLE, "").strip()
    if explicit:
        return [] if explicit.lower() in _OFF else [Path(explicit).expanduser()]
    places = [Path.cwd() / "tpu.env"]
    if (checkout := checkout_env_file()) is not None:
        places.append(checkout)
    places.append(user_config_env_file(env))
    return places


@dataclass(frozen=True)
class EnvironmentRead:
    """The variables a start reads (`read_environment`).

    ``values``: every `DEFAULTS` variable, defaults < tpu.env < environment. ``origins``: for each, where
    its value came from ("the environment", "tpu.env (path)" or "the default"). ``file_keys``: every key of
    the tpu.env read. ``notices``: what a person should know about how the file was found.
    """

    values: dict[str, str]
    origins: dict[str, str]
    env_file: str | None
    file_keys: dict[str, str]
    notices: tuple[str, ...] = ()


def read_environment(
    env_file: Path | None = None, environ: Mapping[str, str] | None = None
) -> EnvironmentRead:
    """Defaults, overlaid by tpu.env (found by `env_file_places`, or ``env_file`` when given and
    ``TPU_DEVOPS_ENV_FILE`` is unset), overlaid by the real environment, which always wins.

    A value mcp-run.sh exported from the same file (named in ``TPU_DEVOPS_FROM_ENV_FILE``) counts as the
    file's. Never raises: a file that cannot be read is a notice.
    """
    from dotenv import dotenv_values

    environ = os.environ if environ is None else environ
    if environ.get(ENV_FILE_VARIABLE, "").strip() or env_file is None:
        places = env_file_places(environ)
    else:
        places = [Path(env_file)]
    notices: list[str] = []
    read_from, file_values = None, {}
    for path in places:
        if path.is_file():
            try:
                file_values = {k: (v or "") for k, v in dotenv_values(path).items()}
            except (OSError, UnicodeDecodeError) as exc:
                notices.append(
                    f"{ENV_FILE_VARIABLE}: cannot read {path} ({type(exc).__name__}): no tpu.env read"
                )
                break
            read_from = str(path)
            break
        if environ.get(ENV_FILE_VARIABLE, "").strip():
            notices.append(f"{ENV_FILE_VARIABLE} names {path}, which is not a file: no tpu.env read")
    exported = set(environ.get(EXPORTED_MARKER, "").split()) if read_from else set()
    if exported and Path(environ.get(ENV_FILE_VARIABLE, "") or "/").expanduser() != Path(read_from or ""):
        exported = set()  # the launcher read another file
    merged, origins = dict(DEFAULTS), dict.fromkeys(DEFAULTS, "the default")
    for key in DEFAULTS.keys() & file_values.keys():
        merged[key], origins[key] = file_values[key], f"tpu.env ({read_from})"
    for key in DEFAULTS.keys() & environ.keys():
        if key in exported and environ[key] == file_values.get(key):
            continue
        merged[key], origins[key] = environ[key], "the environment"
    return EnvironmentRead(merged, origins, read_from, file_values, tuple(notices))


def merged_environment(
    env_file: Path | None = None, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, str], str | None]:
    """(`read_environment` values, path of the env file read or None)."""
    read = read_environment(env_file, environ)
    return read.values, read.env_file


def unknown_keys(read: EnvironmentRead) -> list[SettingError]:
    """Each key of the tpu.env read that neither this server nor a library it uses reads: a typo left in
    silence would keep the default (``GPU_MEMORY_UTILISATION=0.95`` is not GPU_MEMORY_UTILIZATION). The
    value is never shown (it may be a secret under a misspelt name)."""
    import difflib

    known = set(DEFAULTS) | PASSTHROUGH_VARIABLES | _LAUNCH_VARIABLES
    errors = []
    for key in read.file_keys:
        if key in known:
            continue
        close = difflib.get_close_matches(
            key.upper(), sorted(DEFAULTS) + sorted(PASSTHROUGH_VARIABLES), n=1, cutoff=0.75
        )
        errors.append(
            SettingError(
                variable=key,
                value=None,
                message=f"unknown key in {read.env_file} (ignored)"
                + (f": did you mean {close[0]}?" if close else ""),
                fix=f"rename it to {close[0]}"
                if close
                else "remove it, or use a key the repository's tpu.env lists (get_help shows every setting)",
                unknown=True,
            )
        )
    return errors


def export_passthrough(read: EnvironmentRead, environ: Any = None) -> list[str]:
    """Put the tpu.env values of `PASSTHROUGH_VARIABLES` into the process environment where unset (as
    mcp-run.sh does for a checkout), so google-auth and HTTP clients see them; returns the names set."""
    environ = os.environ if environ is None else environ
    names = [k for k in read.file_keys if k in PASSTHROUGH_VARIABLES and k not in environ]
    for name in names:
        environ[name] = read.file_keys[name]
    return names


def load_settings(env_file: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Build and validate `Settings` (see the module docstring for precedence).

    Raises:
        ConfigError: the first invalid variable, with the value and the fix.
    """
    read = read_environment(env_file, environ)
    env, read_from = read.values, read.env_file
    notices: list[str] = list(read.notices)

    project = env["GOOGLE_CLOUD_PROJECT"].strip()
    if project and not _PROJECT.match(project):
        raise ConfigError(
            "not a Google Cloud project id (6-30 lowercase letters, digits, hyphens)",
            field="GOOGLE_CLOUD_PROJECT",
            value=project,
            fix="use the project id (not the name or number), e.g. my-tpu-project",
        )
    zone = types.check_zone(env["GOOGLE_CLOUD_ZONE"], "GOOGLE_CLOUD_ZONE")
    region, notice = _region(env, read.origins, zone)
    if notice:
        notices.append(notice)
    if types.region_of(zone) != region:
        raise ConfigError(
            f"zone {zone} is not in region {region}",
            field="GOOGLE_CLOUD_ZONE",
            value=zone,
            fix=f"set GOOGLE_CLOUD_REGION={types.region_of(zone)} or pick a zone in {region}",
        )

    accel = resolve_accelerator_type(env["ACCELERATOR_TYPE"], field_name="ACCELERATOR_TYPE")
    if accel.notice:
        notices.append(f"ACCELERATOR_TYPE: {accel.notice}")
    runtime = env["TPU_RUNTIME_VERSION"].strip() or accel.generation.runtime_version
    expected_runtime = accel.generation.runtime_version
    if runtime != expected_runtime and not runtime.startswith(expected_runtime):
        raise ConfigError(
            f"runtime version does not match {accel.name} ({accel.generation.name} expects {expected_runtime})",
            field="TPU_RUNTIME_VERSION",
            value=runtime,
            fix=f"set TPU_RUNTIME_VERSION={expected_runtime}",
        )

    tp = _int(env, "TENSOR_PARALLEL_SIZE", lo=1, hi=256)
    assert tp is not None
    if tp > accel.chips:
        raise ConfigError(
            f"tensor parallel size {tp} exceeds the {accel.chips} chip(s) of {accel.name}",
            field="TENSOR_PARALLEL_SIZE",
            value=tp,
            fix=f"set TENSOR_PARALLEL_SIZE={accel.chips} or less",
        )

    pm_raw = env["PROVISIONING_MODEL"].strip().lower()
    provisioning = provisioning_model_name(pm_raw)
    if provisioning is None:
        raise ConfigError(
            "unknown provisioning model",
            field="PROVISIONING_MODEL",
            value=env["PROVISIONING_MODEL"],
            fix=f"use one of {', '.join(PROVISIONING_MODELS)}",
        )
    if provisioning != pm_raw:
        notices.append(f"PROVISIONING_MODEL: {pm_raw!r} read as {provisioning!r}")

    # Flex-start runs between 10 minutes and 7 days (DESIGN §3).
    max_run = parse_duration(
        env["MAX_RUN_DURATION"], variable="MAX_RUN_DURATION", minimum_s=600, maximum_s=7 * 86400
    )
    valid_until = None
    if env["VALID_UNTIL_DURATION"].strip():
        valid_until = parse_duration(
            env["VALID_UNTIL_DURATION"], variable="VALID_UNTIL_DURATION", minimum_s=60
        )

    resource_id = types.check_resource_id(env["RESOURCE_ID"], "RESOURCE_ID")
    secret_id = _secret_id(env, "HF_SECRET_ID", "hf-token")
    key_secret_id = _secret_id(env, "VLLM_API_KEY_SECRET_ID", "vllm-api-key")
    if key_secret_id == secret_id:
        raise ConfigError(
            "the vLLM API key and the Hugging Face token cannot share one secret",
            field="VLLM_API_KEY_SECRET_ID",
            value=key_secret_id,
            fix="use its own secret id, e.g. vllm-api-key",
        )

    max_model_len = _int(
        env, "MAX_MODEL_LEN", lo=MAX_MODEL_LEN_RANGE[0], hi=MAX_MODEL_LEN_RANGE[1], optional=True
    )
    max_batched = _int(
        env,
        "MAX_NUM_BATCHED_TOKENS",
        lo=MAX_NUM_BATCHED_TOKENS_RANGE[0],
        hi=MAX_NUM_BATCHED_TOKENS_RANGE[1],
        optional=True,
    )
    limit_mm = None
    if env["LIMIT_MM_PER_PROMPT"].strip():
        try:
            limit_mm = json.loads(env["LIMIT_MM_PER_PROMPT"])
        except json.JSONDecodeError:
            limit_mm = None
        if not isinstance(limit_mm, dict) or not all(
            isinstance(k, str) and re.match(r"^[a-z_]+$", k) and isinstance(v, int) and 0 <= v <= 64
            for k, v in limit_mm.items()
        ):
            raise ConfigError(
                "not a JSON object of modality -> count",
                field="LIMIT_MM_PER_PROMPT",
                value=env["LIMIT_MM_PER_PROMPT"],
                fix="""write it as {"image":4,"audio":1} (counts 0-64)""",
            )
    try:
        util = float(env["GPU_MEMORY_UTILIZATION"])
    except ValueError:
        util = -1.0
    if not GPU_MEMORY_UTILIZATION_RANGE[0] <= util <= GPU_MEMORY_UTILIZATION_RANGE[1]:
        raise ConfigError(
            "not a fraction between {} and {}".format(*GPU_MEMORY_UTILIZATION_RANGE),
            field="GPU_MEMORY_UTILIZATION",
            value=env["GPU_MEMORY_UTILIZATION"],
            fix=f"use {safe_memory_utilization_advice()} (higher values fail ~14 min into boot)",
        )
    repositories = names.repositories_setting(env["VLLM_IMAGE_REPOSITORIES"])
    image = env["VLLM_IMAGE"].strip()
    names.check_image(image, repositories, "VLLM_IMAGE")
    port = _int(env, "VLLM_PORT", lo=1, hi=65535)
    assert port is not None
    for var in ("TPU_NETWORK", "TPU_SUBNETWORK"):
        if env[var].strip() and not _NETWORK.match(env[var].strip()):
            raise ConfigError(
                "not a network name or path",
                field=var,
                value=env[var],
                fix=f"use a VPC name such as default, or leave {var} empty",
            )

    source_ranges = source_ranges_setting(env["ALLOWED_SOURCE_RANGES"])
    lookup = _url(env, "PUBLIC_IP_LOOKUP_URL")

    state_dir = _directory(
        env,
        "TPU_DEVOPS_STATE_DIR",
        Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"),
    )
    file_roots = tuple(
        _absolute(part, "TPU_DEVOPS_FILE_ROOTS", f"list absolute directories separated by '{os.pathsep}'")
        for part in env["TPU_DEVOPS_FILE_ROOTS"].split(os.pathsep)
        if part.strip()
    )
    cache_dir = None
    if env["TPU_DEVOPS_CACHE_DIR"].strip().lower() not in _DISABLED:
        cache_dir = _directory(
            env, "TPU_DEVOPS_CACHE_DIR", Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        )
    bucket = _bucket(env, project)
    unattended = _unattended(env, resource_id)
    return Settings(
        project=project,
        region=region,
        zone=zone,
        model_name=names.check_model_id(env["MODEL_NAME"].strip(), "MODEL_NAME"),
        accelerator_type=accel.name,
        runtime_version=runtime,
        tensor_parallel_size=tp,
        provisioning_model=provisioning,
        max_run_duration_s=max_run,
        valid_until_duration_s=valid_until,
        resource_id=resource_id,
        hf_secret_id=secret_id,
        vllm_api_key_secret_id=key_secret_id,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_batched,
        limit_mm_per_prompt=limit_mm,
        gpu_memory_utilization=util,
        vllm_image=image,
        image_repositories=repositories,
        vllm_port=port,
        network=env["TPU_NETWORK"].strip(),
        subnetwork=env["TPU_SUBNETWORK"].strip(),
        external_ip=_bool(env, "TPU_EXTERNAL_IP"),
        allowed_source_ranges=source_ranges,
        public_ip_lookup_url=lookup,
        vllm_url=_url(env, "VLLM_URL"),
        vllm_api_key=env["VLLM_API_KEY"].strip(),
        server_name=env["MCP_SERVER_NAME"].strip() or f"tpu-devops-{resource_id}",
        read_only=_bool(env, "TPU_DEVOPS_READ_ONLY"),
        toolsets=_toolsets(env),
        gcp_endpoint=_url(env, "TPU_DEVOPS_GCP_ENDPOINT"),
        state_dir=state_dir,
        cache_dir=cache_dir,
        file_roots=file_roots,
        bucket=bucket,
        unattended_delete=unattended,
        elicitation=_bool(env, "TPU_DEVOPS_ELICITATION"),
        kubeconfig=_absolute(
            env["TPU_DEVOPS_KUBECONFIG"],
            "TPU_DEVOPS_KUBECONFIG",
            "use an absolute path, e.g. /home/me/.kube/config",
        )
        if env["TPU_DEVOPS_KUBECONFIG"].strip()
        else "",
        env_file=read_from,
        project_origin=_origin_phrase(read.origins["GOOGLE_CLOUD_PROJECT"], "GOOGLE_CLOUD_PROJECT")
        if project
        else "",
        log_level=_log_level(env),
        notices=tuple(notices),
    )


def _origin_phrase(origin: str, variable: str) -> str:
    """``the environment (GOOGLE_CLOUD_PROJECT)`` / ``tpu.env (/path/tpu.env)`` / ``the default``."""
    return f"the environment ({variable})" if origin == "the environment" else origin


# Where a value may come from, weakest first (`EnvironmentRead.origins`).
def _rank(origin: str) -> int:
    return 2 if origin == "the environment" else 1 if origin.startswith("tpu.env") else 0


def _region(env: Mapping[str, str], origins: Mapping[str, str], zone: str) -> tuple[str, str | None]:
    """``GOOGLE_CLOUD_REGION``, or the zone's own region (with a notice) when the region is empty or was
    set by a weaker source than the zone: ``GOOGLE_CLOUD_ZONE=us-east5-a make run`` must not pair the new
    zone with tpu.env's us-west4. A region set as strongly as the zone is kept (and a mismatch refused).

    Raises:
        ConfigError: a malformed region.
    """
    raw = env["GOOGLE_CLOUD_REGION"].strip()
    derived = types.region_of(zone)
    if not raw:
        return derived, None
    region = types.check_region(raw, "GOOGLE_CLOUD_REGION")
    zone_origin, region_origin = origins.get("GOOGLE_CLOUD_ZONE", ""), origins.get("GOOGLE_CLOUD_REGION", "")
    if region != derived and _rank(zone_origin) > _rank(region_origin):
        if region_origin == "the default":  # a zone alone names its region: nothing to point out
            return derived, None
        return derived, (
            f"GOOGLE_CLOUD_REGION: {derived}, the region of GOOGLE_CLOUD_ZONE={zone} (set in "
            f"{_origin_phrase(zone_origin, 'GOOGLE_CLOUD_ZONE')}), not {region} from {region_origin}"
        )
    return region, None


def _unattended(env: Mapping[str, str], rig: str) -> bool:
    """``TPU_DEVOPS_UNATTENDED_DELETE``: empty (no standing permission: deletions need a person), or this
    rig's ``RESOURCE_ID`` (a dry run's token then completes a deletion without a person). Naming the rig
    keeps a copied tpu.env from carrying the permission to another rig.

    Raises:
        ConfigError: any other value (a boolean, another rig's id); the server then starts without the
            permission (`FAIL_CLOSED`).
    """
    raw = env["TPU_DEVOPS_UNATTENDED_DELETE"].strip()
    if not raw:
        return False
    if raw == rig:
        return True
    raise ConfigError(
        f"names rig '{raw}', but this server's RESOURCE_ID is '{rig}'"
        if types.RESOURCE_ID_RE.match(raw)
        else "not a rig id: the standing permission names the rig it is for",
        field="TPU_DEVOPS_UNATTENDED_DELETE",
        value=raw,
        fix=f"set TPU_DEVOPS_UNATTENDED_DELETE={rig} to let a model delete this rig's resources with a dry "
        "run's token, or leave it empty so that every deletion needs you",
    )


def _toolsets(env: Mapping[str, str]) -> tuple[str, ...]:
    """``TPU_DEVOPS_TOOLSETS``: comma- or space-separated toolset names (empty: the default sets). Which
    names exist is the toolsets' business (`tpu_devops.host.toolsets.select` reports an unknown one)."""
    raw = env["TPU_DEVOPS_TOOLSETS"].strip()
    names = tuple(n.lower() for n in re.split(r"[\s,]+", raw) if n)
    for name in names:
        if not re.match(r"^[a-z][a-z0-9-]{0,31}$", name):
            raise ConfigError(
                "not a toolset name",
                field="TPU_DEVOPS_TOOLSETS",
                value=name,
                fix="list toolset names separated by commas, e.g. default,gke (get_help lists them)",
            )
    return names


def _log_level(env: Mapping[str, str]) -> str:
    level = env["TPU_DEVOPS_LOG_LEVEL"].strip().upper() or "INFO"
    if level not in LOG_LEVELS:
        raise ConfigError(
            "not a log level",
            field="TPU_DEVOPS_LOG_LEVEL",
            value=env["TPU_DEVOPS_LOG_LEVEL"],
            fix=f"use one of {', '.join(LOG_LEVELS)}",
        )
    return level


# Which `Settings` fields each variable sets: an invalid variable makes these fields raise its error.
# Every variable in DEFAULTS has an entry (tests/test_config.py); one without an entry would taint every field.
VARIABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "GOOGLE_CLOUD_PROJECT": ("project",),
    "GOOGLE_CLOUD_REGION": ("region", "zone"),
    "GOOGLE_CLOUD_ZONE": ("zone", "region"),
    "MODEL_NAME": ("model_name",),
    "ACCELERATOR_TYPE": ("accelerator_type", "runtime_version", "tensor_parallel_size"),
    "TPU_RUNTIME_VERSION": ("runtime_version",),
    "TENSOR_PARALLEL_SIZE": ("tensor_parallel_size",),
    "PROVISIONING_MODEL": ("provisioning_model",),
    "MAX_RUN_DURATION": ("max_run_duration_s",),
    "VALID_UNTIL_DURATION": ("valid_until_duration_s",),
    "RESOURCE_ID": ("resource_id",),
    "HF_SECRET_ID": ("hf_secret_id",),
    "VLLM_API_KEY_SECRET_ID": ("vllm_api_key_secret_id",),
    "TPU_EXTERNAL_IP": ("external_ip",),
    "ALLOWED_SOURCE_RANGES": ("allowed_source_ranges",),
    "PUBLIC_IP_LOOKUP_URL": ("public_ip_lookup_url",),
    "MAX_MODEL_LEN": ("max_model_len",),
    "MAX_NUM_BATCHED_TOKENS": ("max_num_batched_tokens",),
    "LIMIT_MM_PER_PROMPT": ("limit_mm_per_prompt",),
    "GPU_MEMORY_UTILIZATION": ("gpu_memory_utilization",),
    "VLLM_IMAGE": ("vllm_image",),
    "VLLM_IMAGE_REPOSITORIES": ("image_repositories",),  # invalid: only the default repository
    "VLLM_PORT": ("vllm_port",),
    "TPU_NETWORK": ("network",),
    "TPU_SUBNETWORK": ("subnetwork",),
    "VLLM_URL": ("vllm_url",),
    "VLLM_API_KEY": ("vllm_api_key",),
    "MCP_SERVER_NAME": (),
    "TPU_DEVOPS_READ_ONLY": (),  # fails closed: read-only (FAIL_CLOSED)
    "TPU_DEVOPS_TOOLSETS": (),  # invalid: the default toolsets
    "TPU_DEVOPS_GCP_ENDPOINT": ("gcp_endpoint",),
    "TPU_DEVOPS_STATE_DIR": ("state_dir",),
    "TPU_DEVOPS_CACHE_DIR": (),  # fails closed: no schema cache (FAIL_CLOSED)
    "TPU_DEVOPS_FILE_ROOTS": ("file_roots",),  # tools then refuse every path argument (tpu_devops.host.files)
    "TPU_DEVOPS_LOG_LEVEL": (),  # INFO
    "TPU_DEVOPS_BUCKET": ("bucket",),  # invalid: no bucket, every boot cold
    "TPU_DEVOPS_UNATTENDED_DELETE": (),  # fails closed: no standing permission (FAIL_CLOSED)
    "TPU_DEVOPS_ELICITATION": (),  # fails closed: a host's answers are not taken (FAIL_CLOSED)
    "TPU_DEVOPS_KUBECONFIG": ("kubeconfig",),  # GKE tools that need it refuse; the GKE API path still works
}
# Variables replaced by a safe value instead of their default when invalid.
FAIL_CLOSED = {
    "TPU_DEVOPS_READ_ONLY": "1",
    "TPU_DEVOPS_CACHE_DIR": "off",
    "TPU_DEVOPS_UNATTENDED_DELETE": "",
    "TPU_DEVOPS_ELICITATION": "off",
}
# Variables whose error may be the other's fault: both are reset together.
_RESET_TOGETHER = {
    "GOOGLE_CLOUD_ZONE": ("GOOGLE_CLOUD_REGION",),
    "GOOGLE_CLOUD_REGION": ("GOOGLE_CLOUD_ZONE",),
}
# Fields a start needs whatever is wrong (they take safe values, never raise).
_ALWAYS_READABLE = {
    "read_only",
    "toolsets",
    "cache_dir",
    "server_name",
    "log_level",
    "env_file",
    "notices",
    "project_origin",
}


def load_settings_or_errors(
    env_file: Path | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """`load_settings`, but an invalid variable is recorded instead of raised (module docstring).

    Each invalid variable is replaced by its default (or a fail-closed value, or empty when the default
    fails too) and loading is retried; the fields it sets are marked invalid. If no replacement works,
    every field but the few a start needs is marked invalid.
    """
    env = dict(os.environ if environ is None else environ)
    errors: list[SettingError] = []
    invalid: set[str] = set()
    tries: dict[str, int] = {}
    settings: Settings | None = None
    while settings is None:
        try:
            settings = load_settings(env_file, env)
        except ConfigError as exc:
            variable = exc.field or ""
            if variable not in DEFAULTS or tries.get(variable, 0) >= 2:
                break
            if variable not in tries:
                errors.append(
                    SettingError(variable=variable, value=_shown(exc.value), message=exc.message, fix=exc.fix)
                )
                invalid.update(VARIABLE_FIELDS.get(variable, set(Settings.model_fields) - _ALWAYS_READABLE))
            tries[variable] = tries.get(variable, 0) + 1
            env[variable] = "" if tries[variable] == 2 else FAIL_CLOSED.get(variable, DEFAULTS[variable])
            for other in _RESET_TOGETHER.get(variable, ()):
                env[other] = DEFAULTS[other]
    if settings is None:  # no replacement helped: safe defaults, and nothing that came from them is usable
        settings = load_settings(env_file=Path(os.devnull), environ={**DEFAULTS, **FAIL_CLOSED})
        invalid = set(Settings.model_fields) - _ALWAYS_READABLE
        if not errors:
            errors.append(SettingError(variable="(configuration)", value=None, message="invalid", fix=None))
    errors += unknown_keys(read_environment(env_file, os.environ if environ is None else environ))
    if not errors:
        return settings
    invalid -= {"config_errors", "invalid_fields"}
    return settings.model_copy(update={"config_errors": tuple(errors), "invalid_fields": frozenset(invalid)})


def _shown(value: Any) -> str | None:
    return None if value is None else str(value)


def _bucket(env: Mapping[str, str], project: str) -> str:
    """``TPU_DEVOPS_BUCKET``: the product's Cloud Storage bucket (compile cache and staged weights).

    Empty: ``<project id>-tpu-devops`` (empty while no project is set); ``off`` / ``none``: no bucket,
    every boot is cold. Raises `ConfigError` for a name Cloud Storage would refuse.
    """
    raw = env["TPU_DEVOPS_BUCKET"].strip()
    if raw.lower() in _DISABLED:
        return ""
    name = raw.removeprefix("gs://").rstrip("/") if raw else (f"{project}{BUCKET_SUFFIX}" if project else "")
    if name and (not _BUCKET.match(name) or "google" in name or name.startswith("goog") or ".." in name):
        raise ConfigError(
            "not a Cloud Storage bucket name (3-63 lowercase letters, digits, - _ .; no 'google')",
            field="TPU_DEVOPS_BUCKET",
            value=raw,
            fix="use e.g. my-project-tpu-devops, leave it empty for <project>-tpu-devops, or off for no bucket",
        )
    return name


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide `Settings`, loaded once (tests call `get_settings.cache_clear()`); never raises:
    invalid variables are in ``config_errors`` (`load_settings_or_errors`). The tpu.env values of
    `PASSTHROUGH_VARIABLES` (``GOOGLE_APPLICATION_CREDENTIALS``, proxies...) go into the process
    environment where unset, before any Google library reads it (`export_passthrough`)."""
    export_passthrough(read_environment())
    return load_settings_or_errors()


def require_project(settings: Settings) -> str:
    """The project id, or a ConfigError saying how to set it (cloud tools need it; planning does not)."""
    if not settings.project:
        raise ConfigError(
            "no Google Cloud project is configured",
            field="GOOGLE_CLOUD_PROJECT",
            value="",
            fix="set GOOGLE_CLOUD_PROJECT in tpu.env or in the MCP server's env (hosts such as Gemini CLI do not "
            "pass your shell's), or name one for Application Default Credentials: gcloud config set project "
            "PROJECT_ID (gcloud config get-value project shows yours)",
        )
    return settings.project
