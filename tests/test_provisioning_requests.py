"""The queued-resource request built from Settings (`tpu_devops.provisioning.requests`)."""

from __future__ import annotations

from tpu_devops.provisioning.requests import build_request

ZONE = "us-west4-a"


def test_build_request_per_provisioning_model(gcp_settings) -> None:
    flex = build_request(
        gcp_settings, zone=ZONE, qr_id="r1", provisioning_model="flex-start", startup_script="#!/bin/bash"
    )
    node = flex["tpu"]["nodeSpec"][0]["node"]
    assert node["schedulingConfig"] == {"provisioningModel": "FLEX_START"}
    assert flex["runDuration"] == {"maxRunDuration": "14400s"}  # MAX_RUN_DURATION default 4h
    assert node["labels"] == {"managed-by": "tpu-devops", "rig": "r1"}
    assert node["metadata"] == {"startup-script": "#!/bin/bash"}
    spot = build_request(gcp_settings, zone=ZONE, qr_id="r1", provisioning_model="spot", startup_script="")
    assert spot["spot"] == {} and "runDuration" not in spot
    assert "schedulingConfig" not in spot["tpu"]["nodeSpec"][0]["node"]
    od = build_request(
        gcp_settings,
        zone=ZONE,
        qr_id="r1",
        provisioning_model="on-demand",
        startup_script="",
        valid_until_duration_s=600,
    )
    assert "spot" not in od and od["queueingPolicy"] == {"validUntilDuration": "600s"}
