"""The GKE deploy job reads why a pod is not ready (tpu_devops/gke/pods.py, rollout.py): pod status and
the namespace's events through the official kubernetes client against the fake API server. A pod that
will never start ends the job at the first poll that sees its cause, with that cause and its fix; a pod
whose vLLM boots, or that waits for a node that is coming, is waited on.

Times: polls every 0.05 s; "within a minute" holds for the default 15 s poll because the job ends at
the first poll after the cause appears (counted in pod listings, not in seconds)."""

from __future__ import annotations

import inspect
from pathlib import Path

import anyio
import pytest

from tests.fakes.kube_api import FakeKube
from tpu_devops.gke import deploy, pods
from tpu_devops.host.jobs import JOBS

pytestmark = pytest.mark.anyio
LOCATION = "us-west4-a"
NS, DEPLOYMENT = "default", "vllm-gemma4-e2b"
IMAGE = "vllm/vllm-tpu:v0.99.0"
OOM_LOG = Path(__file__).parent / "data" / "vllm-logs" / "v5e1-e2b-util095-program-oom.log"


@pytest.fixture
def kube():
    with FakeKube() as fake:
        fake.add_secret(NS, f"{DEPLOYMENT}-secrets", {"hf_token": "hf_x", "api_key": "k"})
        yield fake


def container(state: dict, *, restarts: int = 0, last: dict | None = None, started: bool = False) -> dict:
    c = {"name": "vllm", "image": IMAGE, "imageID": "", "ready": False, "started": started,
         "restartCount": restarts, "state": state}  # fmt: skip
    if last:
        c["lastState"] = last
    return c


def pending(reason: str = "Unschedulable", message: str = "0/3 nodes are available") -> dict:
    return {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}]}  # fmt: skip


def running_with(c: dict) -> dict:
    return {"phase": "Running", "containerStatuses": [c], "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]}  # fmt: skip


def pod_lists(kube: FakeKube) -> int:
    return sum(1 for m, path, _ in kube.requests if m == "GET" and path.endswith(f"/namespaces/{NS}/pods"))


async def start(gcp_settings, fake_gcp, kube, tmp_path, **kw) -> object:
    fake_gcp.container.add_cluster(LOCATION, "gemma")
    result = await deploy.apply_gke_deployment(
        gcp_settings.model_copy(update={"vllm_image": IMAGE}), cluster="gemma",
        kubeconfig=kube.kubeconfig(tmp_path / "kubeconfig"), replicas=kw.pop("replicas", 1),
        poll_interval_s=0.05, wait_timeout_s=kw.pop("wait_timeout_s", 60), **kw,
    )  # fmt: skip
    job = JOBS.get(result.job_id)
    with anyio.fail_after(30):  # a bound for a stuck job, not a speed assertion
        while "booting" not in job.message and job.state == "running":
            await anyio.sleep(0.02)
    return job


async def ended(job, kube: FakeKube, cause_at: int) -> dict:
    with anyio.fail_after(30):
        while job.state == "running":
            await anyio.sleep(0.02)
    polls_after = pod_lists(kube) - cause_at
    assert polls_after <= 2, f"the job went on for {polls_after} polls after the cause appeared"
    assert job.state == "failed", job.message
    return job.error


# ---- pods that will never start end the job with their cause ---------------------------------------


@pytest.mark.parametrize(
    "waiting_reason, waiting_message, event",
    [
        ("ErrImagePull", f'rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/{IMAGE}": '
         f'failed to resolve reference "docker.io/{IMAGE}": docker.io/{IMAGE}: not found', None),
        ("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"',
         f'Failed to pull image "{IMAGE}": rpc error: code = NotFound desc = failed to pull and unpack image: '
         "manifest unknown"),
        ("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"',
         f'Failed to pull image "{IMAGE}": failed to authorize: 401 Unauthorized'),
        ("InvalidImageName", f'Failed to apply default image tag "{IMAGE}": invalid reference format', None),
    ],
)  # fmt: skip
async def test_an_image_that_cannot_be_pulled_ends_the_job_naming_the_image(
    gcp_settings, fake_gcp, kube, tmp_path, waiting_reason, waiting_message, event
) -> None:
    job = await start(gcp_settings, fake_gcp, kube, tmp_path)
    if event:
        kube.add_event(NS, "Pod", f"{DEPLOYMENT}-0", "Failed", event)
        kube.add_event(NS, "Pod", f"{DEPLOYMENT}-0", "Failed", f"Error: {waiting_reason}")
    at = pod_lists(kube)
    kube.set_pod_status(NS, DEPLOYMENT, 0, running_with(container({"waiting": {
        "reason": waiting_reason, "message": waiting_message}})) | {"phase": "Pending"})  # fmt: skip
    error = await ended(job, kube, at)
    assert error["kind"] == "config" and error["field"] == "VLLM_IMAGE"
    assert (
        "will never start" in error["message"]
        and IMAGE in error["message"]
        and waiting_reason in error["message"]
    )
    assert "VLLM_IMAGE" in error["fix"] and "first boot compiles" not in error["fix"]


async def test_a_transient_pull_error_is_waited_on(gcp_settings, fake_gcp, kube, tmp_path) -> None:
    job = await start(gcp_settings, fake_gcp, kube, tmp_path, wait_timeout_s=1)
    kube.set_pod_status(NS, DEPLOYMENT, 0, running_with(container({"waiting": {
        "reason": "ErrImagePull", "message": "dial tcp: lookup registry-1.docker.io: i/o timeout"}})))  # fmt: skip
    with anyio.fail_after(30):
        while job.state == "running":
            await anyio.sleep(0.02)
    assert "after 1 s" in job.error["message"] and "i/o timeout" in job.error["message"]


@pytest.mark.parametrize(
    "reason, message, kind, field, words",
    [
        ("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity/selector",
         "config", "ACCELERATOR_TYPE", "tpu-v5-lite-podslice"),
        ("NotTriggerScaleUp", "pod didn't trigger scale-up (it wouldn't fit if a new node is added): "
         "1 max node group size reached", "config", "max_replicas", "maximum size"),
        ("FailedScaleUp", "Node scale up in zones us-west4-a associated with this pod failed: GCE quota exceeded. "
         "Pod is at risk of not being scheduled.", "quota", "replicas", "compute.googleapis.com"),
    ],
)  # fmt: skip
async def test_a_pod_no_node_will_take_ends_the_job_with_the_autoscalers_reason(
    gcp_settings, fake_gcp, kube, tmp_path, reason, message, kind, field, words
) -> None:
    job = await start(gcp_settings, fake_gcp, kube, tmp_path)
    kube.add_event(NS, "Pod", f"{DEPLOYMENT}-0", "FailedScheduling",
                   "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.", source="default-scheduler")  # fmt: skip
    at = pod_lists(kube)
    kube.set_pod_status(NS, DEPLOYMENT, 0, pending())
    kube.add_event(NS, "Pod", f"{DEPLOYMENT}-0", reason, message, type="Normal" if reason.startswith("Not") else "Warning",
                   source="cluster-autoscaler")  # fmt: skip
    error = await ended(job, kube, at)
    assert error["kind"] == kind and error["field"] == field, error
    assert message.split(":")[0] in error["message"] and words in error["message"] + error["fix"]


async def test_a_namespace_resource_quota_that_refuses_the_pods_ends_the_job(
    gcp_settings, fake_gcp, kube, tmp_path
) -> None:
    job = await start(gcp_settings, fake_gcp, kube, tmp_path)
    at = pod_lists(kube)
    kube.pods[(NS, DEPLOYMENT)].clear()  # the ReplicaSet could not create the pod
    kube.add_event(NS, "ReplicaSet", f"{DEPLOYMENT}-7d9c8b", "FailedCreate",
                   f'Error creating: pods "{DEPLOYMENT}-7d9c8b-x2" is forbidden: exceeded quota: tpu-quota, '
                   "requested: requests.google.com/tpu=1, used: requests.google.com/tpu=4, limited: requests.google.com/tpu=4",
                   source="replicaset-controller")  # fmt: skip
    error = await ended(job, kube, at)
    assert error["kind"] == "quota" and error["field"] == "namespace" and "exceeded quota" in error["message"]
    assert "ResourceQuota" in error["fix"]


async def test_a_missing_secret_key_ends_the_job(gcp_settings, fake_gcp, kube, tmp_path) -> None:
    job = await start(gcp_settings, fake_gcp, kube, tmp_path)
    at = pod_lists(kube)
    kube.set_pod_status(NS, DEPLOYMENT, 0, running_with(container({"waiting": {
        "reason": "CreateContainerConfigError",
        "message": f'couldn\'t find key api_key in Secret {NS}/{DEPLOYMENT}-secrets'}})))  # fmt: skip
    error = await ended(job, kube, at)
    assert error["field"] == "secret" and "api_key" in error["message"] and "kubectl" in error["fix"]


async def test_a_crash_loop_ends_the_job_with_vllms_own_root_cause(
    gcp_settings, fake_gcp, kube, tmp_path
) -> None:
    job = await start(gcp_settings, fake_gcp, kube, tmp_path)
    kube.pod_logs[(NS, f"{DEPLOYMENT}-0", True)] = OOM_LOG.read_text()
    at = pod_lists(kube)
    kube.set_pod_status(NS, DEPLOYMENT, 0, running_with(container(
        {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container=vllm"}},
        restarts=2, last={"terminated": {"exitCode": 1, "reason": "Error"}})))  # fmt: skip
    error = await ended(job, kube, at)
    assert "exits during boot (exit code 1, Error; restarted 2 time(s))" in error["message"]
    assert (
        "jit_structured_decode_fn" in error["message"]
        or "RuntimeProgramAllocationFailure" in error["message"]
    )
    assert "0.92" in error["fix"]


# ---- pods that are really coming are waited on -------------------------------------------------------


@pytest.mark.parametrize(
    "status, event, said",
    [
        (None, None, "vLLM is booting"),
        ("pending", ("TriggeredScaleUp", "pod triggered scale-up: [{https://www.googleapis.com/compute/v1/projects/"
                     "demo-project/zones/us-west4-a/instanceGroups/gke-gemma-tpu 0->1 (max: 1)}]"), "a node is being added"),
        ("pending", ("FailedScaleUp", "Node scale up in zones us-west4-a associated with this pod failed: GCE out of "
                     "resources. Pod is at risk of not being scheduled."), "no TPU capacity"),
        ("creating", None, "the container is being created"),
    ],
)  # fmt: skip
async def test_booting_and_coming_pods_are_waited_on_and_the_timeout_says_which(
    gcp_settings, fake_gcp, kube, tmp_path, status, event, said
) -> None:
    job = await start(gcp_settings, fake_gcp, kube, tmp_path, wait_timeout_s=1)
    if status == "pending":
        kube.set_pod_status(NS, DEPLOYMENT, 0, pending())
    elif status == "creating":
        kube.set_pod_status(
            NS, DEPLOYMENT, 0, running_with(container({"waiting": {"reason": "ContainerCreating"}}))
        )
    if event:
        kube.add_event(NS, "Pod", f"{DEPLOYMENT}-0", *event, source="cluster-autoscaler")
    with anyio.fail_after(30):
        while job.state == "running":
            await anyio.sleep(0.02)
    assert job.error["field"] == "wait_timeout_s" and said in job.error["message"]
    booting = status in (None, "creating")
    assert ("first boot compiles" in job.error["fix"]) is booting


async def test_a_pod_that_becomes_ready_after_a_wait_succeeds(gcp_settings, fake_gcp, kube, tmp_path) -> None:
    job = await start(gcp_settings, fake_gcp, kube, tmp_path)
    kube.set_pod_status(NS, DEPLOYMENT, 0, pending())
    kube.add_event(
        NS,
        "Pod",
        f"{DEPLOYMENT}-0",
        "TriggeredScaleUp",
        "pod triggered scale-up",
        source="cluster-autoscaler",
    )
    await anyio.sleep(0.2)
    assert job.state == "running" and "a node is being added" in job.message
    kube.mark_ready(NS, DEPLOYMENT)
    with anyio.fail_after(30):
        while job.state == "running":
            await anyio.sleep(0.02)
    assert job.state == "succeeded" and job.result["ready_pods"] == 1


async def test_events_of_an_earlier_rollout_or_of_other_objects_do_not_count(
    gcp_settings, fake_gcp, kube, tmp_path
) -> None:
    kube.add_event(NS, "Pod", f"{DEPLOYMENT}-0", "NotTriggerScaleUp", "pod didn't trigger scale-up: 1 node(s) didn't "
                   "match Pod's node affinity/selector", at="2020-01-01T00:00:00Z")  # fmt: skip
    kube.add_event(NS, "Pod", "someone-elses-pod", "FailedScaleUp", "GCE quota exceeded")
    job = await start(gcp_settings, fake_gcp, kube, tmp_path, wait_timeout_s=1)
    kube.set_pod_status(NS, DEPLOYMENT, 0, pending())
    with anyio.fail_after(30):
        while job.state == "running":
            await anyio.sleep(0.02)
    assert job.error["field"] == "wait_timeout_s", job.error


def test_the_default_poll_ends_a_stuck_job_within_a_minute() -> None:
    default = inspect.signature(deploy.apply_gke_deployment).parameters["poll_interval_s"].default
    assert default * 2 <= 60  # the job ends at the first or second poll after the cause appears


def test_event_text_is_matched_as_data_and_bounded(gcp_settings) -> None:
    report = pods.diagnose_pod(
        gcp_settings,
        {"metadata": {"name": "p"}, "status": pending()},
        [{"reason": "NotTriggerScaleUp", "message": "$(rm -rf /) " + "x" * 5000}],
        pool_ready=True,
    )
    assert report.state == "waiting" and len(report.detail) < 600
