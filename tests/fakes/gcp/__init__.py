"""In-process fake of the Google Cloud REST surfaces tpu-devops uses (as moto fakes AWS).

`FakeGcp` serves every surface on one loopback base URL, so the product points all its clients at it
with ``TPU_DEVOPS_GCP_ENDPOINT``. Each surface lives in its own module of this package and is a class
with its own state, scripting hooks and a ``routes() -> list[starlette.routing.BaseRoute]`` method,
using the real REST paths (e.g. ``/v2alpha1/projects/{p}/locations/{z}/queuedResources``).
Register a surface by adding it to `_default_surfaces` below.

Every request passes `tests.fakes.gcp.discovery.DiscoveryValidator` first: checked against Google's
published discovery documents, so no surface can accept what Google would refuse (400
INVALID_ARGUMENT / 404 in Google's error shape). A new surface is validated with no code of its own.
Refused requests are listed in ``FakeGcp.rejections``. A surface that is not a Google API (the
"what is my public IP" lookup a plan uses) sets ``google = False`` and is served beside the validator.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette

from tests.fakes.gcp.discovery import DiscoveryValidator
from tests.fakes.http_runner import ServerThread


class FakeGcp:
    """All fake surfaces behind one URL. ``with FakeGcp() as gcp: gcp.url, gcp.tpu, gcp.quotas, ...``"""

    def __init__(self, **surfaces: Any) -> None:
        self.surfaces: dict[str, Any] = {}
        for name, factory in _default_surfaces().items():
            self.surfaces[name] = surfaces.pop(name, None) or factory()
        self.surfaces.update(surfaces)
        if "tpu" in self.surfaces and "compute" in self.surfaces:
            # VPC networks are Compute resources that the TPU API checks too: one set for both fakes
            self.surfaces["compute"].networks = self.surfaces["tpu"].networks
        routes, plain = [], []
        for surface in self.surfaces.values():
            # a surface that is not a Google API (the public-IP lookup) says so with google = False
            (routes if getattr(surface, "google", True) else plain).extend(surface.routes())
        self.validator = DiscoveryValidator(Starlette(routes=routes))
        self.app = self.validator if not plain else _Dispatch(Starlette(routes=plain), self.validator, plain)
        self._thread: ServerThread | None = None

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["surfaces"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def rejections(self) -> list[dict[str, Any]]:
        """Requests the discovery validator refused (method, path, query, status, Google's error JSON)."""
        return self.validator.rejections

    @property
    def url(self) -> str:
        assert self._thread is not None, "FakeGcp not started"
        return self._thread.url

    def start(self, port: int = 0) -> FakeGcp:
        self._thread = ServerThread(self.app, port=port).start()
        return self

    def stop(self) -> None:
        if self._thread:
            self._thread.stop()

    def __enter__(self) -> FakeGcp:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Dispatch:
    """Requests for the non-Google routes go to ``plain``; everything else through the validator."""

    def __init__(self, plain: Any, validated: Any, routes: list[Any]) -> None:
        self.plain, self.validated = plain, validated
        self.paths = {r.path for r in routes}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        target = self.plain if scope["type"] == "http" and scope["path"] in self.paths else self.validated
        await target(scope, receive, send)


def _default_surfaces() -> dict[str, Any]:
    """name -> factory of every surface module present (modules are added by their issues)."""
    import importlib

    found: dict[str, Any] = {}
    for name, module, cls in (
        ("tpu", "tests.fakes.gcp.tpu", "FakeTpu"),
        ("quotas", "tests.fakes.gcp.quotas", "FakeQuotas"),
        ("secrets", "tests.fakes.gcp.secrets", "FakeSecretManager"),
        ("logging", "tests.fakes.gcp.logging", "FakeLogging"),
        ("billing", "tests.fakes.gcp.billing", "FakeBilling"),
        ("container", "tests.fakes.gcp.container", "FakeContainer"),
        ("compute", "tests.fakes.gcp.compute", "FakeCompute"),
        ("public_ip", "tests.fakes.gcp.compute", "FakePublicIp"),
        ("storage", "tests.fakes.gcp.storage", "FakeStorage"),
    ):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        found[name] = getattr(mod, cls)
    return found
