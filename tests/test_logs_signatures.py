"""One rule table for boot and operational signatures (tpu_devops.logs.rules via logs.signatures)."""

from __future__ import annotations

import pytest

from tpu_devops.logs import signatures


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E0101: RuntimeProgramAllocationFailure:",
            "program-allocation-oom",
        ),
        (
            "huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for url https://huggingface.co/x",
            "hf-gated-repo",
        ),
        (
            "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/api/models/x",
            "hf-unauthorized",
        ),
        (
            "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. Repository Not Found for url: https://huggingface.co/x",
            "hf-repo-not-found",
        ),
        (
            "compute.instances.preempted projects/p/zones/z/instances/n: Instance was preempted.",
            "tpu-preempted",
        ),
        ("Host maintenance event: TERMINATE_ON_HOST_MAINTENANCE for instance n", "tpu-maintenance"),
        (
            "Quota 'TPUV5sLitepodPerProjectPerZoneForTPUAPI' exhausted. Limit 1 in region us-west4",
            "quota-exhausted",
        ),
        ('There is no more capacity in the zone "us-west4-a"', "capacity-stockout"),
    ],
)
def test_lines_match_their_signature(line: str, expected: str) -> None:
    sig = signatures.match(line)
    assert sig is not None and sig.id == expected


def test_one_table_serves_boot_and_summary() -> None:
    from tpu_devops.logs import boot, evidence

    assert boot.match_line is signatures.match_line  # the boot diagnosis reads the same table
    assert evidence.sg is signatures
    wrapper = signatures.match("RuntimeError: Engine core initialization failed. See root cause above.")
    assert wrapper is not None and wrapper.weight < 0
    noise = signatures.match("Pin memory is not supported on TPU.")
    assert noise is not None and noise.weight < 0 and noise.kind == "noise"


def test_vllm_kv_preemption_is_not_a_tpu_preemption() -> None:
    sig = signatures.match(
        "Sequence group 12 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space"
    )
    assert sig is None or sig.id != "tpu-preempted"
