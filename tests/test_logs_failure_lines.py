"""What the fallback calls a failure line, defined once (`tpu_devops.logs.failure_lines`), and the reason
an exception header announces on its next lines."""

from __future__ import annotations

import pytest

from tpu_devops.logs import failure_lines as fl
from tpu_devops.logs import signatures as sg


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ("KeyboardInterrupt: terminated", "KeyboardInterrupt"),
        ("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: x", "jax.errors.JaxRuntimeError"),
        ("torchax.tensor.OperatorNotFound: aten::foo", "torchax.tensor.OperatorNotFound"),
        ("SystemExit", "SystemExit"),
        ("UserWarning: Some donated buffers were not usable", None),
        ("Error: something", None),  # failure words, not an exception header
        ("the Error of it", None),
    ],
)
def test_exception_headers(body: str, kind: str | None) -> None:
    assert fl.exception_header(body) == kind


def test_every_word_the_classes_use_is_an_anchor() -> None:
    for suffix in fl.EXCEPTION_SUFFIXES:
        assert suffix in fl.ANCHORS
    for word in fl.FAILURE_WORDS:
        assert {word, word.capitalize(), word.upper()} <= set(fl.ANCHORS)
        assert fl.has_failure_words(f"x {word.upper()} y") and fl.has_failure_words(f"x {word} y")
    assert not fl.has_failure_words("FailedScheduling")  # an event reason is not the word "failed"


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        # pydantic v2, model-level validator (vLLM ModelConfig; field report C15)
        (
            [
                "  Value error, gptq quantization is currently not supported in tpu. [type=value_error, "
                "input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]",
                "    For further information visit https://errors.pydantic.dev/2.11/v/value_error",
            ],
            "gptq quantization is currently not supported in tpu.",
        ),
        # pydantic v2, a field error: the field line, then the reason
        (
            [
                "max_model_len",
                "  Input should be greater than 0 [type=greater_than, input_value=-1, input_type=int]",
            ],
            "max_model_len: Input should be greater than 0",
        ),
        # an OSError whose cause is the HTTP error on the next line (field report B03)
        (
            [
                "429 Client Error: Too Many Requests for url: https://huggingface.co/x/resolve/main/config.json"
            ],
            "429 Client Error: Too Many Requests for url: https://huggingface.co/x/resolve/main/config.json",
        ),
        # a new exception is not a reason
        (["RuntimeError: Engine core initialization failed."], None),
        (["Traceback (most recent call last):"], None),
        ([""], None),
    ],
)
def test_the_reason_comes_from_the_next_lines(lines: list[str], reason: str | None) -> None:
    assert fl.continuation(lines) == reason


def test_only_headers_that_announce_a_reason_are_continued() -> None:
    assert fl.continued("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig")
    assert fl.continued(
        "pydantic_core._pydantic_core.ValidationError: 2 validation errors for SchedulerConfig"
    )
    assert fl.continued("OSError: There was a specific connection error when trying to load x:")
    assert not fl.continued("ValueError: gptq quantization is currently not supported in tpu.")
    assert not fl.continued("INFO: a line that ends with a colon:")


def test_the_same_process_continues_the_message() -> None:
    header = (
        "(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig"
    )
    interleaved = [
        "(EngineCore pid=9) INFO 09-09 16:00:06 [core.py:1] starting",
        "(APIServer pid=1)   Value error, awq_marlin quantization is currently not supported in tpu. [type=value_error]",
    ]
    reading, reason = sg.read_continued(header, interleaved)
    assert reason == "awq_marlin quantization is currently not supported in tpu."
    assert reading is not None and reading.id == "quantization-unsupported-on-platform"
    assert reading.details["method"] == "awq_marlin" and "auto_awq" in reading.fix
    unknown, why = sg.read_continued(
        header, ["(APIServer pid=1)   Value error, something new [type=value_error]"]
    )
    assert unknown is None and why == "something new"
    fallback = sg.unrecognised(header, "exception", why)
    assert "something new" in fallback.title and fallback.details["cause"] == "something new"
