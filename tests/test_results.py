"""The two forms of a tool result (`tpu_devops.host.results`): summary first in both, pruned structure, and a
size cap that says what it left out."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import BaseModel, Field

from tpu_devops.host import artifacts
from tpu_devops.host.artifacts import Artifact
from tpu_devops.host.results import (
    HOST_COMBINED_LIMIT,
    HOST_TEXT_LIMIT,
    MAX_RESULT_CHARS,
    Table,
    ToolResult,
    cap_structured,
    cap_text,
    json_chars,
    table_records,
)
from tpu_devops.host.schemas import wire_output_schema


class Row(BaseModel):
    zone: str
    limit: int | None = None
    tags: list[str] = []
    ok: bool = False


class Answer(ToolResult):
    rows: list[Row]
    count: int
    note: str | None = None
    extra: dict[str, int | None] = {}
    nested: Row | None = None
    internal: str = Field(default="scratch", exclude=True)

    def headline(self) -> str:
        return f"{self.count} rows"


def test_structured_leads_with_the_summary_and_drops_only_what_carries_nothing() -> None:
    answer = Answer(
        rows=[Row(zone="a"), Row(zone="b", limit=4, tags=["x"], ok=True)],
        count=0,
        extra={"k": None, "j": 2},
        nested=Row(zone="n"),
    )
    data = answer.structured()
    assert list(data)[0] == "summary" and data["summary"] == "0 rows"
    assert data["rows"] == [{"zone": "a", "ok": False}, {"zone": "b", "limit": 4, "tags": ["x"], "ok": True}]
    assert data["count"] == 0  # zero and false are answers, not absence
    assert "note" not in data and data["extra"] == {"j": 2}
    assert data["nested"] == {"zone": "n", "ok": False}
    assert "internal" not in data
    text = answer.render_text()
    assert text.splitlines()[0] == data["summary"]


def test_summary_falls_back_to_the_first_line_of_the_text() -> None:
    class NoHeadline(ToolResult):
        value: int

        def render_text(self) -> str:
            return f"value is {self.value}\nmore"

    assert NoHeadline(value=3).structured()["summary"] == "value is 3"


def test_reserved_keys_cannot_be_fields() -> None:
    with pytest.raises(TypeError, match="reserved"):

        class Clash(ToolResult):
            summary: str


def test_text_over_the_cap_keeps_its_start_and_end_and_says_what_was_left_out() -> None:
    text = "\n".join(f"line {i} " + "x" * 90 for i in range(1, 2001))
    cut = cap_text(text, hint="use page_token")
    assert len(cut) <= MAX_RESULT_CHARS
    head, note, tail = (
        cut.split("\n[", 1)[0],
        "[" + cut.split("\n[", 1)[1].split("]\n", 1)[0] + "]",
        cut.split("]\n", 1)[1],
    )
    assert text.startswith(head) and text.endswith(tail) and head.endswith("x") and tail.startswith("line ")
    assert tail.endswith("line 2000 " + "x" * 90)
    first = int(head.rsplit("\n", 1)[1].split()[1]) + 1
    last = int(tail.split()[1]) - 1
    assert f"lines {first:,}-{last:,}" in note and "left out" in note and "use page_token" in note
    assert "20,000 characters of text" in note and "25,000" in note
    assert len(head) + len(tail) + len(note) + 2 == len(cut)
    assert cap_text("short") == "short"


@pytest.mark.parametrize("size", [40_001, 100_000, 5_000_000])
def test_a_huge_answer_on_one_line_keeps_both_ends(size: int) -> None:
    text = "START " + "y" * (size - 10) + " END"
    cut = cap_text(text, hint="ask for fewer max_tokens")
    assert len(cut) <= MAX_RESULT_CHARS and cut.startswith("START ") and cut.endswith(" END")
    assert "ask for fewer max_tokens" in cut and "characters" in cut and "left out" in cut


def test_a_long_string_in_the_structured_form_keeps_both_ends() -> None:
    data = {"summary": "s", "content": "BEGIN " + "z" * 60_000 + " FINISH"}
    cut = cap_structured(data, hint="ask for fewer max_tokens")
    assert json_chars(cut) <= MAX_RESULT_CHARS
    assert cut["content"].startswith("BEGIN ") and cut["content"].endswith(" FINISH")
    assert "characters cut" in cut["content"]
    assert any(n.startswith("content: ") and "(the middle)" in n for n in cut["omitted"])


def test_a_huge_model_answer_keeps_start_and_end_with_the_answers_own_hint() -> None:
    from tpu_devops.serving.chat import ChatResult

    answer = "FIRST WORDS " + "blah " * 1_000_000 + "LAST WORDS"
    result = ChatResult(
        endpoint="http://127.0.0.1:1",
        endpoint_source="VLLM_URL",
        model="m",
        content=answer,
        finish_reason="stop",
    )
    text, structured = result.host_forms()
    for form in (text, structured["content"]):
        assert "FIRST WORDS" in form and "LAST WORDS" in form
    assert "fewer max_tokens" in text and "time window" not in text


def test_structured_over_the_cap_loses_tail_items_and_says_so() -> None:
    data = {
        "summary": "s" * 300,
        "entries": [{"message": f"entry {i} " + "y" * 200} for i in range(1000)],
        "script": "z" * 50_000,
    }
    cut = cap_structured(data, hint="use next_page_token")
    assert json_chars(cut) <= MAX_RESULT_CHARS
    assert cut["summary"] == data["summary"]
    assert cut["entries"] == data["entries"][: len(cut["entries"])]
    notes = cut["omitted"]
    assert any(n.startswith("entries: ") and "of 1000 items" in n for n in notes)
    assert notes[-1] == "to see it, use next_page_token"
    assert cap_structured({"summary": "x", "a": [1]}) == {"summary": "x", "a": [1]}
    json.dumps(cut)  # still JSON


def test_host_forms_cap_both_forms() -> None:
    class Big(ToolResult):
        lines: list[str]

        def headline(self) -> str:
            return f"{len(self.lines)} lines"

    big = Big(lines=[f"{i}: " + "w" * 100 for i in range(3000)])
    text, structured = big.host_forms()
    assert len(text) <= MAX_RESULT_CHARS and json_chars(structured) <= MAX_RESULT_CHARS
    assert text.startswith("3000 lines") and structured["summary"] == "3000 lines"
    assert "left out" in text and structured["omitted"]


class Probe(BaseModel):
    name: str
    latency_ms: float | None = Field(None, description="how long it took, ms")
    tags: list[str] = []
    ok: bool = True


class Stage(BaseModel):
    stage: str
    probes: Table[Probe] = []


class Probes(ToolResult):
    probes: Table[Probe]
    stages: list[Stage] = []
    empty: Table[Probe] = []
    maybe: Table[Probe] | None = None
    seconds: float

    def headline(self) -> str:
        return f"{len(self.probes)} probes"


def _probes() -> Probes:
    return Probes(
        probes=[
            Probe(name="health", latency_ms=2.0, tags=["http"]),
            Probe(name="models", latency_ms=3.25),
            Probe(name="chat", ok=False),
        ],
        stages=[Stage(stage="boot", probes=[Probe(name="health", latency_ms=1.5)])],
        maybe=[Probe(name="tool_call", latency_ms=4.0)],
        seconds=14400.0,
    )


def test_a_table_field_is_sent_with_its_keys_once_and_reads_back_as_the_pruned_records() -> None:
    answer = _probes()
    out = answer.structured()
    assert out["probes"] == {
        "columns": ["name", "latency_ms", "tags", "ok"],
        "rows": [["health", 2, ["http"], True], ["models", 3.25, None, True], ["chat", None, None, False]],
    }
    assert "empty" not in out  # an empty table carries nothing, like an empty list
    assert out["stages"] == [
        {
            "stage": "boot",
            "probes": {"columns": ["name", "latency_ms", "ok"], "rows": [["health", 1.5, True]]},
        }
    ]
    assert out["maybe"] == {"columns": ["name", "latency_ms", "ok"], "rows": [["tool_call", 4, True]]}
    assert out["seconds"] == 14400 and isinstance(out["seconds"], int)  # a whole float as the integer it is
    # every fact of the records, none lost: the records come back as prune leaves them
    assert table_records(out["probes"]) == [
        {"name": "health", "latency_ms": 2, "tags": ["http"], "ok": True},
        {"name": "models", "latency_ms": 3.25, "ok": True},
        {"name": "chat", "ok": False},
    ]
    assert [Probe(**r) for r in table_records(out["probes"])] == answer.probes
    # Python and the text keep the records
    assert isinstance(answer.probes, list) and "health" in answer.render_text()
    assert json_chars(out["probes"]) < json_chars([p.model_dump(mode="json") for p in answer.probes])


def test_table_records_refuses_what_is_not_a_table() -> None:
    for bad in ([{"name": "x"}], {"columns": ["a"]}, {"rows": [], "columns": []}, "table"):
        with pytest.raises(ValueError, match="not a table"):
            table_records(bad)
    with pytest.raises(ValueError):  # a row longer than its columns is not silently cut
        table_records({"columns": ["a"], "rows": [[1, 2]]})


def test_the_published_output_schema_accepts_the_table_that_is_sent_and_refuses_a_list_of_objects() -> None:
    schema = wire_output_schema(Probes.model_json_schema(mode="serialization"))
    table = schema["properties"]["probes"]
    assert table["required"] == ["columns", "rows"]
    assert table["properties"]["columns"]["items"]["enum"] == ["name", "latency_ms", "tags", "ok"]
    assert "latency_ms: how long it took, ms" in table["description"]  # what a column means stays published
    assert schema["required"] == ["summary", "seconds"]  # an empty table is left out, like an empty list
    out = _probes().structured()
    jsonschema.validate(out, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**out, "probes": [{"name": "health"}]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**out, "probes": {"columns": ["nmae"], "rows": [["health"]]}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**out, "probes": {"columns": ["name"], "rows": [[{"nested": 1}]]}}, schema)


class Pages(ToolResult):
    pages: list[str]

    def headline(self) -> str:
        return f"{len(self.pages)} pages"


@pytest.mark.parametrize(
    "pages, width",
    [(300, 100), (30, 900), (2, 15_000), (1, 60_000)],  # many short lines, fewer long ones, two or one huge
)
def test_every_answer_fits_every_host_and_a_large_one_splits_the_room(pages: int, width: int) -> None:
    text, structured = Pages(pages=["p" * width for _ in range(pages)]).host_forms()
    assert len(text) <= HOST_TEXT_LIMIT and len(text) + json_chars(structured) <= HOST_COMBINED_LIMIT
    # both forms large: each keeps about half, so a host that reads one form still gets most of it
    assert len(text) > HOST_COMBINED_LIMIT * 0.4 and json_chars(structured) > HOST_COMBINED_LIMIT * 0.4
    assert text.startswith(f"{pages} pages") and structured["summary"] == f"{pages} pages"


def test_a_small_structured_form_leaves_the_text_its_whole_limit() -> None:
    class Long(ToolResult):
        n: int

        def render_text(self) -> str:
            return "head\n" + "t" * 30_000

    text, structured = Long(n=1).host_forms()
    assert HOST_TEXT_LIMIT - 200 < len(text) <= HOST_TEXT_LIMIT and structured == {"summary": "head", "n": 1}


def test_an_answer_that_fits_is_sent_whole_and_offers_no_file(tmp_path: Path) -> None:
    artifacts.configure(tmp_path)
    try:
        answer = Pages(pages=["short"]).host_answer()
    finally:
        artifacts.configure(None)
    assert answer.files == [] and not (tmp_path / "artifacts").exists()
    assert answer.text == Pages(pages=["short"]).render_text()


def test_a_cut_answer_keeps_the_whole_text_as_a_file_and_says_where(tmp_path: Path) -> None:
    result = Pages(pages=[f"page {i} " + "q" * 200 for i in range(400)])
    artifacts.configure(tmp_path)
    try:
        answer = result.host_answer()
    finally:
        artifacts.configure(None)
    [whole] = answer.files
    assert Path(whole.path).read_text() == result.full_text()  # nothing is lost
    assert whole.path.startswith(str(tmp_path.resolve() / "artifacts")) and whole.mime_type == "text/plain"
    assert whole.uri.startswith("tpu-devops://artifacts/pages-answer-")
    for said in (answer.text, answer.structured["omitted"][-1]):
        assert whole.path in said and whole.uri in said and f"{whole.bytes:,} bytes" in said
    assert artifacts.read(whole.uri, tmp_path).contents[0].text == result.full_text()


def test_without_a_state_directory_a_cut_answer_still_says_how_to_ask_for_less() -> None:
    answer = Pages(pages=["x" * 300 for _ in range(400)]).host_answer()
    assert answer.files == [] and "ask for less" in answer.text and "read the whole answer" not in answer.text


def test_artifact_fields_are_offered_wherever_they_sit(tmp_path: Path) -> None:
    chart = artifacts.write(
        "chart", b"\x89PNG\r\n\x1a\n", suffix=".png", mime_type="image/png", state_dir=tmp_path
    )
    script = artifacts.write(
        "script", "#!/bin/bash\n", suffix=".sh", mime_type="text/x-shellscript", state_dir=tmp_path
    )

    class Inner(BaseModel):
        chart: Artifact

    class Outer(ToolResult):
        script: Artifact | None = None
        inner: list[Inner] = []

    answer = Outer(script=script, inner=[Inner(chart=chart), Inner(chart=chart)]).host_answer()
    assert answer.files == [script, chart]
