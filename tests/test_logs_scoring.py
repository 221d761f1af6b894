"""Phrase matching for scoring answers: whole words, and a phrase that is denied is not stated."""

from __future__ import annotations

import pytest

from tpu_devops.logs.scoring import claims_failure, states, values_after

STATED = [
    ("The server started successfully.", "success"),
    ("The server did not start because the KV cache is too small.", "KV cache"),
    ("The compiled program does not fit in HBM.", "HBM"),
    ("There is not enough room for the KV cache.", "KV cache"),
    ("The heads are not divisible by the TP size.", "divisible"),
    ("int8 quantization is not supported on this TPU.", "quantiz"),
    ("Lower --gpu-memory-utilization to 0.92.", "0.92"),
    ("Set --max-model-len to 5632.", "5632"),
    ("Pass your HF tokens.", "token"),
    ("It was preempted by Compute Engine.", "preempt"),
    ("The model is not authorized: accept the license.", "authorized"),
    ("No failure: the server is ready.", "no failure"),
    ("It does not fit in HBM or the KV cache.", "KV cache"),
    ("The KV-cache holds 5,632 tokens.", "KV cache"),
    ("It is a 429 or a rate limit.", "rate limit"),
]
NOT_STATED = [
    ("The boot was unsuccessful.", "success"),
    ("The KV cache is not the problem; the network failed.", "KV cache"),
    ("The failure is not caused by the KV cache.", "KV cache"),
    ("There is no sign of a KV-cache problem.", "KV cache"),
    ("Lower --gpu-memory-utilization to 0.925.", "0.92"),
    ("Set it to 56320.", "5632"),
    ("Check the tokenizer.", "token"),
    ("It was not preempted.", "preempt"),
    ("The TPU was never preempted, it ran out of HBM.", "preempt"),
    ("HBM was fine; the image pull failed.", "HBM"),
    ("The problem is unrelated to HBM.", "HBM"),
    ("Rather than HBM, the image pull failed.", "HBM"),
    ("This has nothing to do with the chat template.", "chat template"),
    ("Not because of the KV cache, but the image.", "KV cache"),
    ("The server has not started yet.", "started"),
    ("It is unhealthy.", "healthy"),
    ("The server already answered.", "ready"),
    ("It is not a 429 or a rate limit.", "rate limit"),
    ("This has nothing to do with HBM or out of memory.", "out of memory"),
]


@pytest.mark.parametrize(("text", "phrase"), STATED)
def test_stated(text: str, phrase: str) -> None:
    assert states(text, phrase)


@pytest.mark.parametrize(("text", "phrase"), NOT_STATED)
def test_not_stated(text: str, phrase: str) -> None:
    assert not states(text, phrase)


@pytest.mark.parametrize(
    ("text", "claims"),
    [
        ("The server did not crash; it started.", False),
        ("No failure: startup complete.", False),
        ("There were no errors and no failure.", False),
        ("The boot was unsuccessful.", True),
        ("The server crashed.", True),
        ("It failed to start.", True),
        ("The server did not start.", True),
    ],
)
def test_failure_claims(text: str, claims: bool) -> None:
    assert claims_failure(text) is claims


def test_values_after_a_flag() -> None:
    assert values_after("Set --gpu-memory-utilization to 0.925.", "gpu-memory-utilization") == ["0.925"]
    assert values_after("lower --gpu-memory-utilization=0.92 and restart", "gpu-memory-utilization") == [
        "0.92"
    ]
    assert values_after("Lower --max-model-len to 5,632 or less", "max-model-len") == ["5,632"]
    assert values_after("Lower --max-model-len and restart the engine now", "max-model-len") == []
