"""How this server reaches a cluster's Kubernetes API: nothing a tool is handed is ever run.

A kubeconfig can name a program to run for credentials (a ``user.exec`` plugin, or the legacy
``user.auth-provider`` whose ``gcp`` provider runs ``cmd-path``), and the official client runs it on
load. A kubeconfig path is a tool argument, and a file in the user's project is readable: a
prompt-injected model could make a read-only plan run any program. So:

- **The GKE API** (the default: no ``kubeconfig``, no ``context``): the cluster's control-plane
  ``endpoint`` and ``masterAuth.clusterCaCertificate`` come from ``clusters.get`` (google-cloud-container,
  `tpu_devops.gcp.container.get_cluster`) and every request carries an OAuth 2.0 access token of the
  server's own Google credentials (google-auth, refreshed before it expires), which the GKE API server
  accepts as gke-gcloud-auth-plugin's tokens are ("Access the control plane": cloud.google.com/kubernetes-
  engine/docs/how-to/cluster-access-for-kubectl). Nothing is read from disk, nothing is run.
- **A kubeconfig handed to a tool is data** (`data_client`): read bounded from an allowed path
  (`tpu_devops.host.files`) with a strict YAML loader (one document, no aliases or anchors, no duplicate
  keys, no tags beyond plain YAML), and only the selected context's cluster (``server``,
  ``certificate-authority(-data)``, ``tls-server-name``, ``insecure-skip-tls-verify``) and user (``token``,
  ``tokenFile``) are used. ``exec`` and ``auth-provider`` are refused, as are what this server would not
  honour (client certificates, basic auth, impersonation, ``proxy-url``); a token goes over plain HTTP only
  to loopback (a ``kubectl proxy`` or port-forward).
- **The operator's kubeconfig** (``TPU_DEVOPS_KUBECONFIG``, configured beforehand): loaded by the
  official client as kubectl would, plugins included; the one file whose programs may run.
"""

from __future__ import annotations

import base64
import ipaddress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tpu_devops.config import Settings, require_project
from tpu_devops.errors import ConfigError, InputError

MAX_KUBECONFIG_BYTES = 1 << 20
MAX_TOKEN_FILE_BYTES = 64 << 10
MAX_CA_FILE_BYTES = 1 << 20
TRUST_VARIABLE = "TPU_DEVOPS_KUBECONFIG"
# user / cluster keys this server does not honour: refused, never silently dropped
_RUNS_CODE = ("exec", "auth-provider")
_UNSUPPORTED_USER = (
    "client-certificate", "client-certificate-data", "client-key", "client-key-data", "username", "password",
    "as", "as-uid", "as-groups", "as-user-extra",
)  # fmt: skip
_UNSUPPORTED_CLUSTER = ("proxy-url", "disable-compression")


def api_client(
    settings: Settings,
    *,
    cluster: str | None,
    location: str | None,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> Any:
    """A kubernetes ``ApiClient`` for the cluster: through the GKE API when no ``kubeconfig`` and no
    ``context`` is given, else from the kubeconfig (the operator's, or one handed in, read as data).
    Blocking: call through `tpu_devops.gcp.common.run_blocking`.

    Raises:
        InputError: no cluster named; a kubeconfig that cannot be used (named, with the fix).
        ConfigError: a cluster without a reachable endpoint. NotFoundError / PermissionError_ /
            CloudError: the GKE API's answer.
    """
    if kubeconfig is None and context is None:
        if not cluster:
            raise InputError(
                "no cluster named",
                field="cluster",
                value=cluster,
                fix="pass the GKE cluster's name (and location when it is not GOOGLE_CLOUD_ZONE's)",
            )
        return gke_client(settings, cluster, location)
    trusted = _trusted(settings, kubeconfig)
    if trusted is not None:
        return trusted_client(trusted, context)
    return data_client(settings, kubeconfig, context, cluster=cluster)


# ---- the GKE API --------------------------------------------------------------------------------------


def gke_client(settings: Settings, cluster: str, location: str | None) -> Any:
    """An ``ApiClient`` for ``cluster`` from its ``clusters.get`` answer and the server's Google credentials.

    Raises:
        ConfigError: the cluster has no endpoint (a private cluster without a public one) or no CA.
        NotFoundError / PermissionError_ / CloudError: as `tpu_devops.gcp.container.get_cluster`.
    """
    from tpu_devops.gcp import common, container
    from tpu_devops.gke.manifests import check_location

    where = check_location(settings, location)
    name = container.cluster_name(require_project(settings), where, cluster)
    info = container.get_cluster(settings, name)
    endpoint = str(info.get("endpoint") or "")
    ca = str((info.get("masterAuth") or {}).get("clusterCaCertificate") or "")
    if not endpoint or not ca:
        raise ConfigError(
            f"cluster {cluster} in {where} has no public control-plane endpoint"
            if not endpoint
            else f"cluster {cluster} in {where} names no CA certificate",
            field="cluster",
            value=cluster,
            fix=f"point {TRUST_VARIABLE} at a kubeconfig you trust for this cluster (e.g. written by gcloud "
            "container clusters get-credentials --internal-ip) and pass its context",
        )
    try:
        ca_pem = base64.b64decode(ca, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(
            "the cluster's CA certificate is not base64 PEM", field="cluster", value=cluster
        ) from None
    return bearer_client(f"https://{endpoint}", ca_pem, common.credentials(settings))


def bearer_client(host: str, ca_pem: str | None, credentials: Any, *, verify: bool = True) -> Any:
    """An ``ApiClient`` on ``host`` that verifies its certificate against ``ca_pem`` and sends
    ``credentials``' access token (google-auth: ``valid``, ``token``, ``refresh``; refreshed, in the calling
    worker thread, whenever it is no longer valid). Credentials without a token (anonymous, for a local
    fake) send none.

    Raises:
        PermissionError_ / CloudError: the first token could not be had.
    """
    from kubernetes import client

    conf = client.Configuration(host=host)
    conf.verify_ssl = verify
    if ca_pem:
        conf.ca_cert_data = ca_pem
    conf.api_key_prefix["authorization"] = "Bearer"

    def refresh(c: Any) -> None:
        if not credentials.valid:
            _refresh(credentials)
        token = getattr(credentials, "token", None)
        if token:
            c.api_key["authorization"] = token

    refresh(conf)
    conf.refresh_api_key_hook = refresh  # type: ignore[assignment]  # the client's stub types the hook as None
    return client.ApiClient(conf)


def _refresh(credentials: Any) -> None:
    """Refresh google-auth ``credentials`` (anonymous ones have nothing to refresh).

    Raises:
        PermissionError_ / CloudError: the token could not be had (typed by `tpu_devops.gcp.common`).
    """
    from google.auth.credentials import AnonymousCredentials
    from google.auth.transport.requests import Request

    from tpu_devops.gcp import common

    if isinstance(credentials, AnonymousCredentials):
        return
    with common.google_errors("get an access token for the Kubernetes API", "container"):
        credentials.refresh(Request())


# ---- the operator's kubeconfig --------------------------------------------------------------------------


def _resolved(path: Path | str) -> Path | None:
    """``path`` resolved, or None when it cannot be (a symlink loop, a name too long): such a path is
    caller input, whose checks (`tpu_devops.host.files`) name the problem."""
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return None


def _trusted(settings: Settings, kubeconfig: str | None) -> Path | None:
    """The operator's kubeconfig when the call is about it: no path given (a context of it), or a path
    that resolves to it. None otherwise (the file handed in is read as data)."""
    if kubeconfig is not None:
        trusted = settings.kubeconfig
        if trusted and (mine := _resolved(trusted)) is not None and _resolved(kubeconfig) == mine:
            return Path(trusted)
        return None
    if settings.kubeconfig:
        return Path(settings.kubeconfig)
    return None


def trusted_client(path: Path, context: str | None) -> Any:
    """The official client's loader on the operator's kubeconfig (``TPU_DEVOPS_KUBECONFIG``), plugins
    included: the operator configured this file, so its programs are theirs.

    Raises:
        InputError: the file is missing, too large, or cannot be loaded (field ``TPU_DEVOPS_KUBECONFIG``
            or ``context``).
    """
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(
            f"cannot read the operator's kubeconfig: {exc.strerror}", field=TRUST_VARIABLE, value=str(path),
            fix=f"fix {TRUST_VARIABLE} in tpu.env or the server's environment, or leave it empty",
        ) from None  # fmt: skip
    if size > MAX_KUBECONFIG_BYTES:
        raise InputError(
            f"the operator's kubeconfig is {size:,} bytes (at most {MAX_KUBECONFIG_BYTES:,})",
            field=TRUST_VARIABLE,
            value=str(path),
        )
    try:
        return config.new_client_from_config(config_file=str(path), context=context)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        raise InputError(
            f"cannot load the operator's kubeconfig: {(str(exc).splitlines() or [''])[0][:300]}",
            field="context" if context else TRUST_VARIABLE,
            value=context or str(path),
            fix="check the file and the context name (kubectl config get-contexts)",
        ) from None


# ---- a kubeconfig handed in: data only ------------------------------------------------------------------


def _default_kubeconfig() -> Path:
    """The file kubectl reads first: ``$KUBECONFIG``'s first entry, else ``~/.kube/config``."""
    import os

    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p.strip()]
    return Path(listed[0] if listed else "~/.kube/config").expanduser()


def _loader() -> type:
    """A YAML loader stricter than ``yaml.SafeLoader``: no aliases or anchors (no billion laughs, no merge
    of a shared block into a user), no duplicate keys (which copy wins differs between parsers)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise yaml.constructor.ConstructorError(
                    None, None, "anchors and aliases are not accepted in a kubeconfig", event.start_mark
                )
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {str(key)[:60]!r} appears twice", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def _bad(problem: str, value: Any, fix: str | None = None) -> InputError:
    return InputError(
        f"refused kubeconfig: {problem}",
        field="kubeconfig",
        value=value,
        fix=fix
        or "omit kubeconfig and context: the server reaches the cluster through the GKE API with its own Google "
        f"credentials; or, for a file you trust with its plugins, set {TRUST_VARIABLE} to it",
    )


def parse_kubeconfig(text: str, shown: str) -> dict[str, Any]:
    """``text`` as a kubeconfig mapping, with the strict loader (`_loader`).

    Raises:
        InputError: not one YAML / JSON mapping, anchors or aliases, a duplicate key, a YAML tag, nesting
            too deep to read.
    """
    import yaml

    try:
        doc = yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise _bad("nested too deeply to read", shown) from None
    except yaml.YAMLError as exc:
        raise _bad(
            f"not a plain YAML kubeconfig ({(str(exc).splitlines() or [''])[0][:200]})", shown
        ) from None
    if not isinstance(doc, dict):
        raise _bad("not a mapping (apiVersion, clusters, contexts, users)", shown)
    return doc


def _named(doc: dict[str, Any], section: str, name: Any, shown: str) -> dict[str, Any]:
    """The one entry of ``section`` (clusters / users / contexts) called ``name``, as its inner mapping."""
    key = section[:-1]
    found = [e for e in (doc.get(section) or []) if isinstance(e, dict) and e.get("name") == name]
    if not isinstance(doc.get(section) or [], list):
        raise _bad(f"{section} is not a list", shown)
    if len(found) != 1:
        raise _bad(
            f"{'no' if not found else 'more than one'} {key} named {str(name)[:60]!r}",
            shown,
            fix="check the file and the context name (kubectl config get-contexts)",
        )
    inner = found[0].get(key)
    if not isinstance(inner, dict):
        raise _bad(f"{key} {str(name)[:60]!r} has no {key} mapping", shown)
    return inner


def data_client(
    settings: Settings, kubeconfig: str | None, context: str | None, *, cluster: str | None
) -> Any:
    """An ``ApiClient`` from a kubeconfig read as data (module docstring): ``kubeconfig`` (a path under
    the allowed roots, or kubectl's own file) or kubectl's file, its ``context`` or its current one.

    Raises:
        InputError: a path outside the roots, a file that is not a kubeconfig, or one whose selected user
            runs a program or uses what this server does not honour (named, with the fix).
    """
    from tpu_devops.host import files

    path = Path(kubeconfig).expanduser() if kubeconfig else _default_kubeconfig()
    resolved = _resolved(path)
    if kubeconfig is None or resolved is None or resolved != _resolved(_default_kubeconfig()):
        # caller input: only where tools may read, checked before anything else, so that no answer tells
        # whether a file outside those directories exists
        path = files.readable_file(
            settings, str(kubeconfig or path), field="kubeconfig", max_bytes=MAX_KUBECONFIG_BYTES
        )
    shown = str(kubeconfig or path)
    text = files.read_text(path, field="kubeconfig", value=shown, max_bytes=MAX_KUBECONFIG_BYTES)
    doc = parse_kubeconfig(text, shown)
    name = context if context is not None else doc.get("current-context")
    if not isinstance(name, str) or not name:
        raise _bad("no context selected (no current-context)", shown, fix="pass context")
    ctx = _named(doc, "contexts", name, shown)
    user = _named(doc, "users", ctx.get("user"), shown)
    where = _named(doc, "clusters", ctx.get("cluster"), shown)
    for key in _RUNS_CODE:
        if key in user:
            raise _bad(f"user {str(ctx.get('user'))[:60]!r} has {key!r}: a program it names would run", shown)
    for key in (*_UNSUPPORTED_USER, *(k for k in _UNSUPPORTED_CLUSTER if k in where)):
        if key in user or key in where:
            raise _bad(f"{key!r} is not supported (this server sends only a bearer token)", shown)
    return _client_from(settings, where, user, shown)


def _client_from(settings: Settings, where: dict[str, Any], user: dict[str, Any], shown: str) -> Any:
    """The ``ApiClient`` of one cluster and user mapping of a data-only kubeconfig."""
    from tpu_devops.host import files

    server = where.get("server")
    parts = urlsplit(server) if isinstance(server, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
        raise _bad("the cluster's server is not an http(s) URL", shown)
    token = user.get("token")
    if user.get("tokenFile") is not None:
        if token is not None or not isinstance(user["tokenFile"], str):
            raise _bad("tokenFile must be one path (and no token beside it)", shown)
        token_path = files.readable_file(
            settings, user["tokenFile"], field="kubeconfig", max_bytes=MAX_TOKEN_FILE_BYTES
        )
        token = files.read_text(
            token_path, field="kubeconfig", value=user["tokenFile"], max_bytes=MAX_TOKEN_FILE_BYTES
        ).strip()
    if token is not None and not (isinstance(token, str) and token.isprintable() and token.isascii()):
        raise _bad("the user's token is not one line of text", shown)
    if token and parts.scheme == "http" and not _loopback(parts.hostname):
        raise _bad(
            "a token would travel unencrypted to a host that is not this machine", shown,
            fix="use the cluster's https server, or kubectl proxy / port-forward on 127.0.0.1",
        )  # fmt: skip
    ca = None
    if where.get("certificate-authority-data") is not None:
        try:
            ca = base64.b64decode(str(where["certificate-authority-data"]), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise _bad("certificate-authority-data is not base64 PEM", shown) from None
    elif where.get("certificate-authority") is not None:
        ca_path = files.readable_file(
            settings, str(where["certificate-authority"]), field="kubeconfig", max_bytes=MAX_CA_FILE_BYTES
        )
        ca = files.read_text(ca_path, field="kubeconfig", value=shown, max_bytes=MAX_CA_FILE_BYTES)
    verify = where.get("insecure-skip-tls-verify") is not True

    class _Static:
        """A fixed bearer token (or none), shaped like google-auth credentials for `bearer_client`."""

        valid = True

        def __init__(self, value: str | None) -> None:
            self.token = value or None

    made = bearer_client(str(server), ca, _Static(token), verify=verify)
    if isinstance(where.get("tls-server-name"), str):
        made.configuration.tls_server_name = where["tls-server-name"]
    return made


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
