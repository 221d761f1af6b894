"""GKE scale-out: manifests rendered from the one flag builder and validated offline against
the Kubernetes OpenAPI schemas; the node pool request checked against the container v1 discovery
document; apply and teardown through the official kubernetes client against a fake API server and
google-cloud-container against the fake GKE surface."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.conftest import gcp_environ
from tests.fakes.gcp import discovery
from tests.fakes.kube_api import FakeKube
from tpu_devops.config import load_settings
from tpu_devops.errors import ConfigError, InputError, OwnershipError, PermissionError_
from tpu_devops.gke import deploy, manifests
from tpu_devops.host.confirmation import ConfirmationError
from tpu_devops.host.jobs import JOBS
from tpu_devops.planning.startup import vllm_serve_flags

pytestmark = pytest.mark.anyio
LOCATION = "us-west4-a"


def by_kind(plan: manifests.GkePlan) -> dict[str, dict]:
    return {m.kind: m.manifest for m in plan.manifests}


# ---- rendering and offline validation -------------------------------------------------------------


def test_manifests_follow_the_flag_builder_and_validate_offline(gcp_settings) -> None:
    plan = manifests.render(gcp_settings, cluster="gemma", replicas=2, max_replicas=6)
    objects = by_kind(plan)
    assert set(objects) == {"Deployment", "Service", "PodMonitoring", "HorizontalPodAutoscaler"}
    for m in plan.manifests:
        if m.kind == "PodMonitoring":
            assert m.validated_against == []  # a custom resource: only the server's dry run checks it
        else:
            assert m.validated_against[0] == manifests.SCHEMA_MIN_VERSION and len(m.validated_against) == 2
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"] == vllm_serve_flags(gcp_settings.model_copy(update={"tensor_parallel_size": 1}))
    assert container["image"] == gcp_settings.vllm_image
    assert container["resources"]["limits"] == {"google.com/tpu": "1"}
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "1x1",
    }
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert env["VLLM_API_KEY"] == {"name": "vllm-gemma4-e2b-secrets", "key": "api_key"}
    assert env["HF_TOKEN"]["key"] == "hf_token"
    startup = container["startupProbe"]
    assert (
        startup["httpGet"]["path"] == "/health"
        and startup["periodSeconds"] * startup["failureThreshold"] >= 857
    )
    hpa = objects["HorizontalPodAutoscaler"]["spec"]
    assert (
        hpa["metrics"][0]["pods"]["metric"]["name"]
        == "prometheus.googleapis.com|vllm:num_requests_waiting|gauge"
    )
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)
    assert objects["Service"]["spec"]["type"] == "ClusterIP"
    assert "kind: Deployment" in plan.yaml and "HF_TOKEN=" not in plan.yaml
    assert "tpu-devops/rig=gemma4-e2b" in plan.secret_command


@pytest.mark.parametrize("pm", ["flex-start", "spot", "on-demand"])
def test_node_pool_request_matches_the_discovery_document(gcp_settings, pm: str) -> None:
    settings = gcp_settings.model_copy(update={"provisioning_model": pm})
    body = manifests.node_pool_body(settings, replicas=3, max_replicas=5)
    path = f"/v1/projects/demo-project/locations/{LOCATION}/clusters/gemma/nodePools"

    def verdict(pool: dict) -> discovery.Verdict:
        return discovery.validate(
            "POST", path, "", json.dumps({"nodePool": pool}).encode(), "application/json"
        )

    accepted = verdict(body)
    assert accepted.status == 0 and accepted.method_ids == [
        "container.projects.locations.clusters.nodePools.create"
    ]
    config = body["config"]
    assert config["machineType"] == "ct5lp-hightpu-1t" and "placementPolicy" not in body
    assert config["resourceLabels"] == {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    assert config.get("spot") is (True if pm == "spot" else None)
    assert config.get("flexStart") is (True if pm == "flex-start" else None)
    assert body["initialNodeCount"] == (0 if pm == "flex-start" else 3)
    auto, management = body["autoscaling"], body["management"]
    # flex-start as xpk and the GKE docs create it: auto-repair off, location policy ANY, total limits
    assert management == {"autoRepair": pm != "flex-start", "autoUpgrade": True}
    if pm == "on-demand":
        assert auto == {"enabled": True, "minNodeCount": 3, "maxNodeCount": 5}
    else:
        assert auto == {"enabled": True, "locationPolicy": "ANY", "totalMaxNodeCount": 5,
                        "totalMinNodeCount": 0 if pm == "flex-start" else 3}  # fmt: skip
    assert config.get("reservationAffinity") == (
        {"consumeReservationType": "NO_RESERVATION"} if pm == "flex-start" else None
    )
    refused = verdict({**body, "config": {**config, "flexstart": True}})
    assert refused.status == 400 and "flexstart" in refused.error_body(path)["error"]["message"]
    wrong = verdict({**body, "autoscaling": {**auto, "locationPolicy": "ANYWHERE"}})
    assert wrong.status == 400  # the enum is the discovery document's


def test_probes_time_out_as_tpu_inferences_gke_example(gcp_settings) -> None:
    pod = by_kind(manifests.render(gcp_settings, cluster="gemma"))["Deployment"]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    # tpu-inference examples/offload/gke/benchmarks/single-host/deploy-cpu-offload.yaml: 5 s, 2 s, 5 s
    assert (c["startupProbe"]["timeoutSeconds"], c["readinessProbe"]["timeoutSeconds"],
            c["livenessProbe"]["timeoutSeconds"]) == (5, 2, 5)  # fmt: skip
    assert all(
        c[p]["httpGet"]["path"] == "/health" for p in ("startupProbe", "readinessProbe", "livenessProbe")
    )


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"replicas": 0}, "replicas"),
        ({"replicas": 3, "max_replicas": 2}, "max_replicas"),
        ({"namespace": "Bad_NS"}, "namespace"),
        ({"cluster": "no such/cluster"}, "cluster"),
        ({"service_type": "NodePort"}, "service_type"),
        ({"service_type": "LoadBalancer"}, "source_ranges"),
        ({"service_type": "LoadBalancer", "source_ranges": []}, "source_ranges"),
        ({"service_type": "LoadBalancer", "source_ranges": ["0.0.0.0/0"]}, "source_ranges"),
        ({"service_type": "LoadBalancer", "source_ranges": ["0.0.0.0/00"]}, "source_ranges"),
        ({"service_type": "LoadBalancer", "source_ranges": ["10.0.0.0/08"]}, "source_ranges"),
        ({"service_type": "LoadBalancer", "source_ranges": ["010.0.0.0/8"]}, "source_ranges"),
        ({"service_type": "LoadBalancer", "source_ranges": ["2001:db8::/32"]}, "source_ranges"),
        ({"service_type": "LoadBalancer", "source_ranges": ["203.0.113.7/33"]}, "source_ranges"),
        ({"service_type": "LoadBalancer", "source_ranges": ["not-a-cidr"]}, "source_ranges"),
        ({"queue_target": 0}, "queue_target"),
        ({"location": "../../../../etc/passwd"}, "location"),
        ({"location": "us-west4-a/clusters/x"}, "location"),
        ({"location": ""}, "location"),
        ({"location": "us-central1"}, "location"),  # a region GOOGLE_CLOUD_ZONE (us-west4-a) is not in
    ],
)
def test_bad_arguments_are_named(gcp_settings, kw: dict, field: str) -> None:
    kw.setdefault("cluster", "gemma")
    with pytest.raises(ConfigError) as err:
        manifests.render(gcp_settings, **kw)
    assert err.value.field == field


def test_the_node_pool_goes_where_the_cluster_is(gcp_settings) -> None:
    zonal = manifests.render(gcp_settings, cluster="gemma", location="us-central1-b")
    assert zonal.node_pool["locations"] == ["us-central1-b"]
    assert zonal.node_pool_url == "projects/demo-project/locations/us-central1-b/clusters/gemma/nodePools"
    regional = manifests.render(gcp_settings, cluster="gemma", location="us-west4")
    assert regional.node_pool["locations"] == ["us-west4-a"] and regional.location == "us-west4"


def test_load_balancer_is_limited_to_the_given_ranges_normalised_as_the_firewalls(gcp_settings) -> None:
    plan = manifests.render(
        gcp_settings, cluster="gemma", service_type="LoadBalancer",
        source_ranges=["203.0.113.7", "198.51.100.9/24", "203.0.113.7/32", "10.0.0.0/8"],
    )  # fmt: skip
    spec = by_kind(plan)["Service"]["spec"]
    assert spec["type"] == "LoadBalancer"
    assert spec["loadBalancerSourceRanges"] == ["203.0.113.7/32", "198.51.100.0/24", "10.0.0.0/8"]
    assert not any("OPEN TO THE INTERNET" in n for n in plan.notes)


@pytest.mark.parametrize(
    "ranges",
    [
        ["0.0.0.0/0"],
        ["0.0.0.0/1", "128.0.0.0/1"],  # the whole internet in two halves
        ["8.0.0.0/7"],
        ["1.0.0.0/15"],  # one range just wider than a /16
        [f"{a}.0.0.0/16" for a in (11, 12)],  # two /16s: together more than one
        [f"34.{b}.0.0/18" for b in range(0, 256, 64)] + ["35.0.0.0/24"],  # many small ones
    ],
)
def test_ranges_that_together_open_more_than_a_block_need_open_to_internet_as_on_the_vm(
    gcp_settings, fake_gcp, tmp_path, ranges: list[str]
) -> None:
    """One rule for both paths (`tpu_devops.config.exposure`): the GKE LoadBalancer and the VM firewall."""
    import anyio

    from tpu_devops.provisioning.access import plan_access

    lb = {"cluster": "gemma", "service_type": "LoadBalancer", "source_ranges": ranges}
    with pytest.raises(ConfigError) as err:
        manifests.render(gcp_settings, **lb)
    assert err.value.field == "source_ranges" and "open_to_internet" in (err.value.fix or "")
    with pytest.raises(ConfigError) as vm:
        anyio.run(lambda: plan_access(gcp_settings, allowed_source_ranges=ranges, preview=True))
    assert vm.value.field == "allowed_source_ranges" and vm.value.message == err.value.message.replace(
        "the LoadBalancer on tcp:8000", "tcp:8000"
    )
    plan = manifests.render(gcp_settings, **lb, open_to_internet=True)
    assert by_kind(plan)["Service"]["spec"]["loadBalancerSourceRanges"] == ranges
    assert plan.notes[0].startswith("WARNING: the LoadBalancer on tcp:8000 OPEN TO THE INTERNET")
    assert "OPEN TO THE INTERNET" in plan.headline()


def test_private_and_small_public_sets_need_no_flag(gcp_settings) -> None:
    for ranges in (["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"], ["203.0.113.0/24", "1.2.0.0/16"]):
        plan = manifests.render(
            gcp_settings, cluster="gemma", service_type="LoadBalancer", source_ranges=ranges
        )
        assert not any("OPEN" in n for n in plan.notes)


# ---- against the fake API server and the fake GKE surface ----------------------------------------


@pytest.fixture
def kube(tmp_path: Path):
    with FakeKube() as fake:
        yield fake


@pytest.fixture
def cluster(fake_gcp):
    fake_gcp.container.add_cluster(LOCATION, "gemma")
    return "gemma"


async def test_plan_runs_the_server_side_dry_run(gcp_settings, kube, cluster, tmp_path: Path) -> None:
    config = kube.kubeconfig(tmp_path / "kubeconfig")
    plan = await deploy.plan_gke_deployment(gcp_settings, cluster=cluster, replicas=2, kubeconfig=config)
    assert plan.server_dry_run == [f"{m.kind} {m.name}: ok (would create)" for m in plan.manifests]
    assert kube.objects == {}  # dryRun=All stored nothing
    patches = [q for method, _, q in kube.requests if method == "PATCH"]
    assert len(patches) == 4 and all(q == {"fieldManager": "tpu-devops", "dryRun": "All"} for q in patches)
    assert plan.usd_per_hour is not None and "GKE cluster fee" in plan.price


async def test_apply_checks_first_then_creates_and_waits(
    gcp_settings, fake_gcp, kube, cluster, tmp_path: Path
) -> None:
    config = kube.kubeconfig(tmp_path / "kubeconfig")
    kw = dict(
        cluster=cluster,
        kubeconfig=config,
        replicas=2,
        max_replicas=4,
        poll_interval_s=0.05,
        wait_timeout_s=30,
    )
    with pytest.raises(ConfigError) as err:
        await deploy.apply_gke_deployment(gcp_settings, **kw)
    assert err.value.field == "secret" and "kubectl" in err.value.fix
    assert not fake_gcp.container.requests and not kube.objects  # nothing changed
    kube.add_secret("default", "vllm-gemma4-e2b-secrets", {"hf_token": "hf_x", "api_key": "k"})
    result = await deploy.apply_gke_deployment(gcp_settings, **kw)
    assert result.applied == [
        f"{k} vllm-gemma4-e2b" for k in ("Deployment", "Service", "PodMonitoring", "HorizontalPodAutoscaler")
    ]
    assert "hf_x" not in result.render_text()
    pool = fake_gcp.container.clusters[f"projects/demo-project/locations/{LOCATION}/clusters/gemma"][
        "tpu-devops-gemma4-e2b"
    ]
    assert pool["config"]["flexStart"] is True
    stored = kube.objects[("deployments", "default", "vllm-gemma4-e2b")]
    assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tpu-devops"
    job = JOBS.get(result.job_id)
    with anyio.fail_after(60):
        while job.message == "started" or "0/2" not in job.message:
            await anyio.sleep(0.02)
    kube.mark_ready("default", "vllm-gemma4-e2b")
    with anyio.fail_after(60):
        while job.state == "running":
            await anyio.sleep(0.02)
    assert job.state == "succeeded" and job.result["ready_pods"] == 2
    assert fake_gcp.rejections == []
    assert {
        "container.projects.locations.clusters.nodePools.create",
        "container.projects.locations.operations.get",
    } <= set(fake_gcp.validator.accepted)


@pytest.mark.parametrize(
    "pm, metric, scripted, verdict",
    [
        ("flex-start", "PREEMPTIBLE_TPU_LITE_PODSLICE_V5", (16, 0), "enough"),
        ("spot", "PREEMPTIBLE_TPU_LITE_PODSLICE_V5", (4, 1), "enough_for_replicas"),
        ("on-demand", "TPU_LITE_PODSLICE_V5", (4, 3), "short"),
        ("on-demand", "TPU_LITE_PODSLICE_V5", None, "short"),  # the region reports no such quota: limit 0
    ],
)
async def test_the_plan_names_and_checks_the_compute_engine_quota_the_nodes_draw(
    gcp_settings, fake_gcp, pm: str, metric: str, scripted, verdict: str
) -> None:
    settings = gcp_settings.model_copy(update={"provisioning_model": pm})
    fake_gcp.compute.region_quotas["us-west4"] = {"CPUS": (24, 0)} | ({metric: scripted} if scripted else {})
    plan = await deploy.plan_gke_deployment(settings, cluster="gemma", replicas=2, max_replicas=4)
    q = plan.compute_quota
    assert q.service == "compute.googleapis.com" and q.metric == metric and q.region == "us-west4"
    assert q.verdict == verdict and (q.needed_for_replicas, q.needed_for_max_replicas) == (2, 4)
    assert metric in plan.render_text() and "TPUV5s" not in q.detail  # not the TPU API quota
    assert fake_gcp.rejections == [] and "compute.regions.get" in set(fake_gcp.validator.accepted)


async def test_apply_refuses_a_node_pool_its_quota_cannot_start(
    gcp_settings, fake_gcp, kube, cluster, tmp_path: Path
) -> None:
    from tpu_devops.errors import QuotaError

    kube.add_secret("default", "vllm-gemma4-e2b-secrets", {"hf_token": "hf_x", "api_key": "k"})
    fake_gcp.compute.region_quotas["us-west4"] = {"PREEMPTIBLE_TPU_LITE_PODSLICE_V5": (4, 4)}
    with pytest.raises(QuotaError) as err:
        await deploy.apply_gke_deployment(
            gcp_settings, cluster=cluster, kubeconfig=kube.kubeconfig(tmp_path / "k"), replicas=1
        )
    assert err.value.field == "replicas" and "PREEMPTIBLE_TPU_LITE_PODSLICE_V5" in err.value.message
    assert "TPU API quota does not apply" in err.value.fix
    assert not fake_gcp.container.requests and not kube.objects  # nothing created


async def test_an_unreadable_quota_is_said_not_guessed(gcp_settings, fake_gcp) -> None:
    fake_gcp.compute.denied.add("regions")
    plan = await deploy.plan_gke_deployment(gcp_settings, cluster="gemma")
    assert plan.compute_quota.verdict == "unchecked" and "compute.regions.get" in plan.compute_quota.detail
    v6e = gcp_settings.model_copy(update={"accelerator_type": "v6e-1", "runtime_version": "v2-alpha-tpuv6e"})
    plan = await deploy.plan_gke_deployment(v6e, cluster="gemma")
    assert plan.compute_quota.verdict == "unchecked" and plan.compute_quota.metric is None


async def test_apply_refuses_when_a_same_named_object_is_not_ours(
    gcp_settings, fake_gcp, kube, cluster, tmp_path: Path
) -> None:
    kube.add_secret("default", "vllm-gemma4-e2b-secrets", {"hf_token": "hf_x", "api_key": "k"})
    kube.add_object("services", "default", "vllm-gemma4-e2b", labels={"app": "someone-else"})
    with pytest.raises(OwnershipError) as err:
        await deploy.apply_gke_deployment(
            gcp_settings, cluster=cluster, kubeconfig=kube.kubeconfig(tmp_path / "k")
        )
    assert "not ours" in err.value.message
    assert not fake_gcp.container.requests
    assert list(kube.objects) == [("services", "default", "vllm-gemma4-e2b")]


async def test_teardown_deletes_only_what_carries_our_labels(
    gcp_settings, fake_gcp, kube, cluster, tmp_path: Path
) -> None:
    config = kube.kubeconfig(tmp_path / "kubeconfig")
    kube.add_secret("default", "vllm-gemma4-e2b-secrets", {"hf_token": "hf_x", "api_key": "k"})
    applied = await deploy.apply_gke_deployment(
        gcp_settings, cluster=cluster, kubeconfig=config, poll_interval_s=0.05, wait_timeout_s=600
    )
    kube.add_object("services", "default", "unrelated", labels={"app.kubernetes.io/managed-by": "tpu-devops"})
    kube.add_object(
        "deployments",
        "default",
        "other-rig",
        labels={**manifests.labels(gcp_settings), "tpu-devops/rig": "other"},
    )
    dry = await deploy.teardown_gke_deployment(gcp_settings, cluster=cluster, kubeconfig=config)
    # a teardown during the apply: the job waiting for these pods is ended first, and the dry run says so
    assert [(s.kind, s.name) for s in dry.steps] == [
        ("Job", f"{applied.job_id} (GKE apply)"),
        ("HorizontalPodAutoscaler", "vllm-gemma4-e2b"), ("PodMonitoring", "vllm-gemma4-e2b"),
        ("Service", "vllm-gemma4-e2b"), ("Deployment", "vllm-gemma4-e2b"), ("NodePool", "tpu-devops-gemma4-e2b"),
    ]  # fmt: skip
    assert not dry.executed and len(kube.objects) == 6 and dry.confirm_token is None and dry.next_call is None
    assert dry.how_to_delete == [
        "gcloud container clusters get-credentials gemma --location=us-west4-a --project=demo-project && "
        "kubectl -n default delete horizontalpodautoscaler.autoscaling/vllm-gemma4-e2b "
        "podmonitoring.monitoring.googleapis.com/vllm-gemma4-e2b service/vllm-gemma4-e2b "
        "deployment.apps/vllm-gemma4-e2b",
        "gcloud container node-pools delete tpu-devops-gemma4-e2b --cluster=gemma --location=us-west4-a "
        "--project=demo-project",
    ]
    # confirm=true (what a prompt-injected model can say) deletes nothing on a host that cannot ask, and
    # without the operator's standing permission no token counts: the refusal says how the person deletes
    unattended = gcp_settings.model_copy(update={"unattended_delete": True})
    allowed = await deploy.teardown_gke_deployment(unattended, cluster=cluster, kubeconfig=config)
    for args in ({"dry_run": False}, {"confirm": True}, {"confirm": True, "confirm_token": "a" * 16},
                 {"confirm": True, "confirm_token": allowed.confirm_token}):  # fmt: skip
        with pytest.raises(ConfirmationError) as err:
            await deploy.teardown_gke_deployment(gcp_settings, cluster=cluster, kubeconfig=config, **args)
        text = str(err.value)
        assert "nothing was deleted" in text and "confirm_token=" not in text
        assert dry.how_to_delete[1] in text and "TPU_DEVOPS_UNATTENDED_DELETE=gemma4-e2b" in text
    assert len(kube.objects) == 6
    # under the standing permission, the dry run's token for exactly this plan deletes
    dry = await deploy.teardown_gke_deployment(unattended, cluster=cluster, kubeconfig=config)
    assert dry.confirm_token in dry.next_call
    with pytest.raises(ConfirmationError):  # another namespace is another plan: the token does not fit
        await deploy.teardown_gke_deployment(
            unattended, cluster=cluster, kubeconfig=config, namespace="other", confirm=True,
            confirm_token=dry.confirm_token,
        )  # fmt: skip
    assert JOBS.get(applied.job_id).state == "running" and "would end job(s)" in dry.headline()
    # the TPU teardown does not end it (it deletes no GKE object) but names it as left running
    from tpu_devops.provisioning.teardown import plan_destroy

    tpu_plan = await plan_destroy(gcp_settings, zone=None, queued_resource_id=None)
    assert not [s for s in tpu_plan.steps if s.action == "end_job"]
    assert any(applied.job_id in line and "teardown_gke_deployment" in line for line in tpu_plan.left_running)
    done = await deploy.teardown_gke_deployment(
        unattended, cluster=cluster, kubeconfig=config, confirm=True, confirm_token=dry.confirm_token
    )
    assert done.executed and all(s.done for s in done.steps)
    job = JOBS.get(applied.job_id)
    assert job.state == "cancelled" and "torn down" in job.message, job.snapshot()
    assert sorted(kube.objects) == [
        ("deployments", "default", "other-rig"),
        ("services", "default", "unrelated"),
    ]
    assert fake_gcp.container.clusters[f"projects/demo-project/locations/{LOCATION}/clusters/gemma"] == {}
    assert fake_gcp.rejections == []


async def test_teardown_leaves_a_node_pool_without_our_labels(
    gcp_settings, fake_gcp, kube, cluster, tmp_path: Path
) -> None:
    path = f"projects/demo-project/locations/{LOCATION}/clusters/gemma"
    fake_gcp.container.clusters[path]["tpu-devops-gemma4-e2b"] = {
        "name": "tpu-devops-gemma4-e2b",
        "config": {"resourceLabels": {"team": "x"}},
    }
    result = await deploy.teardown_gke_deployment(
        gcp_settings, cluster=cluster, kubeconfig=kube.kubeconfig(tmp_path / "k")
    )
    assert result.steps == [] and "tpu-devops-gemma4-e2b" in result.left_alone[0]


async def test_wrong_credentials_and_missing_kubeconfig_are_clear(
    gcp_settings, kube, cluster, tmp_path: Path
) -> None:
    config = kube.kubeconfig(tmp_path / "kubeconfig", token="wrong")
    with pytest.raises(PermissionError_) as err:
        await deploy.plan_gke_deployment(gcp_settings, cluster=cluster, kubeconfig=config)
    assert err.value.field == "credentials"
    with pytest.raises(InputError) as err:
        await deploy.plan_gke_deployment(gcp_settings, cluster=cluster, kubeconfig=str(tmp_path / "none"))
    assert err.value.field == "kubeconfig"
    # outside the readable roots, a file that exists and one that does not get the same answer
    answers = set()
    for outside in ("/etc/passwd", "/etc/no-such-kubeconfig-here", "/dev/zero"):
        with pytest.raises(InputError) as err:
            await deploy.plan_gke_deployment(gcp_settings, cluster=cluster, kubeconfig=outside)
        assert err.value.field == "kubeconfig"
        answers.add(err.value.message)
    assert len(answers) == 1 and "outside the directories" in answers.pop()


async def test_benchmark_at_the_service_prices_the_deployment_and_measures_each_replica(
    gcp_settings, fake_gcp, kube, cluster, tmp_path: Path
) -> None:
    from tests.fakes.openai_server import FakeVllm
    from tpu_devops.planning import pricing

    pricing.clear_cache()
    config = kube.kubeconfig(tmp_path / "kubeconfig")
    kube.add_secret("default", "vllm-gemma4-e2b-secrets", {"hf_token": "hf_x", "api_key": "k"})
    await deploy.apply_gke_deployment(
        gcp_settings, cluster=cluster, kubeconfig=config, replicas=2, poll_interval_s=0.05, wait_timeout_s=5
    )
    with pytest.raises(ConfigError) as err:  # nobody ready yet
        await deploy.benchmark_gke_deployment(gcp_settings, kubeconfig=config)
    assert err.value.field == "replicas"
    kube.mark_ready("default", "vllm-gemma4-e2b")
    with pytest.raises(ConfigError) as err:  # ClusterIP: reach it through a port-forward VLLM_URL names
        await deploy.benchmark_gke_deployment(gcp_settings, kubeconfig=config)
    assert err.value.field == "base_url" and "port-forward" in err.value.fix and "VLLM_URL" in err.value.fix
    with FakeVllm(ttft_s=0.005, itl_s=0.001, api_key="k") as pod0, FakeVllm() as pod1:
        # the pods require the key from their Secret ("k"): a loopback port no one configured is not the
        # Service (any process may listen there), in any spelling: neither the key nor the load goes there
        port = pod0.url.rsplit(":", 1)[1]
        for alias in (pod0.url, f"http://localhost:{port}", f"http://[::1]:{port}", f"http://0.0.0.0:{port}",
                      f"http://2130706433:{port}", f"http://0x7f000001:{port}", f"http://localhost.:{port}"):  # fmt: skip
            with pytest.raises(InputError) as err:
                await deploy.benchmark_gke_deployment(gcp_settings, kubeconfig=config, base_url=alias)
            assert err.value.field == "base_url" and "VLLM_URL" in err.value.fix
        assert pod0.auth_headers_seen == [] and pod1.auth_headers_seen == []
        # a port-forward reaches one pod: pod 0 serves the whole sweep, pod 1 stays idle
        kube.pod_backends[("default", "vllm-gemma4-e2b-0")] = pod0.url
        kube.pod_backends[("default", "vllm-gemma4-e2b-1")] = pod1.url
        operator = load_settings(environ={**gcp_environ(fake_gcp, tmp_path), "VLLM_URL": pod0.url})
        started = await deploy.benchmark_gke_deployment(
            operator, kubeconfig=config, base_url=pod0.url, concurrency=[2], prompt_lengths=[16],
            output_len=4, requests_per_cell=2,
        )  # fmt: skip
        job = JOBS.get(started.job_id)
        assert job.kind == "gke-benchmark"
        with anyio.fail_after(30):
            while job.state == "running":
                await anyio.sleep(0.05)
    assert job.state == "succeeded", job.error
    result = job.result
    sweep = result["benchmark"]
    assert sweep["replicas"] == 2
    price = sweep["price"]
    assert price["chips"] == 2 and price["usd_per_hour"] == pytest.approx(
        2 * price["usd_per_chip_hour"] + 0.10
    )
    by_pod = {r["pod"]: r for r in result["replicas"]}
    # every generated token of the sweep (calibration probes included) was counted on pod 0, none on pod 1
    assert (
        by_pod["vllm-gemma4-e2b-0"]["generated_tokens"] >= 2 * 4 and by_pod["vllm-gemma4-e2b-0"]["share"] == 1
    )
    assert by_pod["vllm-gemma4-e2b-1"]["generated_tokens"] == 0
    assert any("uneven load" in f for f in result["findings"])
    assert (
        "per replica, mean of 2" in job.result_text
        and "vllm-gemma4-e2b-1: 0 tokens (0% of all)" in job.result_text
    )
    pricing.clear_cache()


async def test_gke_tools_over_stdio(fake_gcp, tmp_path: Path) -> None:
    from tests.conftest import gcp_environ
    from tests.mcp_session import mcp_client

    async with mcp_client(**gcp_environ(fake_gcp, tmp_path)) as client:
        result = await client.call_tool("plan_gke_deployment", {"cluster": "gemma", "replicas": 2})
        assert not result.is_error, result.content[0].text
        text = result.content[0].text
        assert "tpu-v5-lite-podslice" in text and "validated against Kubernetes 1.33.0" in text
        assert result.structured_content["node_pool"]["config"]["machineType"] == "ct5lp-hightpu-1t"
        bad = await client.call_tool(
            "plan_gke_deployment", {"cluster": "gemma", "service_type": "LoadBalancer"}
        )
        assert (
            bad.is_error and "source_ranges" in bad.content[0].text and "Traceback" not in bad.content[0].text
        )
        refused = await client.call_tool(
            "teardown_gke_deployment", {"cluster": "gemma", "kubeconfig": str(tmp_path / "nope")}
        )
        assert refused.is_error and "kubeconfig" in refused.content[0].text


async def test_fake_gke_refuses_a_nameless_node_pool_as_gke_does(fake_gcp, gcp_settings) -> None:
    """The one check the fake makes itself (the discovery document cannot say a pool needs a name),
    through the real client: GKE's own 400 wording, and the shared validator refused nothing."""
    from tpu_devops.errors import TpuDevopsError
    from tpu_devops.gcp import container

    parent = fake_gcp.container.add_cluster(LOCATION, "gemma")
    body = manifests.node_pool_body(gcp_settings, replicas=1, max_replicas=1)
    with pytest.raises(TpuDevopsError) as err:
        await anyio.to_thread.run_sync(container.create_node_pool, gcp_settings, parent, {**body, "name": ""})
    assert "Node_pool.name must be specified" in str(err.value)
    assert fake_gcp.rejections == [] and fake_gcp.container.clusters[parent] == {}
