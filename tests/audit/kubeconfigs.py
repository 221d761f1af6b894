"""Hostile kubeconfigs: every way a kubeconfig handed to a GKE tool could make the server run a program
(an ``exec`` plugin, a legacy ``auth-provider``, hidden in another context, a second copy of a user or a
key, YAML aliases and merge keys, tags, a second document) or read what it must not (a token or CA file
outside the roots, a device), or send a token where it must not (a proxy, plain HTTP to another host).
Shared by tests/test_gke_connect.py and the audit (`tests.audit.trust`); the marker file a program would
create must never appear."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.fakes.kube_api import TOKEN


def marker_program(marker: Path) -> dict[str, Any]:
    """An exec plugin that creates ``marker`` (and would hand out the fake API server's token)."""
    credential = json.dumps(
        {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "kind": "ExecCredential",
            "status": {"token": TOKEN},
        }
    )
    code = f"open({str(marker)!r}, 'w').write('ran'); print({credential!r})"
    return {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": sys.executable,
        "args": ["-c", code],
    }


def config_for(
    kube: Any, users: list[dict], *, contexts: list[dict] | None = None, current: str = "fake"
) -> dict:
    """A kubeconfig of the fake API server ``kube`` (its URL and CA) with ``users`` and ``contexts``
    (default: one context ``fake`` of cluster ``fake`` and user ``fake``)."""
    import base64

    ca = base64.b64encode(kube.ca_pem.encode()).decode()
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "fake", "cluster": {"server": kube.url, "certificate-authority-data": ca}}],
        "users": users,
        "contexts": contexts or [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
    }  # fmt: skip


def hostile_kubeconfigs(kube: Any, marker: Path, outside: Path) -> dict[str, tuple[str, str | None]]:
    """name -> (file text, context): every way a kubeconfig could make the server run a program or read
    what it must not."""
    exec_user = {"exec": marker_program(marker)}
    provider = {"auth-provider": {"name": "gcp", "config": {"cmd-path": sys.executable,
                                                            "cmd-args": f"-c open({str(marker)!r},'w')"}}}  # fmt: skip
    two_contexts = [
        {"name": "fake", "context": {"cluster": "fake", "user": "fake"}},
        {"name": "evil", "context": {"cluster": "fake", "user": "evil"}},
    ]
    clean_and_evil = [{"name": "fake", "user": {"token": TOKEN}}, {"name": "evil", "user": exec_user}]
    program = marker_program(marker)
    configs: dict[str, tuple[str, str | None]] = {
        "exec": (json.dumps(config_for(kube, [{"name": "fake", "user": exec_user}])), None),
        "auth-provider": (json.dumps(config_for(kube, [{"name": "fake", "user": provider}])), None),
        "exec beside a token": (json.dumps(config_for(kube, [{"name": "fake", "user": {"token": TOKEN, **exec_user}}])), None),
        "exec in a non-current context, selected": (
            json.dumps(config_for(kube, clean_and_evil, contexts=two_contexts)), "evil"),
        "exec as the current context of two": (
            json.dumps(config_for(kube, clean_and_evil, contexts=two_contexts, current="evil")), None),
        "a user named twice (clean, then exec)": (
            json.dumps(config_for(kube, [{"name": "fake", "user": {"token": TOKEN}}, {"name": "fake", "user": exec_user}])),
            None),
        "a key twice (users, then users with exec)": (
            '{"apiVersion": "v1", "current-context": "fake", "users": [{"name": "fake", "user": {"token": "t"}}],'
            f' "users": [{{"name": "fake", "user": {json.dumps(exec_user)}}}],'
            ' "clusters": [{"name": "fake", "cluster": {"server": "https://127.0.0.1:1"}}],'
            ' "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}', None),
        "an alias to an exec block": (
            "current-context: fake\n"
            f"x-evil: &evil\n  exec: {json.dumps(program)}\n"
            "users:\n- name: fake\n  user: *evil\n"
            f"clusters:\n- name: fake\n  cluster: {{server: '{kube.url}'}}\n"
            "contexts:\n- name: fake\n  context: {cluster: fake, user: fake}\n", None),
        "a merge key bringing exec in": (
            "current-context: fake\n"
            f"users:\n- name: fake\n  user:\n    <<: {{exec: {json.dumps(program)}}}\n    token: t\n"
            f"clusters:\n- name: fake\n  cluster: {{server: '{kube.url}'}}\n"
            "contexts:\n- name: fake\n  context: {cluster: fake, user: fake}\n", None),
        "a python tag": (f"!!python/object/apply:os.system ['touch {marker}']\n", None),
        "two documents, exec in the second": (
            json.dumps(config_for(kube, [{"name": "fake", "user": {"token": TOKEN}}])) + "\n---\n"
            + json.dumps(config_for(kube, [{"name": "fake", "user": exec_user}])), None),
        "billion laughs": ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
                           "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c]\n", None),
        "nested too deep": ("[" * 50_000 + "]" * 50_000, None),
        "a token file outside the roots": (
            json.dumps(config_for(kube, [{"name": "fake", "user": {"tokenFile": str(outside)}}])), None),
        "a token file that never ends": (
            json.dumps(config_for(kube, [{"name": "fake", "user": {"tokenFile": "/dev/zero"}}])), None),
        "a CA file outside the roots": (
            json.dumps({**config_for(kube, [{"name": "fake", "user": {"token": TOKEN}}]),
                        "clusters": [{"name": "fake", "cluster": {"server": kube.url,
                                                                  "certificate-authority": str(outside)}}]}), None),
        "a client key": (json.dumps(config_for(kube, [{"name": "fake", "user": {"client-key-data": "eA=="}}])), None),
        "impersonation": (json.dumps(config_for(kube, [{"name": "fake", "user": {"token": TOKEN, "as": "admin"}}])), None),
        "a proxy": (json.dumps({**config_for(kube, [{"name": "fake", "user": {"token": TOKEN}}]),
                                "clusters": [{"name": "fake", "cluster": {"server": kube.url,
                                                                          "proxy-url": "http://127.0.0.1:9"}}]}), None),
        "a token over plain http to another host": (
            json.dumps({**config_for(kube, [{"name": "fake", "user": {"token": TOKEN}}]),
                        "clusters": [{"name": "fake", "cluster": {"server": "http://203.0.113.9"}}]}), None),
    }  # fmt: skip
    return configs
