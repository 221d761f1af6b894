"""The queued-resource request built from Settings, and its readers (`tpu_devops.provisioning.requests`).

Shapes from the TPU v2alpha1 discovery document (rev. 20261001): flex-start is the queued resource's
``provisioningModel`` plus ``runDuration.maxRunDuration``; the node's ``schedulingConfig`` never says it.
"""

from __future__ import annotations

import pytest

from tpu_devops.provisioning.requests import (
    api_version,
    build_request,
    gcloud_command,
    max_run_duration_of,
    provisioning_model_of,
    termination_time_of,
)

ZONE = "us-west4-a"


def test_build_request_per_provisioning_model(gcp_settings) -> None:
    flex = build_request(
        gcp_settings, zone=ZONE, qr_id="r1", provisioning_model="flex-start", startup_script="#!/bin/bash"
    )
    node = flex["tpu"]["nodeSpec"][0]["node"]
    assert flex["provisioningModel"] == "FLEX_START" and "schedulingConfig" not in node
    assert flex["runDuration"] == {"maxRunDuration": "14400s"}  # MAX_RUN_DURATION default 4h
    # The rig label is this server's RESOURCE_ID whatever the id, and no caller's label can change it.
    assert node["labels"] == {"managed-by": "tpu-devops", "rig": "gemma4-e2b"}
    labelled = build_request(
        gcp_settings, zone=ZONE, qr_id="r1", provisioning_model="spot", startup_script="",
        labels={"created-by": "abc123", "rig": "other-rig", "managed-by": "someone"},
    )  # fmt: skip
    assert labelled["tpu"]["nodeSpec"][0]["node"]["labels"] == {
        "created-by": "abc123", "rig": "gemma4-e2b", "managed-by": "tpu-devops",
    }  # fmt: skip
    assert node["metadata"] == {"startup-script": "#!/bin/bash"}
    assert api_version(flex) == "v2alpha1"
    spot = build_request(gcp_settings, zone=ZONE, qr_id="r1", provisioning_model="spot", startup_script="")
    assert spot["spot"] == {} and "runDuration" not in spot and "provisioningModel" not in spot
    assert "schedulingConfig" not in spot["tpu"]["nodeSpec"][0]["node"]
    assert api_version(spot) == "v2"
    od = build_request(
        gcp_settings,
        zone=ZONE,
        qr_id="r1",
        provisioning_model="on-demand",
        startup_script="",
        valid_until_duration_s=600,
    )
    assert "spot" not in od and od["queueingPolicy"] == {"validUntilDuration": "600s"}
    assert "provisioningModel" not in od and api_version(od) == "v2"
    for model, body in (("flex-start", flex), ("spot", spot), ("on-demand", od)):
        assert provisioning_model_of(body) == model  # the reader reads what the builder wrote


NODE = {"tpu": {"nodeSpec": [{"nodeId": "x", "node": {"acceleratorType": "v5litepod-1"}}]}}


def _with_sched(sched: dict) -> dict:
    return {"tpu": {"nodeSpec": [{"nodeId": "x", "node": {"schedulingConfig": sched}}]}}


@pytest.mark.parametrize(
    ("qr", "model"),
    [
        (
            {**NODE, "provisioningModel": "FLEX_START", "runDuration": {"maxRunDuration": "3600s"}},
            "flex-start",
        ),
        ({**NODE, "provisioningModel": "SPOT"}, "spot"),
        ({**NODE, "provisioningModel": "STANDARD"}, "on-demand"),
        ({**NODE, "provisioningModel": "RESERVATION_BOUND"}, "reservation-bound"),
        ({**NODE, "runDuration": {"maxRunDuration": "3600s"}}, "flex-start"),  # no model field returned
        ({**NODE, "spot": {}}, "spot"),
        ({**NODE, "guaranteed": {"reserved": True}}, "reservation-bound"),
        (_with_sched({"provisioningModel": "SPOT"}), "spot"),
        (_with_sched({"spot": True}), "spot"),
        (_with_sched({"preemptible": True}), "spot"),
        (_with_sched({"reserved": True}), "reservation-bound"),
        (NODE, "on-demand"),
        ({}, "on-demand"),
    ],
)
def test_provisioning_model_is_read_where_google_puts_it(qr: dict, model: str) -> None:
    assert provisioning_model_of(qr) == model


def test_expiry_is_read_from_the_queued_resource_and_the_node() -> None:
    qr = {"provisioningModel": "FLEX_START", "runDuration": {"maxRunDuration": "7200s"}}
    assert max_run_duration_of(qr) == 7200.0
    assert max_run_duration_of({"runDuration": {"maxRunDuration": "2h"}}) is None  # not a proto duration
    assert termination_time_of(qr) is None
    node = {"schedulingConfig": {"terminationTimestamp": "2026-11-20T12:00:00Z"}}
    assert termination_time_of(qr, node) == "2026-11-20T12:00:00Z"
    qr["runDuration"]["terminationTime"] = "2026-11-20T11:00:00Z"
    assert termination_time_of(qr, node) == "2026-11-20T11:00:00Z"  # the queued resource's own word first


def test_gcloud_equivalent_follows_the_body(gcp_settings) -> None:
    def line(model: str, **kw) -> str:
        body = build_request(
            gcp_settings, zone=ZONE, qr_id="r1", provisioning_model=model, startup_script="", **kw
        )
        return gcloud_command(body, qr_id="r1")

    flex = line("flex-start", max_run_duration_s=3600)
    assert flex.startswith("gcloud alpha compute tpus queued-resources create \\\n  r1 ")
    assert "--provisioning-model=flex-start" in flex and "--max-run-duration=3600s" in flex
    assert "--spot" in line("spot") and "--provisioning-model" not in line("spot")
    od = line("on-demand")
    assert "--spot" not in od and "--provisioning-model" not in od


def test_gcloud_equivalent_reads_project_and_zone_from_the_body_and_quotes_every_value(gcp_settings) -> None:
    import shlex

    from tpu_devops.provisioning.requests import PLACEHOLDER_PROJECT, PROJECT_FROM_GCLOUD, project_word

    body = build_request(
        gcp_settings, zone="us-east5-a", qr_id="r1", provisioning_model="spot", startup_script=""
    )
    node = body["tpu"]["nodeSpec"][0]["node"]
    node["networkConfig"]["network"] = "projects/x/global/networks/my net; rm -rf ~"
    words = shlex.split(gcloud_command(body, qr_id="r1").replace("\\\n", ""))
    assert f"--project={gcp_settings.project}" in words and "--zone=us-east5-a" in words
    assert "--network=projects/x/global/networks/my net; rm -rf ~" in words  # one word, not a second command
    body["tpu"]["nodeSpec"][0]["parent"] = f"projects/{PLACEHOLDER_PROJECT}/locations/us-east5-a"
    assert f"--project={PROJECT_FROM_GCLOUD}" in gcloud_command(body, qr_id="r1")
    assert (
        project_word("my-proj") == "my-proj" and project_word("example.com:my-proj") == "example.com:my-proj"
    )
    assert project_word(None) == project_word("") == project_word(PLACEHOLDER_PROJECT) == PROJECT_FROM_GCLOUD
    assert PROJECT_FROM_GCLOUD.startswith('"')  # double quotes: the shell runs the substitution
