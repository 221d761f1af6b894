"""Evaluation of the log analyst on real failures: a deterministic part (CI) and a model part (any VLLM_URL).

The cases are the field-report corpus, ``tests/data/field-reports/corpus.json`` (the handed field reports,
the earlier fixtures, and variants of each fault kind written from other public reports): per case a log
or Cloud Logging export, a question, and the rubric of a correct answer:

- **cause**: the answer states the cause (any of ``cause_any``; for a healthy boot: it says so and
  claims no failure);
- **fix**: the answer gives the fix (any of ``fix_any``; a healthy boot has no fix part);
- **citation**: the model itself cites, and the analyst verified, an entry (``[insertId]``) or template
  (``[T<n>]``) that holds the root-cause line (the entries matching ``cite``), for the cause it states:
  the right line cited for a wrong cause earns nothing.

"States" is `tpu_devops.logs.scoring.states`: whole words (``success`` is not in ``unsuccessful``) and not
denied ("the KV cache is not the problem" does not name the KV cache as the cause).

An answer gets nothing when the model was not consulted (the deterministic summary is not the model's
work), when the analyst itself judged it not usable (cut off, degenerate, cites no entry that exists,
reads like instructions: ``answer_problems``), or when its text is empty or degenerate
(`tpu_devops.serving.answers.degenerate`: repetition, template markers), an echo of the prompt (most of
its 8-word runs copied from the evidence pack or the question), or too short. The score is printed with
its parts and the case count, and next to it the score the rubric alone would give (ignoring the
analyst's verdict), so a model that writes the right words in answers the analyst rejects is visible.

- Deterministic (``--deterministic``, also run by tests/test_logs_eval.py): the summary ranks the
  root-cause template first and its evidence pack cites one of the root-cause entries.
- Model (default): `analyze` against ``VLLM_URL`` (or ``--url``), scored as above.

``--build`` regenerates the converted exports of ``tests/data/logs`` from ``tests/data/vllm-logs`` (Docker
``gcplogs`` driver entries with ``jsonPayload.message`` plus ``google_metadata_script_runner`` entries).

Usage: ``python scripts/eval_analyst.py [--url http://IP:8000] [--deterministic] [--build]``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data"
LOGS = DATA / "logs"
CORPUS = DATA / "field-reports" / "corpus.json"
FIXTURES = DATA / "vllm-logs"  # copies of ../shared/fixtures/vllm-logs
PROJECT = "my-project"
INSTANCE = {"name": "gemma4-qr-node", "zone": "us-west4-a", "id": "189351555337452"}
PARTS = ("cause", "fix", "citation")
ECHO_SHARE = 0.6  # an answer whose 8-word runs come mostly from the prompt is an echo
MIN_WORDS = 5
_PREFIX = re.compile(
    r"^(?:\([A-Za-z_]+ pid=\d+\)\s+)?(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d:\d\d:\d\d) "
)


# ---- building the converted exports ------------------------------------------------------------------


def _resource() -> dict[str, Any]:
    return {
        "type": "gce_instance",
        "labels": {"instance_id": INSTANCE["id"], "zone": INSTANCE["zone"], "project_id": PROJECT},
    }


def convert(
    log_path: Path, *, image: str = "vllm/vllm-tpu:nightly", year: int = 2026
) -> list[dict[str, Any]]:
    """A plain ``docker logs`` file -> Cloud Logging entries, newest first (as gcloud prints them).

    Timestamps come from vLLM's ``MM-DD HH:MM:SS`` prefix (lines without one inherit the previous
    line's time), plus one microsecond per line to keep order; severity from the prefix, else the
    previous line's (a traceback continues its ERROR). insertIds are stable hashes.
    """
    entries: list[dict[str, Any]] = []
    last_ts = None
    last_sev = "INFO"
    raw = log_path.read_bytes().decode("utf-8", errors="replace")  # split on "\n" only, as Docker does
    lines = [x.rstrip("\r") for x in raw.split("\n") if x.strip()]
    for number, line in enumerate(lines, 1):
        m = _PREFIX.match(line)
        if m:
            last_sev = {"WARNING": "WARNING", "ERROR": "ERROR", "CRITICAL": "CRITICAL", "DEBUG": "DEBUG"}.get(
                m.group(1), "INFO"
            )
            last_ts = f"{year}-{m.group(2)}-{m.group(3)}T{m.group(4)}"
        ts = f"{last_ts or f'{year}-01-01T00:00:00'}.{number:06d}Z"
        digest = hashlib.sha1(f"{log_path.name}:{number}".encode()).hexdigest()[:14]
        entries.append(
            {
                "insertId": digest,
                "jsonPayload": {
                    "message": line,
                    "container": {"name": "/vllm-gemma4", "imageName": image},
                    "instance": dict(INSTANCE),
                },
                "resource": _resource(),
                "timestamp": ts,
                "severity": last_sev,
                "logName": f"projects/{PROJECT}/logs/gcplogs-docker-driver",
                "receiveTimestamp": ts,
            }
        )
    first = entries[0]["timestamp"][:19] if entries else f"{year}-01-01T00:00:00"
    for i, text in enumerate(
        [
            "startup-script: Fetching hf-token from Secret Manager",
            f"startup-script: Pulling {image}",
            "startup-script: Starting container vllm-gemma4",
        ]
    ):
        entries.insert(
            i,
            {
                "insertId": hashlib.sha1(f"{log_path.name}:startup:{i}".encode()).hexdigest()[:14],
                "jsonPayload": {"message": text},
                "resource": _resource(),
                "timestamp": f"{first}.00000{i}Z".replace("T", "T", 1),
                "severity": "INFO",
                "labels": {"instance_name": INSTANCE["name"]},
                "logName": f"projects/{PROJECT}/logs/google_metadata_script_runner",
            },
        )
    entries.sort(key=lambda e: e["timestamp"], reverse=True)
    return entries


def build() -> None:
    """Write the converted exports next to the copied fixture export."""
    LOGS.mkdir(parents=True, exist_ok=True)
    for src, dst in (
        ("v5e1-e2b-qwix-int8-abstract-fail.log", "v5e1-qwix-int8-export.json"),
        ("v6e1-e2b-boot-ok.log", "v6e1-boot-ok-export.json"),
    ):
        entries = convert(FIXTURES / src)
        (LOGS / dst).write_text(json.dumps(entries, indent=1) + "\n")
        print(f"wrote {dst}: {len(entries)} entries")
    # A healthy boot that is then preempted: the container log just stops; the cause is an audit
    # system event (protoPayload, methodName compute.instances.preempted) in another log.
    entries = convert(FIXTURES / "v6e1-e2b-boot-ok.log")
    last = max(e["timestamp"] for e in entries)[:19]
    preempt = {
        "insertId": hashlib.sha1(b"preempted").hexdigest()[:14],
        "logName": f"projects/{PROJECT}/logs/cloudaudit.googleapis.com%2Fsystem_event",
        "protoPayload": {
            "@type": "type.googleapis.com/google.cloud.audit.AuditLog",
            "methodName": "compute.instances.preempted",
            "resourceName": f"projects/{PROJECT}/zones/{INSTANCE['zone']}/instances/{INSTANCE['name']}",
            "serviceName": "compute.googleapis.com",
            "status": {"message": "Instance was preempted."},
        },
        "resource": _resource(),
        "severity": "NOTICE",
        "timestamp": f"{last[:14]}59:00Z",
    }
    entries.insert(0, preempt)
    (LOGS / "v6e1-preempted-export.json").write_text(json.dumps(entries, indent=1) + "\n")
    print(f"wrote v6e1-preempted-export.json: {len(entries)} entries")


# ---- the cases -------------------------------------------------------------------------------------


def load_cases() -> list[dict[str, Any]]:
    """The evaluation cases (the logs of the corpus), with ``path`` and ``root_insert_ids`` (the entries
    holding the line a correct answer cites) filled in."""
    from tpu_devops.logs.sources import FileSource

    cases = []
    for c in json.loads(CORPUS.read_text()):
        if c["kind"] != "log" or not c.get("question"):
            continue
        case = dict(c, id=Path(c["file"]).stem, path=str(DATA / c["file"]))
        pattern = re.compile(case["cite"])
        source = FileSource(case["path"])
        case["root_insert_ids"] = [
            r.insert_id for page in source.pages() for r in page if pattern.search(r.message)
        ]
        cases.append(case)
    return cases


def deterministic(case: dict[str, Any]) -> dict[str, Any]:
    """Score the summary of one case: root cause first, and the pack cites one of its entries."""
    from tpu_devops.logs.evidence import root_of, summarize_mining
    from tpu_devops.logs.mining import mine
    from tpu_devops.logs.sources import FileSource

    summary = summarize_mining(mine(FileSource(case["path"]).pages()), source=case["id"])
    root = root_of(summary.ranked)
    if case["root"] is None:
        return {
            "case": case["id"],
            "root_cause_first": root is None,
            "cited": True,
            "tokens": summary.pack.tokens,
        }
    pattern = re.compile(case["cite"])
    # An exception header whose reason is on the next line (pydantic's "Value error, ...") is read with that
    # line: the root template holds the cited line as its continuation.
    first_ok = root is not None and any(
        pattern.search(m)
        for e in root.stats.exemplars
        for m in (e.message, *((e.before if summary.mining.newest_first else e.after) or [])[:2])
    )
    cited = any(i in summary.pack.text for i in case["root_insert_ids"])
    return {
        "case": case["id"],
        "root_cause_first": first_ok,
        "cited": cited,
        "tokens": summary.pack.tokens,
        "top": root.stats.template[:80] if root else None,
    }


# ---- scoring the model's answer ---------------------------------------------------------------------


@dataclass
class Score:
    """One case's score: 1 point per rubric part the answer meets; nothing for an unusable answer.

    ``rubric``: the parts the text meets by the rubric alone, kept when the analyst's verdict
    (``verdict``: its ``answer_problems``) zeroes ``parts``."""

    case: str
    parts: dict[str, int]
    possible: dict[str, int]
    unusable: str | None = None
    notes: list[str] = field(default_factory=list)
    rubric: dict[str, int] | None = None
    verdict: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def rubric_total(self) -> int:
        """Points by the rubric alone (the analyst's verdict ignored)."""
        return sum((self.rubric if self.rubric is not None else self.parts).values())

    @property
    def maximum(self) -> int:
        return sum(self.possible.values())

    def row(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "score": f"{self.total}/{self.maximum}",
            **{p: self.parts[p] for p in PARTS if self.possible[p]},
            "unusable": self.unusable,
            **({"rubric_alone": f"{self.rubric_total}/{self.maximum}"} if self.verdict else {}),
        }


def _ngrams(text: str, n: int = 8) -> set[tuple[str, ...]]:
    words = re.findall(r"[\w./:-]+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def echo_share(answer: str, prompt: str) -> float:
    """Share of the answer's 8-word runs that appear in ``prompt`` (0 for answers under 8 words)."""
    mine = _ngrams(answer)
    return len(mine & _ngrams(prompt)) / len(mine) if mine else 0.0


def unusable(answer: str, prompt: str) -> str | None:
    """Why ``answer`` earns nothing whatever it contains: empty, degenerate, too short, or an echo."""
    from tpu_devops.serving.answers import degenerate

    reason = degenerate(answer)
    if reason:
        return reason
    if len(re.findall(r"[A-Za-z]{2,}", answer)) < MIN_WORDS:
        return f"fewer than {MIN_WORDS} words"
    share = echo_share(answer, prompt)
    if share >= ECHO_SHARE:
        return f"an echo of the prompt ({share:.0%} of its 8-word runs are copied from it)"
    return None


def wrong_value(case: dict[str, Any], answer: str) -> bool:
    """True when the answer sets a flag of the rubric's fix to a number that is not the rubric's
    ("--gpu-memory-utilization to 0.925" where the fix is 0.92): the right flag, the wrong fix."""
    from tpu_devops.logs.scoring import values_after

    numbers = {f.replace(",", "") for f in case["fix_any"] if re.fullmatch(r"[\d.,]+", f)}
    if not numbers:
        return False
    given = [
        v.replace(",", "")
        for f in case["fix_any"]
        if not re.fullmatch(r"[\d.,]+", f)
        for v in values_after(answer, f)
    ]
    return bool(given) and not numbers.intersection(given)


def score_answer(
    case: dict[str, Any],
    answer: str,
    citations: list[Any],
    prompt: str,
    *,
    consulted: bool = True,
    template_ids: set[str] | None = None,
    verdict: list[str] | None = None,
) -> Score:
    """Score one answer against the case's rubric (module docstring).

    ``citations``: the analyst's checked citations of the model's own text (objects with ``ref``, ``kind``,
    ``verified``); ``prompt``: what the model was shown (evidence pack and question), for the echo test;
    ``template_ids``: the templates that hold a root-cause entry; ``verdict``: the analyst's own
    ``answer_problems`` (any problem zeroes the score; the rubric's points are kept in ``rubric``).
    """
    from tpu_devops.logs.scoring import claims_failure, states_any

    failure = case["root"] is not None
    possible = {"cause": 1, "fix": 1 if failure else 0, "citation": 1}
    parts = dict.fromkeys(PARTS, 0)
    if not consulted:
        return Score(case["id"], parts, possible, "the model was not consulted")
    reason = unusable(answer, prompt)
    if reason:
        return Score(case["id"], parts, possible, reason)
    if failure:
        parts["cause"] = int(states_any(answer, case["cause_any"]))
        parts["fix"] = int(states_any(answer, case["fix_any"]) and not wrong_value(case, answer))
    else:
        parts["cause"] = int(states_any(answer, case["cause_any"]) and not claims_failure(answer))
    roots = set(case["root_insert_ids"]) | (template_ids or set())
    cited = any(c.verified and c.ref in roots for c in citations)
    parts["citation"] = int(cited and bool(parts["cause"]))
    if verdict:
        zero = dict.fromkeys(PARTS, 0)
        why = "the analyst judged it not usable: " + "; ".join(verdict)
        return Score(case["id"], zero, possible, why, rubric=parts, verdict=list(verdict))
    return Score(case["id"], parts, possible)


@lru_cache(maxsize=64)
def _evidence(path: str, question: str, root_ids: tuple[str, ...]) -> tuple[str, frozenset[str]]:
    """(what the model is shown: question and evidence pack, the templates holding a root entry)."""
    from tpu_devops.logs.analyst import read_into_index
    from tpu_devops.logs.sources import FileSource

    index, summary = read_into_index(FileSource(path))
    ids = set(root_ids)
    templates = {
        tid for record, tid in zip(index.records, index.template_of, strict=True) if record.insert_id in ids
    }
    return f"{question}\n{summary.pack.text}", frozenset(templates)


async def model_score(case: dict[str, Any], settings: Any) -> Score:
    """Run the analyst on one case against ``settings``' endpoint and score the model's own words."""
    from tpu_devops.logs.analyst import analyze
    from tpu_devops.logs.sources import FileSource

    result = await analyze(case["question"], FileSource(case["path"]), settings=settings)
    prompt, templates = _evidence(case["path"], case["question"], tuple(case["root_insert_ids"]))
    return score_answer(
        case,
        result.answer if result.model_consulted else "",
        result.citations,
        prompt,
        consulted=result.model_consulted,
        template_ids=set(templates),
        verdict=result.answer_problems if result.model_consulted else None,
    )


async def score_all(cases: list[dict[str, Any]], settings: Any) -> list[Score]:
    """`model_score` for every case, in order."""
    return [await model_score(c, settings) for c in cases]


def report(scores: list[Score]) -> str:
    """The total with its parts and the case count, then the rubric-alone total, e.g. ``model score:
    61/134 over 46 cases (cause 30/46, fix 19/42, citation 12/46; 9 of 46 answers unusable); by the
    rubric alone, ignoring the analyst's verdict: 66/134``."""
    total = sum(s.total for s in scores)
    maximum = sum(s.maximum for s in scores)
    parts = ", ".join(
        f"{p} {sum(s.parts[p] for s in scores)}/{sum(s.possible[p] for s in scores)}" for p in PARTS
    )
    unusable_n = sum(s.unusable is not None for s in scores)
    rubric = sum(s.rubric_total for s in scores)
    return (
        f"model score: {total}/{maximum} over {len(scores)} cases ({parts}; {unusable_n} of {len(scores)} "
        f"answers unusable); by the rubric alone, ignoring the analyst's verdict: {rubric}/{maximum}"
    )


def main() -> int:
    """CLI entry point; prints one line per case and the total score with its parts."""
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("VLLM_URL", ""))
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--build", action="store_true")
    args = parser.parse_args()
    if args.build:
        build()
        return 0
    cases = load_cases()
    if args.deterministic or not args.url:
        if not args.url and not args.deterministic:
            print("no VLLM_URL: running the deterministic part only")
        rows = [deterministic(c) for c in cases]
        for r in rows:
            print(json.dumps(r))
        ok = sum(r["root_cause_first"] and r["cited"] for r in rows)
        print(f"deterministic score: {ok}/{len(rows)} cases")
        return 0 if ok == len(rows) else 1
    from tpu_devops.config import load_settings
    from tpu_devops.serving.client import close_all

    settings = load_settings(environ={"VLLM_URL": args.url, "TPU_DEVOPS_ENV_FILE": "/nonexistent"})

    async def run() -> list[Score]:
        try:
            return await score_all(cases, settings)
        finally:
            await close_all()

    scores = asyncio.run(run())
    for s in scores:
        print(json.dumps(s.row()))
    print(report(scores))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
