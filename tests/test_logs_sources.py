"""Sources: exported files in every shape, Cloud Logging pages, node filters, redaction on read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.fakes.gcp import FakeGcp
from tpu_devops.config import load_settings
from tpu_devops.errors import InputError
from tpu_devops.logs.sources import (
    CloudLoggingSource,
    FileSource,
    fetch_container_log_text,
    get_node_logs,
    node_filter,
    open_source,
    read_page,
    split_prefix,
)

EXPORT = FIXTURES / "logs" / "v5e1-util095-export.json"
TEXT_LOG = FIXTURES / "vllm-logs" / "v5e1-e2b-qwix-int8-abstract-fail.log"
SECRET = "hf_" + "PlantedSecretToken0123456789abcdefXYZ"


def _records(path: Path) -> list:
    src = FileSource(str(path), page_size=100)
    return [r for page in src.pages() for r in page]


def test_gcloud_json_array_is_streamed_in_pages() -> None:
    src = FileSource(str(EXPORT), page_size=100)
    pages = list(src.pages())
    assert src.kind == "json-array" and len(pages) == 12 and sum(map(len, pages)) == 1175
    first = pages[0][0]
    assert first.insert_id == "801700344a6446" and first.severity == "ERROR"
    assert first.log == "gcplogs-docker-driver" and first.labels["container"] == "vllm-gemma4"
    assert first.labels["instance_name"] == "gemma4-qr-node"
    assert first.body.startswith("RuntimeError: Engine core initialization failed")


def test_json_lines_and_api_response_shapes(tmp_path: Path) -> None:
    entries = json.loads(EXPORT.read_text())[:5]
    jl = tmp_path / "x.jsonl"
    jl.write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    obj = tmp_path / "x.json"
    obj.write_text(json.dumps({"entries": entries}, indent=2))
    assert [r.insert_id for r in _records(jl)] == [e["insertId"] for e in entries]
    assert [r.insert_id for r in _records(obj)] == [e["insertId"] for e in entries]


def test_plain_docker_text_gets_line_ids_severity_and_time() -> None:
    records = _records(TEXT_LOG)
    assert records[0].insert_id == "line-1" and records[0].severity == "INFO"
    assert records[0].timestamp.endswith("-08-07T20:41:56Z")
    errors = [r for r in records if "There is no module or parameter named" in r.message]
    assert errors and errors[0].severity == "ERROR"


def test_text_payload_proto_payload_and_redaction(tmp_path: Path) -> None:
    entries = [
        {
            "insertId": "a1",
            "timestamp": "2026-08-07T00:00:01Z",
            "severity": "WARNING",
            "textPayload": f"token {SECRET} for ops@example.com",
        },
        {
            "insertId": "a2",
            "timestamp": "2026-08-07T00:00:02Z",
            "severity": "NOTICE",
            "logName": "projects/p/logs/cloudaudit.googleapis.com%2Fsystem_event",
            "protoPayload": {
                "methodName": "compute.instances.preempted",
                "resourceName": "projects/p/zones/z/instances/n",
                "status": {"message": "Instance was preempted."},
            },
        },
    ]
    path = tmp_path / "e.json"
    path.write_text(json.dumps(entries))
    src = FileSource(str(path))
    a, b = [r for page in src.pages() for r in page]
    assert SECRET not in a.message and "<HF_TOKEN_1>" in a.message and "<EMAIL_1>" in a.message
    assert b.log == "cloudaudit.googleapis.com/system_event"
    assert b.message == "compute.instances.preempted projects/p/zones/z/instances/n: Instance was preempted."
    assert src.redactor.counts == {"HF_TOKEN": 1, "EMAIL": 1}


def test_bad_files_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        FileSource(str(tmp_path / "missing.json"))
    assert err.value.field == "path"
    bad = tmp_path / "bad.json"
    bad.write_text('[{"insertId": "x"}, {oops')
    with pytest.raises(InputError):
        list(FileSource(str(bad)).pages())


def test_split_prefix() -> None:
    assert split_prefix("(EngineCore pid=187) ERROR 08-07 23:27:17 [core.py:1349] boom") == ("ERROR", "boom")
    assert split_prefix("plain line") == (None, "plain line")


def test_cloud_source_pages_and_node_logs() -> None:
    with FakeGcp() as gcp:
        gcp.logging.load_export(EXPORT)
        s = load_settings(
            environ={
                "GOOGLE_CLOUD_PROJECT": "my-project",
                "TPU_DEVOPS_GCP_ENDPOINT": gcp.url,
                "TPU_DEVOPS_ENV_FILE": "/nonexistent",
            }
        )
        flt = node_filter(s, "gemma4-qr", "container", since="2026-08-07T00:00:00Z")
        src = CloudLoggingSource(s, flt, page_size=500, max_entries=1200)
        assert sum(len(p) for p in src.pages()) == 1171 and src.next_page_token is None
        page = read_page(CloudLoggingSource(s, flt), 10)
        assert page.returned == 10 and page.next_page_token and any("truncated" in n for n in page.notices)
        nxt = read_page(CloudLoggingSource(s, flt, page_token=page.next_page_token), 10)
        assert not {e.insert_id for e in page.entries} & {e.insert_id for e in nxt.entries}
        system = get_node_logs(s, "system", node="gemma4-qr", since="2026-08-07T00:00:00Z", limit=10)
        assert system.returned == 4 and all(e.log == "google_metadata_script_runner" for e in system.entries)
        other = get_node_logs(s, "container", node="other-node", since="2026-08-07T00:00:00Z", limit=10)
        assert other.returned == 0
        text = fetch_container_log_text(s, "gemma4-qr", since="2026-08-07T00:00:00Z")
        lines = text.splitlines()
        assert len(lines) == 1171 and "RuntimeProgramAllocationFailure" in text
        assert lines[-1].startswith("(APIServer pid=1) RuntimeError: Engine core initialization failed")


def test_open_source_rejects_mixed_inputs() -> None:
    s = load_settings(environ={"GOOGLE_CLOUD_PROJECT": "my-project", "TPU_DEVOPS_ENV_FILE": "/nonexistent"})
    with pytest.raises(InputError) as err:
        open_source(s, path=str(EXPORT), node="gemma4-qr")
    assert err.value.field == "path"
    # A window or severity is not applied to a file: refused rather than silently ignored.
    with pytest.raises(InputError) as err:
        open_source(s, path=str(EXPORT), since="1h", severity="ERROR")
    assert err.value.field == "path" and "since/severity" in (err.value.fix or "")
    with pytest.raises(InputError):
        open_source(s, node="Bad_Node!")


def test_bad_file_shapes_name_the_path_and_the_fix(tmp_path: Path) -> None:
    cases = {
        "empty.json": ("", "empty"),
        "blank.log": ("\n  \n", "empty"),
        "notjson.json": ("hello { not json\n", "does not start with JSON"),
        "string.json": ('"just a string"\n', "does not start with JSON"),
        "binary.log": ("\x00\x01binary", "binary"),
    }
    for name, (content, problem) in cases.items():
        path = tmp_path / name
        path.write_text(content)
        with pytest.raises(InputError) as err:
            list(FileSource(str(path)).pages())
        assert err.value.field == "path" and problem in err.value.message and err.value.fix, name
    with pytest.raises(InputError) as err:
        FileSource(str(tmp_path))
    assert err.value.message == "not a regular file: a directory"
    # Plain text under another name is still read as text (docker logs output).
    text = tmp_path / "vllm.log"
    text.write_text("INFO 08-07 23:11:08 [api_server.py:1] Starting vLLM server\n")
    assert [r.insert_id for r in _records(text)] == ["line-1"]


def test_an_array_element_that_never_closes_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    import tpu_devops.logs.sources as sources

    path = tmp_path / "broken.json"
    path.write_text('[{"insertId": "a", "textPayload": "' + "x" * (1 << 20))
    with path.open() as handle:
        records = sources._iter_json_array(handle, chunk_chars=1 << 12, max_element_chars=1 << 16)
        with pytest.raises(ValueError, match="within 65,536 characters"):
            list(records)
        assert handle.tell() < 1 << 17  # stopped near the bound, not at the end of the file


def test_every_shown_field_is_redacted(tmp_path: Path) -> None:
    entries = [
        {"insertId": "k1", "jsonPayload": {SECRET: "v", "other": 1}},
        {"insertId": "k2", "textPayload": "x", "labels": {SECRET: "v", "mail": "a@example.com"}},
        {"insertId": SECRET, "textPayload": "y"},
        # The JSON form of this payload is cut at 4,000 characters inside the token.
        {"insertId": "k4", "jsonPayload": {"pad": "p" * 3970, "z": SECRET}},
        {
            "insertId": "k5",
            "jsonPayload": {
                "message": "m",
                "instance": {"name": "ops@example.com"},
                "container": {"name": SECRET},
            },
        },
        {
            "insertId": "k6",
            "logName": f"projects/p/logs/{SECRET}",
            "resource": {"type": SECRET},
            "textPayload": "z",
        },
    ]
    path = tmp_path / "leak.json"
    path.write_text(json.dumps(entries))
    records = _records(path)
    shown = json.dumps(
        [[r.insert_id, r.timestamp, r.log, r.resource_type, r.labels, r.message] for r in records]
    )
    assert SECRET not in shown and SECRET[:12] not in shown
    assert "<HF_TOKEN_1>" in shown and "<EMAIL_1>" in shown
    assert records[3].message.endswith('"z":"<HF_TOKEN_1>"}')  # redacted whole, then cut


def test_a_run_of_empty_cloud_pages_stops_with_the_token_to_resume() -> None:
    from tpu_devops.logs.sources import MAX_EMPTY_PAGES

    with FakeGcp() as gcp:
        gcp.logging.load_export(EXPORT)
        gcp.logging.empty_pages = 100  # entries.list may answer empty pages while it scans
        s = load_settings(
            environ={
                "GOOGLE_CLOUD_PROJECT": "my-project",
                "TPU_DEVOPS_GCP_ENDPOINT": gcp.url,
                "TPU_DEVOPS_ENV_FILE": "/nonexistent",
            }
        )
        src = CloudLoggingSource(s, 'timestamp>="2026-08-07T00:00:00Z"', page_size=100)
        assert list(src.pages()) == []
        assert src.truncated and src.next_page_token and len(gcp.logging.requests) == MAX_EMPTY_PAGES


def test_an_over_long_line_is_cut_and_numbering_continues(tmp_path: Path) -> None:
    import tpu_devops.logs.sources as sources

    path = tmp_path / "long.log"
    path.write_bytes(b"first\n" + b"x" * 300 + b"\nthird\n")
    with path.open("rb") as handle:
        lines = list(sources._lines(handle, limit=64))
    assert [(n, len(line), whole) for n, line, whole in lines] == [(1, 6, True), (2, 64, False), (3, 6, True)]


def test_json_that_is_not_log_entries_is_refused(tmp_path: Path) -> None:
    # newcomer trial: a JSON array of scalars read as 0 entries, eval_set.json as 4 entries
    cases = {
        "scalars.json": '[1, 2, "x", null]',
        "empty-array.json": "[]",
        "objects.json": json.dumps([{"id": "a", "question": "q"}]),
        "lines.jsonl": '{"name": "a"}\n',
        "wrapped.json": json.dumps({"entries": [{"foo": 1}]}),
        "single.json": json.dumps({"foo": 1}),
    }
    for name, content in cases.items():
        (tmp_path / name).write_text(content)
        with pytest.raises(InputError) as err:
            _records(tmp_path / name)
        assert err.value.field == "path" and "log export" in err.value.message, (name, err.value.message)
    with pytest.raises(InputError) as err:
        _records(FIXTURES / "logs" / "eval_set.json")
    assert "not a Cloud Logging LogEntry" in err.value.message


def test_undecodable_bytes_without_nul_are_binary(tmp_path: Path) -> None:
    (tmp_path / "noise.log").write_bytes(bytes(range(128, 256)) * 40)
    with pytest.raises(InputError) as err:
        _records(tmp_path / "noise.log")
    assert "binary" in err.value.message


def test_an_empty_path_is_not_a_cloud_query() -> None:
    settings = load_settings(
        environ={"GOOGLE_CLOUD_PROJECT": "my-project", "TPU_DEVOPS_ENV_FILE": "/nonexistent"}
    )
    for path in ("", "  "):
        with pytest.raises(InputError) as err:
            open_source(settings, path=path)
        assert err.value.field == "path" and "empty path" in err.value.message


def test_secrets_across_lines_and_fields_never_reach_a_record(tmp_path: Path) -> None:
    from tests.test_logs_redact import PEM_LINES

    docker = tmp_path / "docker.log"
    docker.write_text(
        "\n".join(
            ["INFO 08-07 23:00:00 [key.py:1] loading key", *PEM_LINES, "INFO 08-07 23:00:01 [x.py:2] ok"]
        )
    )
    text = " ".join(r.message for page in FileSource(str(docker)).pages() for r in page)
    assert not any(line in text for line in PEM_LINES[1:5]) and "loading key" in text and "ok" in text
    token = "hf_" + "SplitAcrossFieldsToken0123456789ab"
    entries = [
        {
            "insertId": "s1",
            "timestamp": "2026-08-07T00:00:01Z",
            "jsonPayload": {"message": "token " + token[:14], "rest": token[14:]},
        },
        {
            "insertId": "s2",
            "timestamp": "2026-08-07T00:00:02Z",
            "jsonPayload": {"note": token[:9], "message": token[9:] + " used"},
        },
        {
            "insertId": "s3",
            "timestamp": "2026-08-07T00:00:03Z",
            "jsonPayload": {"a": token[:20], "b": token[20:]},
        },
        {"insertId": "s4", "timestamp": "2026-08-07T00:00:04Z", "textPayload": PEM_LINES[1]},
        {"insertId": "s5", "timestamp": "2026-08-07T00:00:05Z", "textPayload": PEM_LINES[0]},
    ]
    export = tmp_path / "split.json"
    export.write_text(json.dumps(entries))
    records = [r for page in FileSource(str(export)).pages() for r in page]
    shown = json.dumps([[r.message, r.labels] for r in records])
    for part in (token[:14], token[14:], token[9:], token[20:], PEM_LINES[1]):
        assert part[3:] not in shown, (part, shown)
