"""Ownership by this server's rig: which queued resources are ours, and who created them.

Ours means the labels ``managed-by=tpu-devops`` and ``rig=<RESOURCE_ID of this server>`` on every node
spec, always; never the id a caller passes (a destroy of ``queued_resource_id=other-rig``
used to compare the labels with that id and deleted another rig's TPU). Every resource this server
creates carries the rig label whatever its id, so status, the one-TPU guard, endpoint discovery and
teardown see all of them.

Two installations in one project with the same ``RESOURCE_ID`` are one rig. The ``created-by`` label
(a hash of the ADC principal, `tpu_devops.gcp.identity`) records who created a resource, so that acting
on a rig resource someone else created comes with a warning. The ``tool`` label says which tool made it
(``find_tpu`` requests may be adopted or cleaned by a later sweep; a ``create_tpu_queued_resource``
request is the user's and is left for the user).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio

from tpu_devops.config import Settings

MANAGED_BY = "tpu-devops"
SWEEP_TOOL = "find_tpu"
CREATE_TOOL = "create_tpu_queued_resource"


def _node_labels(qr: dict[str, Any]) -> list[dict[str, str]]:
    specs = (qr.get("tpu") or {}).get("nodeSpec") or []
    return [dict((spec.get("node") or {}).get("labels") or {}) for spec in specs]


@dataclass(frozen=True)
class Owner:
    """Who a queued resource belongs to, as seen by one rig. ``ours``: this rig's labels on every node;
    ``rig``: its rig label (None without one); ``created_by``: its created-by label (None: unknown);
    ``by_you``: created by this server's principal (None when ``created_by`` is unknown); ``tool``: the
    tool label."""

    ours: bool
    tpu_devops: bool
    rig: str | None
    created_by: str | None
    by_you: bool | None
    tool: str | None

    def describe(self, this_rig: str) -> str:
        """``ours``, ``ours, created by someone else (...)``, ``another rig's (rig=x)``, or
        ``not created by tpu-devops``: the wording every tool uses."""
        if not self.tpu_devops:
            return "not created by tpu-devops"
        if not self.ours:
            return f"another rig's (rig={self.rig or 'none'}; this server is rig {this_rig})"
        if self.by_you is False:
            return f"ours (rig {this_rig}), created by someone else (created-by={self.created_by})"
        if self.by_you is None:
            return f"ours (rig {this_rig}), creator unknown (no created-by label)"
        return f"ours (rig {this_rig})"


@dataclass(frozen=True)
class Rig:
    """This server as an owner: its rig id (``RESOURCE_ID``) and the created-by label of its principal."""

    rig: str
    created_by: str

    def labels(self, tool: str) -> dict[str, str]:
        """Node labels for a create by ``tool``: managed-by, rig, created-by, tool."""
        return {"managed-by": MANAGED_BY, "rig": self.rig, "created-by": self.created_by, "tool": tool}

    def owner(self, qr: dict[str, Any]) -> Owner:
        """Classify a queued resource JSON (any owner). No node spec: not ours."""
        labels = _node_labels(qr)
        first = labels[0] if labels else {}
        tpu_devops = bool(labels) and all(lab.get("managed-by") == MANAGED_BY for lab in labels)
        ours = tpu_devops and all(lab.get("rig") == self.rig for lab in labels)
        created_by = first.get("created-by") or None
        return Owner(
            ours=ours,
            tpu_devops=tpu_devops,
            rig=first.get("rig"),
            created_by=created_by,
            by_you=None if created_by is None else created_by == self.created_by,
            tool=first.get("tool"),
        )

    def is_ours(self, qr: dict[str, Any]) -> bool:
        """True when every node spec carries ``managed-by=tpu-devops`` and ``rig=<this rig>``."""
        return self.owner(qr).ours


async def this_rig(settings: Settings) -> Rig:
    """This server's `Rig`: ``RESOURCE_ID`` and the created-by label of its ADC principal (looked up once
    per process, in a worker thread: reading ADC touches files and may run gcloud)."""
    from tpu_devops.gcp.identity import adc_principal, created_by_label

    principal = await anyio.to_thread.run_sync(adc_principal)
    return Rig(settings.resource_id, created_by_label(principal))
