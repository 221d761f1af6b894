"""How the GKE tools reach a cluster (`tpu_devops.gke.connect`): through the GKE API (endpoint and CA from the
fake's ``clusters.get``, checked against the container v1 discovery document; TLS verified; the server's
own Google token), and a kubeconfig handed in only as data. Every hostile kubeconfig below would run a
program that creates a marker file: the marker must never appear, whatever the tool, the context or the
YAML trick; the operator's own kubeconfig (``TPU_DEVOPS_KUBECONFIG``) is the one whose plugin runs."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.audit.kubeconfigs import config_for, hostile_kubeconfigs, marker_program
from tests.fakes.kube_api import TOKEN, FakeKube
from tpu_devops.errors import CloudError, ConfigError, InputError, NotFoundError
from tpu_devops.gke import connect, deploy

pytestmark = pytest.mark.anyio
LOCATION = "us-west4-a"


@pytest.fixture
def kube():
    with FakeKube() as fake:
        yield fake


@pytest.fixture
def cluster(fake_gcp, kube):
    fake_gcp.container.add_cluster(LOCATION, "gemma", kube=kube)
    return "gemma"


# ---- the GKE API path ----------------------------------------------------------------------------------


async def test_the_default_path_reaches_the_cluster_through_the_gke_api_over_verified_tls(
    gcp_settings, fake_gcp, kube, cluster
) -> None:
    kube.add_secret("default", "vllm-gemma4-e2b-secrets", {"hf_token": "hf_x", "api_key": "k"})
    plan = await deploy.plan_gke_deployment(gcp_settings, cluster=cluster, replicas=2)
    assert plan.server_dry_run and all(" ok" in line for line in plan.server_dry_run), plan.server_dry_run
    applied = await deploy.apply_gke_deployment(
        gcp_settings, cluster=cluster, poll_interval_s=0.05, wait_timeout_s=5
    )
    assert len(applied.applied) == 4
    dry = await deploy.teardown_gke_deployment(gcp_settings, cluster=cluster)
    assert {s.kind for s in dry.steps} >= {"Deployment", "Service"}
    assert kube.requests and set(kube.authorizations) == {None}  # anonymous credentials of the fakes
    assert f"projects/demo-project/locations/{LOCATION}/clusters/gemma" in fake_gcp.container.cluster_reads
    assert fake_gcp.rejections == []


async def test_a_cluster_whose_certificate_does_not_match_its_ca_is_refused(
    gcp_settings, fake_gcp, kube
) -> None:
    with FakeKube() as other:
        fake_gcp.container.add_cluster(LOCATION, "gemma", kube=kube)
        path = f"projects/demo-project/locations/{LOCATION}/clusters/gemma"
        import base64

        fake_gcp.container.cluster_info[path]["masterAuth"]["clusterCaCertificate"] = base64.b64encode(
            other.ca_pem.encode()
        ).decode()
        with pytest.raises(CloudError) as err:
            await deploy.plan_gke_deployment(gcp_settings, cluster="gemma")
    assert "did not answer" in err.value.message and kube.requests == []


async def test_a_missing_cluster_leaves_the_plan_offline_and_says_so_and_a_private_one_names_the_fix(
    gcp_settings, fake_gcp, kube
) -> None:
    plan = await deploy.plan_gke_deployment(gcp_settings, cluster="nowhere")
    assert plan.server_dry_run == [] and any(
        "validated offline only" in n and "nowhere" in n for n in plan.notes
    )
    with pytest.raises(NotFoundError):
        await deploy.teardown_gke_deployment(gcp_settings, cluster="nowhere")
    fake_gcp.container.add_cluster(LOCATION, "private")  # no endpoint, no CA
    with pytest.raises(ConfigError) as err:
        await deploy.plan_gke_deployment(gcp_settings, cluster="private")
    assert err.value.field == "cluster" and "TPU_DEVOPS_KUBECONFIG" in (err.value.fix or "")


async def test_the_servers_google_token_is_sent_and_refreshed_when_it_expires(kube, tmp_path) -> None:
    """google-auth credentials as ADC gives them: an access token that expires, refreshed at a token
    endpoint (a loopback fake of Google's OAuth 2.0 token endpoint here)."""
    import datetime

    from google.oauth2.credentials import Credentials
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tests.fakes.http_runner import ServerThread
    from tpu_devops.gke.kube import Kube

    issued = []

    async def token(request):  # noqa: ANN001, ANN202
        issued.append(f"ya29.fresh-{len(issued)}")
        kube.google_tokens.add(issued[-1])
        return JSONResponse({"access_token": issued[-1], "expires_in": 3600, "token_type": "Bearer"})

    with ServerThread(Starlette(routes=[Route("/token", token, methods=["POST"])])) as oauth:
        kube.google_tokens.add("ya29.first")
        creds = Credentials(token="ya29.first", refresh_token="r", client_id="c", client_secret="s",
                            token_uri=f"{oauth.url}/token")  # fmt: skip
        client = connect.bearer_client(kube.url, kube.ca_pem, creds)
        api = Kube(client)
        assert await anyio.to_thread.run_sync(api.secret_keys, "default", "none") is None
        creds.expiry = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(
            minutes=1
        )
        assert await anyio.to_thread.run_sync(api.secret_keys, "default", "none") is None
    assert issued == ["ya29.fresh-0"]
    assert kube.authorizations[-2:] == ["Bearer ya29.first", "Bearer ya29.fresh-0"]


def test_the_fake_gke_cluster_matches_the_discovery_document_and_the_client_library(kube) -> None:
    from google.cloud import container_v1

    from tests.fakes.gcp import discovery
    from tests.fakes.gcp.container import FakeContainer

    fake = FakeContainer()
    path = fake.add_cluster(LOCATION, "gemma", kube=kube)
    body = fake.cluster_info[path]
    checker = discovery.BodyChecker(discovery.load("container", "v1"))
    checker.check(body, {"$ref": "Cluster"}, "cluster", "cluster")
    assert checker.violations == []
    parsed = container_v1.Cluster.from_json(json.dumps(body))  # unknown fields would raise
    assert parsed.endpoint == kube.endpoint and parsed.master_auth.cluster_ca_certificate


# ---- hostile kubeconfigs: data only -----------------------------------------------------------------


async def test_no_hostile_kubeconfig_runs_a_program_or_reads_outside_the_roots(
    gcp_settings, fake_gcp, kube, cluster, tmp_path
) -> None:
    marker = tmp_path / "MARKER-never-created"
    outside = Path("/etc/hostname") if Path("/etc/hostname").exists() else Path("/etc/passwd")
    refused = {}
    for name, (text, context) in hostile_kubeconfigs(kube, marker, outside).items():
        path = tmp_path / f"kubeconfig-{len(refused)}"
        path.write_text(text)
        for tool in ("plan", "apply", "teardown", "benchmark"):
            with pytest.raises(InputError) as err:
                await _call(tool, gcp_settings, cluster, str(path), context)
            assert err.value.field == "kubeconfig" and "Traceback" not in str(err.value), (
                name,
                tool,
                err.value,
            )
            assert not marker.exists(), (name, tool)
        refused[name] = err.value.message
    assert kube.requests == []  # nothing reached the API server either
    assert "'exec'" in refused["exec"] and "'auth-provider'" in refused["auth-provider"]
    assert "appears twice" in refused["a key twice (users, then users with exec)"]
    assert "more than one user" in refused["a user named twice (clean, then exec)"]
    assert "anchors and aliases" in refused["an alias to an exec block"]
    assert "outside the directories" in refused["a token file outside the roots"]
    assert not marker.exists()


async def _call(tool: str, settings, cluster: str, kubeconfig: str, context: str | None):  # noqa: ANN001, ANN202
    target = {"cluster": cluster, "kubeconfig": kubeconfig, "context": context}
    if tool == "plan":
        return await deploy.plan_gke_deployment(settings, **target)
    if tool == "apply":
        return await deploy.apply_gke_deployment(settings, **target, wait_timeout_s=5, poll_interval_s=0.05)
    if tool == "teardown":
        return await deploy.teardown_gke_deployment(settings, **target)
    return await deploy.benchmark_gke_deployment(settings, **target, concurrency=[1], prompt_lengths=[16])


async def test_an_exec_in_a_context_nobody_selects_is_never_looked_at(
    gcp_settings, kube, cluster, tmp_path
) -> None:
    marker = tmp_path / "MARKER"
    two = [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}},
           {"name": "evil", "context": {"cluster": "fake", "user": "evil"}}]  # fmt: skip
    users = [
        {"name": "fake", "user": {"token": TOKEN}},
        {"name": "evil", "user": {"exec": marker_program(marker)}},
    ]
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config_for(kube, users, contexts=two)))
    plan = await deploy.plan_gke_deployment(gcp_settings, cluster=cluster, kubeconfig=str(path))
    assert plan.server_dry_run and not marker.exists()


async def test_the_operators_own_kubeconfig_is_the_one_whose_plugin_runs(
    fake_gcp, kube, cluster, tmp_path
) -> None:
    from tests.conftest import gcp_environ
    from tpu_devops.config import load_settings

    marker = tmp_path / "MARKER-operator"
    trusted = tmp_path / "operator-kubeconfig"
    trusted.write_text(
        json.dumps(config_for(kube, [{"name": "fake", "user": {"exec": marker_program(marker)}}]))
    )
    settings = load_settings(environ=gcp_environ(fake_gcp, tmp_path, TPU_DEVOPS_KUBECONFIG=str(trusted)))
    plan = await deploy.plan_gke_deployment(settings, cluster=cluster, kubeconfig=str(trusted))
    assert plan.server_dry_run and marker.read_text() == "ran"
    marker.unlink()
    plan = await deploy.plan_gke_deployment(settings, cluster=cluster, context="fake")  # its context
    assert plan.server_dry_run and marker.exists()
    copy = tmp_path / "copy-of-it"
    copy.write_text(trusted.read_text())
    marker.unlink()
    with pytest.raises(InputError):  # the same content elsewhere is only data
        await deploy.plan_gke_deployment(settings, cluster=cluster, kubeconfig=str(copy))
    assert not marker.exists()


async def test_a_data_kubeconfig_with_a_token_file_inside_the_roots_works(
    gcp_settings, kube, cluster, tmp_path
) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    path = kube.kubeconfig(tmp_path / "kubeconfig", tokenFile=str(token))
    plan = await deploy.plan_gke_deployment(gcp_settings, cluster=cluster, kubeconfig=path)
    assert plan.server_dry_run and kube.authorizations[-1] == f"Bearer {TOKEN}"


def test_the_strict_loader_keeps_plain_kubeconfigs(tmp_path) -> None:
    doc = connect.parse_kubeconfig("apiVersion: v1\nusers:\n- name: a\n  user: {token: t}\n", "x")
    assert doc["users"][0]["user"] == {"token": "t"}
    with FakeKube() as kube:
        assert (
            connect.parse_kubeconfig(Path(kube.kubeconfig(tmp_path / "k")).read_text(), "k")["kind"]
            == "Config"
        )


async def test_kubectls_own_file_is_data_too_and_a_link_out_of_the_roots_is_refused(
    gcp_settings, kube, cluster, tmp_path, monkeypatch
) -> None:
    """A context alone reads kubectl's file ($KUBECONFIG, else ~/.kube/config) as data: its exec plugin
    (gcloud's get-credentials writes one) is refused with the fix, not run."""
    marker = tmp_path / "MARKER-kubectl"
    own = tmp_path / "kubectl-config"
    own.write_text(json.dumps(config_for(kube, [{"name": "fake", "user": {"exec": marker_program(marker)}}])))
    monkeypatch.setenv("KUBECONFIG", str(own))
    with pytest.raises(InputError) as err:
        await deploy.plan_gke_deployment(gcp_settings, cluster=cluster, context="fake")
    assert "'exec'" in err.value.message and "GKE API" in (err.value.fix or "") and not marker.exists()
    link = tmp_path / "link-kubeconfig"
    link.symlink_to("/etc/passwd")
    with pytest.raises(InputError) as err:
        await deploy.plan_gke_deployment(gcp_settings, cluster=cluster, kubeconfig=str(link))
    assert "outside the directories" in err.value.message
