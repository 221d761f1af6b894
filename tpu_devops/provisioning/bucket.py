"""The product's Cloud Storage bucket: the XLA/vLLM compile cache and staged model weights.

One bucket per project (``TPU_DEVOPS_BUCKET``, default ``<project>-tpu-devops``), created on first need
(`ensure_bucket`, before a TPU is created) in the configured region, with uniform bucket-level access,
public access prevention enforced, the label ``managed-by=tpu-devops`` and a lifecycle rule that deletes
compile-cache objects `CACHE_EXPIRY_DAYS` days after they were written (weights stay). The TPU VM's
service account (the project's default compute account, ``<number>-compute@developer.gserviceaccount.com``,
which is what a node created without ``serviceAccount`` runs as) gets ``roles/storage.objectUser`` on
this bucket only: read, write and list objects, nothing else in the project.

A bucket name is global, so an existing bucket is used only when it belongs to this project (its
``projectNumber``); the default name must also carry our label. A bucket that fails these checks is
never written to: the VM then boots cold and the answer says why, with the fix.

Layout (written by the VM, read here through object metadata; `tpu_devops.planning.warmboot`):
``compile-cache/<accelerator>/<model>/<shape key>/<image key>/cache.tar.gz`` and
``weights/<model>/`` (files, then ``manifest.json`` last).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from tpu_devops.config import Settings
from tpu_devops.errors import TpuDevopsError
from tpu_devops.gcp.common import run_blocking

OBJECT_ROLE = "roles/storage.objectUser"  # objects: get, list, create, update, delete; no bucket admin
CACHE_PREFIX = "compile-cache/"
WEIGHTS_PREFIX = "weights/"
CACHE_EXPIRY_DAYS = 30
LABELS = {"managed-by": "tpu-devops"}


def vm_service_account(project_number: str) -> str:
    """The default compute service account a TPU VM runs as (Compute Engine default service account)."""
    return f"{project_number}-compute@developer.gserviceaccount.com"


class BucketStatus(BaseModel):
    """The product bucket as found (or made). ``usable``: the VM may read and write it (it is this
    project's and, for the default name, ours); ``vm_access``: the VM's service account holds
    `OBJECT_ROLE` on it (None: not known). ``fix`` says what to do when something is missing."""

    name: str
    configured: bool
    exists: bool = False
    created: bool = False
    usable: bool = False
    ours: bool = False
    location: str | None = None
    vm_service_account: str | None = None
    vm_access: bool | None = None
    granted: bool = False
    detail: str = ""
    fix: str | None = None
    notes: list[str] = Field(default_factory=list)

    def line(self) -> str:
        """One line for plans and dashboards."""
        if not self.configured:
            return "no bucket (TPU_DEVOPS_BUCKET=off): every boot compiles and downloads cold"
        text = f"bucket gs://{self.name}: {self.detail}"
        return text + (f"; fix: {self.fix}" if self.fix else "")


def _grant_fix(name: str, account: str) -> str:
    return (
        f"gcloud storage buckets add-iam-policy-binding gs://{name} "
        f"--member=serviceAccount:{account} --role={OBJECT_ROLE}"
    )


async def inspect_bucket(settings: Settings) -> BucketStatus:
    """Read-only: does the bucket exist, is it this project's (and ours), and may the VM use it.

    Never raises for a cloud failure: it is reported in ``detail`` / ``fix``.
    """
    return await _examine(settings, create=False)


async def ensure_bucket(settings: Settings) -> BucketStatus:
    """Create the bucket when missing and grant the VM's service account object access on it.

    A bucket of another project, or the default name without our label, is left untouched
    (``usable`` False, with the fix). Never raises for a cloud failure: the TPU boots cold without the
    bucket, so the caller reports ``detail`` / ``fix`` as a warning and goes on.
    """
    return await _examine(settings, create=True)


async def _examine(settings: Settings, *, create: bool) -> BucketStatus:
    from tpu_devops.gcp import storage

    name = settings.bucket
    status = BucketStatus(name=name, configured=bool(name))
    if not name:
        status.detail = "off" if settings.project else "no project set"
        return status
    try:
        number = await run_blocking(storage.project_number, settings)
        account = vm_service_account(number)
        status.vm_service_account = account
        info = await run_blocking(storage.get_bucket, settings, name)
        if info is None and create:
            info = await run_blocking(
                storage.create_bucket, settings, name, location=settings.region, labels=LABELS,
                expire_prefix=CACHE_PREFIX, expire_after_days=CACHE_EXPIRY_DAYS,
            )  # fmt: skip
            status.created = True
        if info is None:
            status.detail = f"does not exist yet; created in {settings.region} before the first TPU"
            status.notes.append(
                f"it will get uniform bucket-level access, label managed-by=tpu-devops, compile-cache objects "
                f"expire after {CACHE_EXPIRY_DAYS} days, and {account} gets {OBJECT_ROLE} on it only"
            )
            return status
        status.exists, status.location = True, info.location
        if info.project_number and info.project_number != number:
            status.detail = f"belongs to another project (number {info.project_number}); not used"
            status.fix = (
                "set TPU_DEVOPS_BUCKET to a bucket of this project (or leave it empty for the default)"
            )
            return status
        status.ours = info.labels.get("managed-by") == LABELS["managed-by"]
        explicit = name != f"{settings.project}-tpu-devops"
        if not status.ours and not explicit:
            status.detail = "exists without the label managed-by=tpu-devops; not used"
            status.fix = (
                f"label it (gcloud storage buckets update gs://{name} --update-labels=managed-by=tpu-devops) "
                "or set TPU_DEVOPS_BUCKET to another bucket"
            )
            return status
        status.usable = True
        members = await run_blocking(storage.iam_members, settings, name, OBJECT_ROLE)
        status.vm_access = f"serviceAccount:{account}" in members
        if not status.vm_access and create:
            await run_blocking(
                storage.add_iam_member, settings, name, OBJECT_ROLE, f"serviceAccount:{account}"
            )
            status.vm_access = status.granted = True
        owner = "ours" if status.ours else "yours (named in TPU_DEVOPS_BUCKET, not created by tpu-devops)"
        status.detail = f"{'created' if status.created else 'exists'} in {info.location}, {owner}; " + (
            f"{account} has {OBJECT_ROLE} on it" + (" (granted now)" if status.granted else "")
            if status.vm_access
            else f"{account} has NO object access on it: the VM boots cold and cannot stage weights"
        )
        if not status.vm_access:
            status.fix = _grant_fix(name, account)
        if info.location and settings.region not in info.location:
            status.notes.append(
                f"the bucket is in {info.location}, the TPU zone's region is {settings.region}: copies cross "
                "regions (slower, and billed as network egress)"
            )
    except TpuDevopsError as exc:
        status.detail = f"could not be {'set up' if create else 'checked'}: {exc.message}"
        status.fix = exc.fix or (
            _grant_fix(name, status.vm_service_account) if status.vm_service_account else None
        )
    return status


async def prepare_for_create(settings: Settings) -> tuple[Settings, BucketStatus]:
    """Before a TPU is created: `ensure_bucket`, and the settings its startup script is rendered with.

    The script names the bucket only when it is usable (this project's, and ours for the default name):
    a name that does not resolve to such a bucket is rendered empty, so the VM never reads a compile
    cache from, or writes weights to, a bucket someone else could own. Never raises for a cloud failure.
    """
    status = await ensure_bucket(settings)
    if status.configured and not status.usable:
        return settings.model_copy(update={"bucket": ""}), status
    return settings, status


def create_warnings(status: BucketStatus) -> list[str]:
    """What a create says about the bucket: nothing when it is ready, else what is missing and the fix."""
    if not status.configured or (status.usable and status.vm_access):
        return []
    return [f"WARM BOOT OFF: {status.line()} (this TPU boots cold: compile and weights from scratch)"]
