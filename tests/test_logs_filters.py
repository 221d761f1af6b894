"""Filter building: RFC 3339 windows, severity, labels, and the raw filter bracketed, never spliced."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tpu_devops.errors import InputError
from tpu_devops.logs.filters import (
    FilterSpec,
    build_filter,
    check_raw_filter,
    log_name,
    parse_time,
    quote_value,
)

NOW = datetime(2026, 8, 8, 0, 0, 0, tzinfo=UTC)


def test_window_severity_labels_and_logs() -> None:
    spec = FilterSpec(
        since="6h",
        until="2026-08-07T23:30:00Z",
        severity="warn",
        resource_type="gce_instance",
        resource_labels={"zone": "us-west4-a"},
        labels={"instance_name": 'a"b'},
        log_ids=["gcplogs-docker-driver"],
        text="OOM",
    )
    f = build_filter(spec, project="my-project", now=NOW)
    assert f.startswith('timestamp>="2026-08-07T18:00:00Z" AND timestamp<="2026-08-07T23:30:00Z"')
    assert "severity>=WARNING" in f
    assert 'resource.type="gce_instance"' in f
    assert 'resource.labels.zone="us-west4-a"' in f
    assert 'labels.instance_name="a\\"b"' in f
    assert 'logName="projects/my-project/logs/gcplogs-docker-driver"' in f
    assert f.endswith('AND "OOM"')


def test_default_window_is_24h_and_raw_filter_is_one_bracketed_clause() -> None:
    f = build_filter(FilterSpec(raw='textPayload:"x" OR severity>=ERROR'), project="p-roject", now=NOW)
    assert f == 'timestamp>="2026-08-07T00:00:00Z" AND (textPayload:"x" OR severity>=ERROR)'


@pytest.mark.parametrize("raw", ["a) OR (b", 'severity>=ERROR) OR ("x', "(a", 'text:"unterminated'])
def test_raw_filter_that_could_escape_the_bracket_is_refused(raw: str) -> None:
    with pytest.raises(InputError) as err:
        check_raw_filter(raw)
    assert err.value.field == "filter"


def test_parentheses_inside_strings_are_fine() -> None:
    assert check_raw_filter('textPayload:"a ) b"') == 'textPayload:"a ) b"'


def test_bad_inputs_name_the_field() -> None:
    with pytest.raises(InputError) as err:
        build_filter(FilterSpec(severity="LOUD"), project="p-roject")
    assert err.value.field == "severity"
    with pytest.raises(InputError) as err:
        parse_time("yesterday-ish", field_name="since")
    assert err.value.field == "since"
    with pytest.raises(InputError):
        build_filter(FilterSpec(since="1h", until="2h"), project="p-roject", now=NOW)
    with pytest.raises(InputError):
        build_filter(FilterSpec(resource_labels={"bad key": "v"}), project="p-roject")


def test_quoting_and_log_names() -> None:
    assert quote_value('say "hi" \\ bye') == '"say \\"hi\\" \\\\ bye"'
    assert (
        log_name("p", "cloudaudit.googleapis.com/activity")
        == "projects/p/logs/cloudaudit.googleapis.com%2Factivity"
    )


def test_a_comment_that_could_hide_a_parenthesis_is_refused() -> None:
    # Without the "--" lines the real parser reads `X) OR (Y`: it would close our bracket.
    for raw in ("-- (\nX) OR (Y -- )\n", "severity>=ERROR -- only errors"):
        with pytest.raises(InputError) as err:
            check_raw_filter(raw)
        assert err.value.field == "filter" and "--" in err.value.message
    assert (
        check_raw_filter('textPayload:"a -- b" AND -severity>=ERROR')
        == 'textPayload:"a -- b" AND -severity>=ERROR'
    )


def test_a_window_beyond_the_calendar_is_an_input_error() -> None:
    with pytest.raises(InputError) as err:
        parse_time("99999999d", field_name="since", now=NOW)
    assert err.value.field == "since" and "out of range" in err.value.message
