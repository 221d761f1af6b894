"""GKE (opt-in): many one-chip TPU nodes past one host. Plan (render and dry-run), apply, benchmark and
tear down a vLLM deployment labelled as this rig's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver.resolve import Resolve
from pydantic import Field

import tpu_devops
from tpu_devops.config import get_settings
from tpu_devops.host.toolsets import DESTROY, LOADS, READ, WRITE_ONCE, Toolset
from tpu_devops.tools.args import (
    SANE,
    BenchmarkSweep,
    Confirmation,
    GkeShape,
    GkeTarget,
    PollInterval,
    WaitTimeout,
)

if TYPE_CHECKING:  # the checker reads the submodules named below; at run time each loads on first use
    import tpu_devops.gke.deploy
    import tpu_devops.gke.manifests
    import tpu_devops.host.confirmation
    import tpu_devops.serving.benchmark

toolset = Toolset("gke", "plan, apply, benchmark and tear down vLLM on GKE TPU node pools", default=False)
tool = toolset.tool


@tool(title="Plan a GKE deployment (dry run)", kind=READ, open_world=True)
async def plan_gke_deployment(target: GkeTarget, shape: GkeShape) -> tpu_devops.gke.manifests.GkePlan:
    """Render and dry-run the GKE deployment.

    Render the GKE deployment from the same flags as the startup script: a TPU v5e node pool request
    (ct5lp-hightpu-1t, spot or flex-start), a vLLM Deployment (pinned image, google.com/tpu, GKE TPU node
    selectors, key and token from a Secret, /health probes sized for a cold boot), a Service, a PodMonitoring
    and an autoscaler on vllm:num_requests_waiting. Every manifest is validated offline against the
    Kubernetes schemas, and the cluster's API server dry-runs each object (reached through the GKE API with
    this server's Google credentials; a kubeconfig is read as data: no exec or auth-provider plugin runs
    unless it is the operator's TPU_DEVOPS_KUBECONFIG). A LoadBalancer's source_ranges follow the VM
    firewall's rule: more than a /16 of public addresses needs open_to_internet. Changes nothing."""
    return await tpu_devops.gke.deploy.plan_gke_deployment(
        get_settings(), **target.values(), **shape.values()
    )


@tool(title="Deploy vLLM on GKE", kind=WRITE_ONCE, open_world=True)
async def apply_gke_deployment(
    target: GkeTarget,
    shape: GkeShape,
    create_node_pool: Annotated[bool, Field(description="create the TPU node pool")] = True,
    wait_timeout_s: WaitTimeout = 3600,
    poll_interval_s: PollInterval = 15,
) -> tpu_devops.gke.deploy.GkeApplyResult:
    """Job: create the GKE node pool and apply the manifests.

    Create the TPU node pool and apply the manifests of plan_gke_deployment (server-side apply, labelled
    managed-by=tpu-devops and the rig). Checks first and changes nothing if the Secret is missing, an object
    or node pool of the same name is not ours, or the dry run fails. Returns a job that waits for the pods;
    it ends early, with cause and fix, for a pod that will never start (image, scheduling, quota, selector)."""
    return await tpu_devops.gke.deploy.apply_gke_deployment(
        get_settings(),
        **target.values(),
        **shape.values(),
        create_node_pool=create_node_pool,
        wait_timeout_s=wait_timeout_s,
        poll_interval_s=poll_interval_s,
    )


@tool(title="Tear down our GKE deployment", kind=DESTROY, open_world=True)
async def teardown_gke_deployment(
    confirmation: Annotated[
        ElicitationResult[tpu_devops.host.confirmation.Confirmation],
        Resolve(tpu_devops.gke.deploy.resolve_gke_teardown_confirmation),
    ],
    target: GkeTarget,
    decision: Confirmation,
    delete_node_pool: Annotated[bool, Field(description="delete the TPU node pool")] = True,
) -> tpu_devops.gke.deploy.GkeTeardownResult:
    """Delete our GKE deployment by its labels (dry run first).

    Delete what apply_gke_deployment created, found by our labels only (managed-by=tpu-devops and this rig;
    the node pool by its resource labels), never by a name alone. Confirmed as destroy_queued_resource: a
    dry run unless confirm=true; deleting needs your answer when the host asks you, or the operator's
    standing permission (TPU_DEVOPS_UNATTENDED_DELETE) with the dry run's token; otherwise the answer gives
    the kubectl and gcloud commands that delete the plan."""
    return await tpu_devops.gke.deploy.teardown_gke_deployment(
        get_settings(),
        confirmation,
        **target.values(),
        delete_node_pool=delete_node_pool,
        **decision.values(),
    )


@tool(title="Benchmark the GKE deployment", kind=LOADS, open_world=True)
async def benchmark_gke_deployment(
    target: GkeTarget,
    sweep: BenchmarkSweep,
    base_url: Annotated[
        str | None, Field(max_length=2048, description="Service URL (port-forward)"), SANE
    ] = None,
) -> tpu_devops.serving.benchmark.BenchmarkStarted:
    """Job: benchmark our GKE Service, priced whole.

    run_benchmark's sweep driven at our GKE Service: total output tok/s, TTFT, TPOT and $/M output tokens
    for the whole deployment (ready replicas x chip price + the GKE cluster fee), and each replica's own
    share from its token counter (read through the pod proxy). A job: poll get_job."""
    return await tpu_devops.gke.deploy.benchmark_gke_deployment(
        get_settings(), **target.values(), base_url=base_url, **sweep.values()
    )
