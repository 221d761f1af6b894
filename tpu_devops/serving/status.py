"""What the endpoint runs and how it is doing, as one tool with three views: the served model
(`tpu_devops.serving.details`), its engines behind the host's balancer (`tpu_devops.serving.engines`),
and its Prometheus metrics (`tpu_devops.serving.metrics`)."""

from __future__ import annotations

from tpu_devops.config import Settings
from tpu_devops.host.results import ViewResult
from tpu_devops.serving.details import ModelDetails, get_details
from tpu_devops.serving.engines import EngineStatusResult, get_engine_status
from tpu_devops.serving.metrics import MetricsResult, get_metrics

VIEWS = ("model", "engines", "metrics")


class ServingStatus(ViewResult):
    """`get_serving_status`'s answer: the view asked for, under its name."""

    model: ModelDetails | None = None
    engines: EngineStatusResult | None = None
    metrics: MetricsResult | None = None


async def serving_status(
    settings: Settings, view: str, base_url: str | None = None, engines: int | None = None
) -> ServingStatus:
    """The ``view`` (one of `VIEWS`) of the endpoint at ``base_url`` (default: VLLM_URL, else this rig's TPU).

    ``engines``: how many engines the host runs (the ``engines`` view only; default from the slice).

    Raises:
        ServingError / EndpointError: as the view's own function raises (no endpoint, unreachable, ...).
    """
    if view == "engines":
        return ServingStatus(view=view, engines=await get_engine_status(settings, base_url, engines))
    if view == "metrics":
        return ServingStatus(view=view, metrics=await get_metrics(settings, base_url))
    return ServingStatus(view="model", model=await get_details(settings, base_url))
