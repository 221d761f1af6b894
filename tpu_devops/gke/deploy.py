"""Plan, apply and tear down the GKE deployment: the blast radius of DESIGN §2 on GKE.

- **Plan** renders and validates offline (`manifests.render`), then runs every object through the API
  server's dry run (server-side apply with ``dryRun=All``) and reports, per object, whether it would be
  created, updated (ours) or refused (exists, not ours). Nothing is stored. The API server is reached
  through the GKE API with the server's Google credentials, or a kubeconfig read as data
  (`tpu_devops.gke.connect`): no program a kubeconfig names ever runs.
- **Apply** checks before it changes anything: the Secret the pods read exists with its two keys; no
  object or node pool of the same name exists without our labels; the dry run passes for all four
  objects; a new node pool's Compute Engine quota covers ``replicas`` (`tpu_devops.gke.quota`). Then it
  creates the node pool (google-cloud-container) unless ``create_node_pool`` is false, applies the
  manifests, and returns a job that waits for the node pool operation and the ready pods, reading why a
  pod is not ready (`tpu_devops.gke.pods`): it ends early, with the cause and the fix, for a pod that
  will never start, and keeps waiting only while vLLM boots or nodes are coming.
- **Teardown** finds what to delete by our labels only (``app.kubernetes.io/managed-by=tpu-devops``,
  ``tpu-devops/rig=<id>``; the node pool by its ``resourceLabels``), never by a name alone; it is a dry run
  unless ``confirm=true``, and deleting needs a person (their answer when the host asks) or the operator's
  standing permission with the dry run's token (the rule of every destructive tool,
  `tpu_devops.host.confirmation`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from tpu_devops.catalog import resolve_accelerator_type
from tpu_devops.config import Settings, require_project
from tpu_devops.errors import (
    ConfigError,
    InputError,
    NotFoundError,
    OwnershipError,
    QuotaError,
    TpuDevopsError,
)
from tpu_devops.gcp import common
from tpu_devops.gke import manifests
from tpu_devops.gke.connect import api_client
from tpu_devops.gke.kube import KINDS, Kube
from tpu_devops.gke.quota import ComputeQuotaCheck, node_pool_quota
from tpu_devops.gke.rollout import observe, stuck_error
from tpu_devops.host import confirmation
from tpu_devops.host.results import ToolResult

# Delete order: the autoscaler first (it would scale the Deployment back up), the pods' owner last.
TEARDOWN_ORDER = ("HorizontalPodAutoscaler", "PodMonitoring", "Service", "Deployment")
SECRET_KEYS = ("hf_token", "api_key")
EVENT_SLACK_S = 5.0  # clock skew allowed between this machine and the API server's event times


def is_ours(obj: dict[str, Any] | None, settings: Settings) -> bool:
    """True when the object's labels carry all of our labels (managed-by and this rig)."""
    got = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return all(got.get(k) == v for k, v in manifests.labels(settings).items())


def node_pool_is_ours(pool: dict[str, Any], settings: Settings) -> bool:
    """True when the node pool's resourceLabels carry managed-by=tpu-devops and rig=<this rig>."""
    got = (pool.get("config") or {}).get("resourceLabels") or {}
    return all(got.get(k) == v for k, v in settings.rig_labels.items())


def _node_pool_name(settings: Settings, cluster: str, location: str) -> str:
    from tpu_devops.gcp.container import cluster_name

    return f"{cluster_name(require_project(settings), location, cluster)}/nodePools/{manifests.names(settings)['node_pool']}"


async def _price(settings: Settings, replicas: int, max_replicas: int) -> tuple[float | None, str | None]:
    """$/h at ``replicas`` one-chip nodes plus the GKE cluster fee, and a line saying where it came from."""
    from tpu_devops.catalog import resolve_accelerator_type
    from tpu_devops.planning import pricing
    from tpu_devops.planning.scaleout import GKE_CLUSTER_FEE_USD_PER_HOUR

    gen = resolve_accelerator_type(settings.accelerator_type).generation
    try:
        quote = await pricing.get_price(settings, accelerator_type=f"{gen.api_prefix}-{gen.cores_per_chip}")
    except TpuDevopsError as exc:
        return None, f"no price: {exc}"
    per_hour = replicas * quote.usd_per_chip_hour + GKE_CLUSTER_FEE_USD_PER_HOUR
    return round(per_hour, 4), (
        f"{replicas} node(s) x ${quote.usd_per_chip_hour:.4f}/chip-h {quote.provisioning_model} + "
        f"${GKE_CLUSTER_FEE_USD_PER_HOUR:.2f}/h GKE cluster fee = ${per_hour:,.2f}/h (up to "
        f"${max_replicas * quote.usd_per_chip_hour + GKE_CLUSTER_FEE_USD_PER_HOUR:,.2f}/h at {max_replicas}); {quote.label()}"
    )


async def _quota(settings: Settings, plan: manifests.GkePlan) -> ComputeQuotaCheck:
    """The Compute Engine quota check of the plan's node pool (`tpu_devops.gke.quota`)."""
    return await common.run_blocking(
        node_pool_quota, settings, zone=plan.node_pool["locations"][0], replicas=plan.replicas,
        max_replicas=plan.max_replicas,
    )  # fmt: skip


def _dry_run(kube: Kube, settings: Settings, plan: manifests.GkePlan) -> tuple[list[str], list[str]]:
    """Per object: ownership check, then the server's dry run. Returns (lines, refusals)."""
    lines, refused = [], []
    for m in plan.manifests:
        existing = kube.read(m.kind, plan.namespace, m.name)
        if existing is not None and not is_ours(existing, settings):
            refused.append(
                f"{m.kind} {m.name} exists in {plan.namespace} without our labels: not ours, left alone"
            )
            lines.append(f"{m.kind} {m.name}: REFUSED (exists, not ours)")
            continue
        kube.apply(m.manifest, dry_run=True)
        lines.append(f"{m.kind} {m.name}: ok (would {'update, ours' if existing else 'create'})")
    return lines, refused


async def plan_gke_deployment(
    settings: Settings, *, kubeconfig: str | None = None, context: str | None = None, **shape: Any
) -> manifests.GkePlan:
    """Render, validate offline, price, and dry-run on the cluster's API server (reached through the GKE API,
    or a kubeconfig read as data: `tpu_devops.gke.connect`); a cluster that does not exist yet leaves the
    plan validated offline, and says so.

    ``shape``: the keyword arguments of `manifests.render` (cluster, location, replicas, max_replicas,
    namespace, service_type, source_ranges, queue_target, open_to_internet).

    Raises:
        InputError: bad arguments or kubeconfig. CloudError / PermissionError_: the API server refused.
    """
    plan = manifests.render(settings, **shape)
    plan.usd_per_hour, plan.price = await _price(settings, plan.replicas, plan.max_replicas)
    plan.compute_quota = await _quota(settings, plan)
    try:
        kube = await _kube(settings, plan.cluster, plan.location, kubeconfig, context)
    except NotFoundError as exc:  # the plan is still worth having before the cluster exists
        plan.notes.append(f"validated offline only, no server-side dry run: {exc.message}")
        return plan
    lines, refused = await common.run_blocking(_dry_run, kube, settings, plan)
    plan.server_dry_run = lines
    plan.notes.extend(refused)
    return plan


async def _kube(
    settings: Settings, cluster: str | None, location: str | None, kubeconfig: str | None, context: str | None
) -> Kube:
    """The Kubernetes API of ``cluster`` (`tpu_devops.gke.connect`: the GKE API unless a kubeconfig or a
    context is named; nothing in a kubeconfig handed in is run)."""
    client = await common.run_blocking(
        api_client, settings, cluster=cluster, location=location, kubeconfig=kubeconfig, context=context
    )
    return Kube(client)


class GkeApplyResult(ToolResult):
    """`apply_gke_deployment` answer: what was applied, and the job that waits for the pods."""

    job_id: str | None
    node_pool: str | None
    applied: list[str]
    namespace: str
    service: str
    message: str

    warnings: list[str] = Field(default_factory=list)

    def headline(self) -> str:
        return f"applied {len(self.applied)} object(s) in {self.namespace}" + (
            f", node pool {self.node_pool}" if self.node_pool else ""
        ) + (f"; poll get_job('{self.job_id}') until the pods are ready" if self.job_id else "") + "".join(
            f". {w}" for w in self.warnings
        )  # fmt: skip


async def apply_gke_deployment(
    settings: Settings,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    create_node_pool: bool = True,
    wait_timeout_s: float = 3600,
    poll_interval_s: float = 15,
    **shape: Any,
) -> GkeApplyResult:
    """Check everything, then create the node pool and apply the manifests; a job waits for readiness.

    ``shape``: the keyword arguments of `manifests.render` (as for `plan_gke_deployment`).

    Raises:
        ConfigError: the Secret is missing or lacks a key. OwnershipError: an object or node pool of the
            same name is not ours (nothing was changed). InputError / CloudError: as in the plan.
    """
    from tpu_devops.gcp import container
    from tpu_devops.host.jobs import JOBS

    if not 1 <= wait_timeout_s <= 86400 or not 0.05 <= poll_interval_s <= 600:
        raise InputError(
            "out of range",
            field="wait_timeout_s",
            value=wait_timeout_s,
            fix="use 1..86400 s, polling every 0.05..600 s",
        )
    plan = manifests.render(settings, **shape)
    namespace, replicas, cluster = plan.namespace, plan.replicas, plan.cluster
    kube = await _kube(settings, cluster, plan.location, kubeconfig, context)
    secret = manifests.names(settings)["secret"]
    keys = await common.run_blocking(kube.secret_keys, namespace, secret)
    missing = [k for k in SECRET_KEYS if keys is None or k not in keys]
    if missing:
        raise ConfigError(
            f"the Secret {secret} in {namespace} "
            + ("does not exist" if keys is None else f"lacks key(s) {missing}"),
            field="secret",
            value=secret,
            fix=f"create it first (values never pass through this server): {plan.secret_command}",
        )
    lines, refused = await common.run_blocking(_dry_run, kube, settings, plan)
    if refused:
        raise OwnershipError(
            "; ".join(refused),
            field="namespace",
            value=namespace,
            fix="pick another namespace or RESOURCE_ID",
        )
    pool_name = _node_pool_name(settings, cluster, plan.location)
    operation = None
    if create_node_pool:
        try:
            pool = await common.run_blocking(container.get_node_pool, settings, pool_name)
        except NotFoundError:
            pool = None
        if pool is not None and not node_pool_is_ours(pool, settings):
            raise OwnershipError(
                f"node pool {plan.node_pool['name']} exists in {cluster} without our labels",
                field="cluster",
                value=cluster,
                fix="pick another RESOURCE_ID, or pass create_node_pool=false to use the existing pool",
            )
        if pool is None:
            # A new pool's nodes draw Compute Engine quota: refuse before creating what could never start.
            quota = await _quota(settings, plan)
            if quota.verdict == "short":
                raise QuotaError(
                    f"the node pool's nodes would never start: {quota.detail}",
                    field="replicas",
                    value=replicas,
                    fix=quota.fix(),
                )
            parent = pool_name.rsplit("/nodePools/", 1)[0]
            operation = await common.run_blocking(
                container.create_node_pool, settings, parent, plan.node_pool
            )
    applied = []
    for m in plan.manifests:
        await common.run_blocking(kube.apply, m.manifest, dry_run=False)
        applied.append(f"{m.kind} {m.name}")
    selector = manifests.selector(settings)
    op_name = (
        f"projects/{require_project(settings)}/locations/{plan.location}/operations/{operation['name'].rsplit('/', 1)[-1]}"
        if operation and operation.get("name")
        else None
    )

    since = time.time() - EVENT_SLACK_S  # events older than this apply belong to an earlier rollout
    deployment_name = manifests.names(settings)["deployment"]

    async def wait(record: Any) -> dict[str, Any]:
        deadline = time.monotonic() + wait_timeout_s
        pool_done = op_name is None
        rollout = None
        while True:
            if not pool_done:
                op = await common.run_blocking(container.get_operation, settings, op_name)
                if op.get("error"):
                    raise TpuDevopsError(
                        f"node pool creation failed: {op['error'].get('message')}", field="node_pool"
                    )
                pool_done = op.get("status") == "DONE"
            if await common.run_blocking(kube.read, "Deployment", namespace, deployment_name) is None:
                raise NotFoundError(
                    f"the Deployment {deployment_name} in {namespace} was deleted while this job waited for its "
                    "pods (teardown_gke_deployment, or by hand): nothing to wait for",
                    field="namespace",
                    value=namespace,
                    fix="apply_gke_deployment again if you want the deployment back",
                )
            rollout = await common.run_blocking(
                observe,
                kube,
                settings,
                namespace,
                selector,
                deployment_name,
                since=since,
                pool_ready=pool_done,
            )
            ready = rollout.ready
            record.progress = {
                "node_pool": "ready" if pool_done else "creating",
                "ready_pods": ready,
                "pods": len([r for r in rollout.reports if r.pod != "(none)"]),
                "want": replicas,
                "pod_states": rollout.progress(),
            }
            record.message = (f"{ready}/{replicas} vLLM pods ready" + ("" if pool_done else "; node pool still creating")
                              + (f"; {rollout.summary()}" if rollout.summary() else ""))[:600]  # fmt: skip
            if pool_done and ready >= replicas:
                return {"ready_pods": ready, "service": plan.manifests[1].name, "namespace": namespace}
            if stuck := rollout.stuck:
                raise stuck_error(stuck)
            if time.monotonic() >= deadline:
                booting = any(r.state == "booting" for r in rollout.reports)
                raise TpuDevopsError(
                    f"{ready}/{replicas} pods ready after {wait_timeout_s:g} s ({rollout.summary() or 'no pod yet'})",
                    field="wait_timeout_s",
                    fix="vLLM's first boot compiles for ~12 min: poll again with a longer wait"
                    if booting
                    else "the pods wait for nodes: check the node pool (its quota and capacity), then apply again",
                )
            await anyio.sleep(poll_interval_s)

    from tpu_devops.provisioning.rigjobs import gke_binding

    record = JOBS.start(
        "gke-deploy", f"{replicas} vLLM pod(s) of {settings.resource_id} in {cluster}/{namespace}", wait,
        binding=gke_binding(settings, cluster, namespace, poll_interval_s),
    )  # fmt: skip
    return GkeApplyResult(
        job_id=record.id,
        node_pool=plan.node_pool["name"] if operation else None,
        applied=applied,
        namespace=namespace,
        service=plan.manifests[1].name,
        message="; ".join(lines),
        warnings=[n for n in plan.notes if n.startswith("WARNING:")],
    )


class GkeTeardownStep(BaseModel):
    """One deletion: ``kind`` and ``name`` (kind ``Job``: this server's apply job waiting for the pods,
    ended first); ``done`` after execution."""

    kind: str
    name: str
    done: bool = False


class GkeTeardownResult(ToolResult):
    """What teardown deleted (or would delete), found by our labels only. ``confirm_token`` (dry runs with
    something to delete, only under the standing permission): echo it in the deleting call, within
    ``confirm_token_expires_in_s`` seconds, once; ``next_call`` is that exact call; ``how_to_delete``: the
    kubectl / gcloud commands a person runs instead (`tpu_devops.host.confirmation`)."""

    dry_run: bool
    executed: bool
    steps: list[GkeTeardownStep]
    left_alone: list[str] = Field(default_factory=list)
    confirm_token: str | None = None
    confirm_token_expires_in_s: int | None = None
    next_call: str | None = None
    how_to_delete: list[str] = Field(default_factory=list)
    message: str

    def headline(self) -> str:
        kept = [s for s in self.steps if s.kind != "Job"]
        objects = ", ".join(f"{s.kind} {s.name}" for s in kept) or "none"
        jobs = ", ".join(s.name for s in self.steps if s.kind == "Job")
        if self.executed:
            ended = f" Ended job(s) first: {jobs}." if jobs else ""
            return f"DELETED {len(kept)} object(s) of ours ({objects}).{ended} {self.message}"
        first = f"end job(s) {jobs} and " if jobs else ""
        return (
            f"NOTHING DELETED: would {first}delete {len(kept)} object(s) of ours ({objects}). {self.message}"
        )


@dataclass
class GkeTeardownPlan:
    """What `teardown_gke_deployment` would delete: the steps (our objects, then our node pool), what it
    leaves alone, and what it needs to act (the Kubernetes client, namespace, node pool name)."""

    steps: list[GkeTeardownStep]
    left_alone: list[str]
    kube: Any
    namespace: str
    pool_name: str
    deletion: confirmation.Deletion
    jobs: list[Any] = field(default_factory=list)  # this server's jobs on the deployment (ended first)


async def plan_gke_teardown(
    settings: Settings,
    *,
    cluster: str,
    kubeconfig: str | None = None,
    context: str | None = None,
    location: str | None = None,
    namespace: str = "default",
    delete_node_pool: bool = True,
) -> GkeTeardownPlan:
    """Find our objects by label (and our node pool by resourceLabels): the plan of a teardown.

    Raises:
        InputError / CloudError: kubeconfig or API failures.
    """
    from tpu_devops.gcp import container

    manifests.render(settings, cluster=cluster, namespace=namespace)  # validates the names
    where = manifests.check_location(settings, location)  # where the nodes went does not matter here
    kube = await _kube(settings, cluster, where, kubeconfig, context)
    from tpu_devops.provisioning.rigjobs import gke_target, running_here

    selector = manifests.selector(settings)
    steps: list[GkeTeardownStep] = []
    # The apply job waiting for these pods would wait for pods that are gone: it ends first, named here.
    jobs = [
        r for r in running_here(settings) if r.binding and r.binding.target == gke_target(cluster, namespace)
    ]
    steps += [GkeTeardownStep(kind="Job", name=f"{r.id} ({r.binding.label})") for r in jobs if r.binding]
    for kind in TEARDOWN_ORDER:
        for obj in await common.run_blocking(kube.list_ours, kind, namespace, selector):
            if is_ours(obj, settings):  # the server filtered by selector; check again, fail closed
                steps.append(GkeTeardownStep(kind=kind, name=obj["metadata"]["name"]))
    left: list[str] = []
    pool_name = _node_pool_name(settings, cluster, where)
    if delete_node_pool:
        try:
            pool = await common.run_blocking(container.get_node_pool, settings, pool_name)
        except NotFoundError:
            pool = None
        if pool is not None:
            if node_pool_is_ours(pool, settings):
                steps.append(GkeTeardownStep(kind="NodePool", name=pool["name"]))
            else:
                left.append(
                    f"node pool {pool['name']} (no managed-by=tpu-devops / rig={settings.resource_id} labels)"
                )
    args = {"cluster": confirmation.quoted(cluster), "namespace": confirmation.quoted(namespace)}
    for name, value in (("kubeconfig", kubeconfig), ("context", context), ("location", location)):
        if value is not None:
            args[name] = confirmation.quoted(value)
    if not delete_node_pool:
        args["delete_node_pool"] = "false"
    deletion = confirmation.Deletion(
        tool="teardown_gke_deployment", action="delete", project=settings.project, rig=settings.resource_id,
        steps=[(f"delete {s.kind}", s.name, f"{cluster}/{namespace}") for s in steps], args=args,
        commands=_teardown_commands(settings, cluster, where, namespace, steps),
    )  # fmt: skip
    return GkeTeardownPlan(steps, left, kube, namespace, pool_name, deletion, jobs)


_KUBECTL_KINDS = {
    "HorizontalPodAutoscaler": "horizontalpodautoscaler.autoscaling",
    "PodMonitoring": "podmonitoring.monitoring.googleapis.com",
    "Service": "service",
    "Deployment": "deployment.apps",
}


def _teardown_commands(
    settings: Settings, cluster: str, location: str, namespace: str, steps: list[GkeTeardownStep]
) -> list[str]:
    """The commands a person runs to delete exactly ``steps`` without this server: kubectl for the
    objects (after gcloud's get-credentials), gcloud for the node pool. Both ask or show before acting."""
    import shlex

    q = shlex.quote
    where = f"--location={q(location)} --project={q(settings.project)}"
    objects = [f"{_KUBECTL_KINDS[s.kind]}/{q(s.name)}" for s in steps if s.kind in _KUBECTL_KINDS]
    out = []
    if objects:
        out.append(
            f"gcloud container clusters get-credentials {q(cluster)} {where} && "
            f"kubectl -n {q(namespace)} delete {' '.join(objects)}"
        )
    out += [
        f"gcloud container node-pools delete {q(s.name.rsplit('/', 1)[-1])} --cluster={q(cluster)} {where}"
        for s in steps
        if s.kind == "NodePool"
    ]
    return out


def _gke_key(cluster: str, kubeconfig: str | None, context: str | None, location: str | None, namespace: str, delete_node_pool: bool) -> tuple[Any, ...]:  # fmt: skip
    return ("gke-teardown", cluster, kubeconfig, context, location, namespace, delete_node_pool)


async def resolve_gke_teardown_confirmation(
    ctx: Context,
    cluster: str,
    kubeconfig: str | None = None,
    context: str | None = None,
    location: str | None = None,
    namespace: str = "default",
    delete_node_pool: bool = True,
    dry_run: bool | None = None,
    confirm: bool = False,
    confirm_token: str | None = None,
) -> Any:
    """Resolver (mcp ``Resolve``) for `teardown_gke_deployment`: asks the user when the host supports
    elicitation and the call wants a deletion (`tpu_devops.host.confirmation.resolve`)."""
    from tpu_devops.config import get_settings

    async def make() -> GkeTeardownPlan:
        return await plan_gke_teardown(
            get_settings(), cluster=cluster, kubeconfig=kubeconfig, context=context, location=location,
            namespace=namespace, delete_node_pool=delete_node_pool,
        )  # fmt: skip

    key = _gke_key(cluster, kubeconfig, context, location, namespace, delete_node_pool)
    wants = confirmation.wants_deletion(dry_run, confirm, confirm_token)
    policy = get_settings().deletion_policy()
    return await confirmation.resolve(ctx, key, wants, make, lambda plan: plan.deletion, policy)


async def teardown_gke_deployment(
    settings: Settings,
    outcome: Any = None,
    *,
    cluster: str,
    kubeconfig: str | None = None,
    context: str | None = None,
    location: str | None = None,
    namespace: str = "default",
    delete_node_pool: bool = True,
    dry_run: bool | None = None,
    confirm: bool = False,
    confirm_token: str | None = None,
) -> GkeTeardownResult:
    """List our objects and node pool (`plan_gke_teardown`) and delete them under the confirmation rule of
    every destructive tool (`tpu_devops.host.confirmation`): a dry run unless the call says ``confirm=true``
    (or ``dry_run=false``); deleting needs the person's elicitation answer (``outcome``, from
    `resolve_gke_teardown_confirmation`) or the standing permission with the dry run's token.

    Raises:
        ConfirmationError: a deletion asked for but not confirmed (nothing deleted; the fix says how the
            person deletes). InputError / CloudError: kubeconfig or API failures.
    """
    from tpu_devops.gcp import container

    key = _gke_key(cluster, kubeconfig, context, location, namespace, delete_node_pool)
    plan = confirmation.take_plan(key) or await plan_gke_teardown(
        settings, cluster=cluster, kubeconfig=kubeconfig, context=context, location=location,
        namespace=namespace, delete_node_pool=delete_node_pool,
    )  # fmt: skip
    steps, left = plan.steps, plan.left_alone
    wants = confirmation.wants_deletion(dry_run, confirm, confirm_token)
    if not steps:
        return GkeTeardownResult(
            dry_run=not wants,
            executed=False,
            steps=steps,
            left_alone=left,
            message="nothing of ours to delete",
        )
    policy = settings.deletion_policy()
    if not wants:
        offered = confirmation.dry_run_fields(settings.state_dir, plan.deletion, policy, outcome)
        return GkeTeardownResult(dry_run=True, executed=False, steps=steps, left_alone=left, **offered)
    via = confirmation.decide(settings.state_dir, plan.deletion, outcome, confirm_token, policy)
    if plan.jobs:
        from tpu_devops.provisioning.rigjobs import end_jobs

        await end_jobs(plan.jobs, f"its GKE deployment in {cluster}/{namespace} is being torn down ({via})")
    for step in steps:
        if step.kind == "Job":
            step.done = True
            continue
        if step.kind == "NodePool":
            await common.run_blocking(container.delete_node_pool, settings, plan.pool_name)
        else:
            try:
                await common.run_blocking(plan.kube.delete, step.kind, plan.namespace, step.name)
            except NotFoundError:
                pass  # gone meanwhile: the goal is reached
        step.done = True
    return GkeTeardownResult(
        dry_run=False, executed=True, steps=steps, left_alone=left,
        message=("deleted; the node pool's nodes go within minutes" if any(s.kind == "NodePool" for s in steps) else "deleted")
        + f" ({via})",
    )  # fmt: skip


def _service_url(service: dict[str, Any], port: int) -> str | None:
    """``http://IP:port`` of a LoadBalancer Service with an ingress address, else None."""
    ingress = (((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")) or []
    host = (ingress[0].get("ip") or ingress[0].get("hostname")) if ingress else None
    return f"http://{host}:{port}" if host else None


class ReplicaThroughput(BaseModel):
    """One pod's share of the sweep, from its own ``vllm:generation_tokens_total`` (read through the pod
    proxy before and after). Tokens; tokens per second over the window; share of all pods' tokens 0..1."""

    pod: str
    generated_tokens: float | None
    output_tokens_per_s: float | None
    share: float | None
    error: str | None = None


class GkeBenchmarkResult(ToolResult):
    """The sweep at the Service (total figures, $/M for the whole deployment) plus each replica's share."""

    benchmark: dict[str, Any]
    benchmark_text: str
    replicas: list[ReplicaThroughput]
    window_s: float = Field(description="seconds between the two counter reads (calibration included)")
    counted_tokens_per_s: float | None = Field(description="all pods' counters over the window")
    findings: list[str]

    def headline(self) -> str:
        per = ", ".join(
            f"{r.pod} {r.output_tokens_per_s:,.1f} tok/s"
            if r.output_tokens_per_s is not None
            else f"{r.pod} ?"
            for r in self.replicas
        )
        return f"{len(self.replicas)} replica(s) over {self.window_s:,.0f} s: {per}"

    def render_text(self) -> str:
        """Per replica first, then the sweep's own table."""
        lines = [self.headline()]
        for r in self.replicas:
            if r.error:
                lines.append(f"{r.pod}: counters unreadable: {r.error}")
            else:
                lines.append(f"{r.pod}: {r.generated_tokens or 0:,.0f} tokens ({(r.share or 0):.0%} of all)")
        if self.counted_tokens_per_s is not None:
            lines.append(
                f"all replicas by their counters: {self.counted_tokens_per_s:,.1f} output tok/s over the window"
            )
        lines.extend(f"finding: {f}" for f in self.findings)
        return "\n".join([*lines, "", self.benchmark_text])


async def _sweep_endpoint(
    settings: Settings, kube: Kube, namespace: str, service: dict[str, Any], base_url: str | None
) -> Any:
    """Where the sweep goes, with the deployment's API key: the Service's own LoadBalancer address (read
    from its status through the Kubernetes API), or a ``base_url`` the operator configured (``VLLM_URL``,
    e.g. a ``kubectl port-forward``). A loopback port is not the Service: any process may listen there, so a
    port-forward gets the key and the load only when ``VLLM_URL`` names it (`tpu_devops.serving.egress`).

    Raises:
        ConfigError: a ClusterIP Service and no base_url. InputError: a base_url that is neither.
    """
    import dataclasses

    from tpu_devops.serving import egress
    from tpu_devops.serving.client import normalize_base_url
    from tpu_devops.serving.resolve import Endpoint, resolve_endpoint

    n = manifests.names(settings)
    own = _service_url(service, settings.vllm_port)
    if base_url is None and own is None:
        raise ConfigError(
            f"Service {n['service']} is {service['spec'].get('type', 'ClusterIP')} without an external address",
            field="base_url",
            value=None,
            fix=f"run `kubectl -n {namespace} port-forward svc/{n['service']} {settings.vllm_port}` and set "
            f"VLLM_URL=http://127.0.0.1:{settings.vllm_port} in this server's configuration (the deployment's key "
            "goes to a local port only when the operator named it), or deploy with service_type=LoadBalancer",
        )
    key = await common.run_blocking(kube.secret_value, namespace, n["secret"], "api_key")
    if own is not None and (base_url is None or normalize_base_url(base_url) == normalize_base_url(own)):
        url = normalize_base_url(own)
        egress.mark_owned(url, "deployment")
        return Endpoint(url, "deployment", key or "", "the deployment's Secret" if key else "")
    ep = await resolve_endpoint(settings, base_url, sends="benchmark requests and the deployment's API key")
    return dataclasses.replace(ep, api_key=key or "", key_source="the deployment's Secret", key_note=None)


def _generated(kube: Kube, namespace: str, pods: list[str], port: int) -> dict[str, float | str]:
    """Each pod's ``vllm:generation_tokens_total`` (or the error reading it), through the pod proxy."""
    from tpu_devops.serving.metrics import parse

    out: dict[str, float | str] = {}
    for pod in pods:
        try:
            samples = parse(kube.pod_get(namespace, pod, port, "metrics"))
        except TpuDevopsError as exc:
            out[pod] = str(exc)
            continue
        rows = samples.get("vllm:generation_tokens_total") or []
        out[pod] = sum(v for _, v in rows) if rows else "no vllm:generation_tokens_total in /metrics"
    return out


async def benchmark_gke_deployment(
    settings: Settings,
    *,
    cluster: str | None = None,
    location: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str = "default",
    base_url: str | None = None,
    **sweep: Any,
) -> Any:
    """Drive `run_benchmark`'s sweep at our GKE Service, priced for the whole deployment (ready replicas x
    the one-chip price + the GKE cluster fee), and measure each replica's share from its own token counter
    (read through the Kubernetes pod proxy before and after the sweep). Returns at once with a job id.

    A LoadBalancer Service's address is read from its status; a ClusterIP Service is reached through a
    ``kubectl port-forward`` the operator names in ``VLLM_URL`` (``base_url`` must then be that URL or the
    Service's address: `_sweep_endpoint`). ``sweep``: run_benchmark's arguments.
    ``cluster`` / ``location`` name the cluster the deployment runs in (the job's description says it).

    Raises:
        NotFoundError: no Deployment / Service of ours. ConfigError: no ready pod, or no address to reach.
    """
    from tpu_devops.host.jobs import JOBS
    from tpu_devops.planning import pricing
    from tpu_devops.serving.benchmark import start_benchmark

    n = manifests.names(settings)
    kube = await _kube(settings, cluster, location, kubeconfig, context)
    objs = {}
    for kind, name in (("Deployment", n["deployment"]), ("Service", n["service"])):
        obj = await common.run_blocking(kube.read, kind, namespace, name)
        if obj is None or not is_ours(obj, settings):
            raise NotFoundError(
                f"no {kind} {name} of ours in namespace {namespace}",
                field="namespace",
                value=namespace,
                fix="deploy first with apply_gke_deployment (or pass the namespace it used)",
            )
        objs[kind] = obj
    pods = [
        p
        for p, ready in await common.run_blocking(kube.pods, namespace, manifests.selector(settings))
        if ready
    ]
    if not pods:
        raise ConfigError(
            "no vLLM pod is ready yet",
            field="replicas",
            value=0,
            fix="poll the apply job until the pods are ready",
        )
    target = await _sweep_endpoint(settings, kube, namespace, objs["Service"], base_url)
    url = target.url
    usd_per_hour, label = await _price(settings, len(pods), len(pods))
    price = None
    if usd_per_hour is not None:
        gen = resolve_accelerator_type(settings.accelerator_type).generation
        one = await pricing.get_price(settings, accelerator_type=f"{gen.api_prefix}-{gen.cores_per_chip}")
        price = one.model_copy(
            update={"accelerator_type": f"{len(pods)} x {one.accelerator_type} (GKE)", "chips": len(pods),
                    "usd_per_hour": usd_per_hour, "notes": [*one.notes, label]}
        )  # fmt: skip
    before = await common.run_blocking(_generated, kube, namespace, pods, settings.vllm_port)
    t0 = time.monotonic()
    started = await start_benchmark(settings, endpoint=target, price=price, replicas=len(pods), **sweep)
    inner = JOBS.get(started.job_id)

    async def body(record: Any) -> GkeBenchmarkResult:
        try:
            while inner.state == "running":
                record.message, record.progress = inner.message, dict(inner.progress)
                await anyio.sleep(0.2)
        except BaseException:
            await JOBS.cancel(inner.id)  # cancelling this job stops the sweep it drives
            raise
        if inner.state != "succeeded":
            raise TpuDevopsError(f"the sweep {inner.state}: {inner.message}", field="job_id", value=inner.id)
        after = await common.run_blocking(_generated, kube, namespace, pods, settings.vllm_port)
        window = max(time.monotonic() - t0, 1e-6)
        deltas = {
            p: end_count - start_count
            for p in pods
            if isinstance(start_count := before[p], float) and isinstance(end_count := after[p], float)
        }
        total = sum(deltas.values())
        replicas = [
            ReplicaThroughput(
                pod=p,
                generated_tokens=deltas.get(p),
                output_tokens_per_s=round(deltas[p] / window, 2) if p in deltas else None,
                share=round(deltas[p] / total, 4) if p in deltas and total else None,
                error=None
                if p in deltas
                else str(after[p] if not isinstance(after[p], float) else before[p]),
            )
            for p in pods
        ]
        findings = []
        shares = [r.share for r in replicas if r.share is not None]
        if len(shares) > 1 and max(shares) - min(shares) > 0.5 / len(shares):
            findings.append(
                "uneven load: "
                + ", ".join(f"{r.pod} {r.share:.0%}" for r in replicas if r.share is not None)
                + " (a port-forward goes to one pod; the Service spreads only in-cluster or LoadBalancer traffic)"
            )
        return GkeBenchmarkResult(
            benchmark=inner.result,
            benchmark_text=inner.result_text or "",
            replicas=replicas,
            window_s=round(window, 2),
            counted_tokens_per_s=round(total / window, 2) if deltas else None,
            findings=findings,
        )

    where = f" in cluster {cluster}" + (f" ({location})" if location else "") if cluster else ""
    record = JOBS.start(
        "gke-benchmark", f"sweep at {url} over {len(pods)} pod(s) of {settings.resource_id}{where}", body
    )
    return started.model_copy(
        update={
            "job_id": record.id,
            "message": f"poll get_job('{record.id}'): per-replica shares come with the result",
        }
    )


__all__ = [
    "KINDS",
    "apply_gke_deployment",
    "benchmark_gke_deployment",
    "plan_gke_deployment",
    "teardown_gke_deployment",
]
