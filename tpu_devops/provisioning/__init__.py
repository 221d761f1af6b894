"""Provisioning TPU capacity, one job per module, data flowing down only:

- `requests`: the queued-resource request built from `Settings` (the one place its shape lives) and
  its arguments checked;
- `failures`: Google's failures classified by reach;
- `cloud`: the async bridge to the TPU adapter;
- `store`: the zone-attempt store and the rig's sweep lease;
- `plan`: the dry run (request, gcloud equivalent, price, warnings);
- `queued`: create / describe / list / status of queued resources, ownership by this rig;
- `sweep`: `find_tpu`, the zone sweep job.

Submodules load on first attribute access (PEP 562), as in `tpu_devops`: `server.py` names
``tpu_devops.provisioning.queued.CreateResult`` without importing anything at startup.
"""

from __future__ import annotations

from tpu_devops import lazy_submodules

__getattr__ = lazy_submodules(__name__)
