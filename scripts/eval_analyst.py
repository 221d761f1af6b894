"""Evaluation of the log analyst on real vLLM TPU logs: deterministic part (CI) and model part (any VLLM_URL).

The set lives in ``tests/data/logs/eval_set.json``: per case an export (Cloud Logging entries,
``gcloud logging read --format=json`` shape), a question, and the facts a correct answer contains:
the root-cause template (a regex on its text), its entries' insertIds, and keywords.

- Deterministic (``--deterministic``, also run by tests/test_logs_eval.py): does the summary put the
  root-cause template first and does the evidence pack cite one of its insertIds?
- Model (default): run `analyze` against ``VLLM_URL`` (or ``--url``) and score the model's own words
  (not the deterministic summary appended to an uncited answer): 1 point for citing a verified
  root-cause insertId or template, 1 for a keyword, 0 if any citation is unverified.

``--build`` regenerates the exports from ``../shared/fixtures/vllm-logs`` (Docker ``gcplogs`` driver
entries with ``jsonPayload.message`` plus ``google_metadata_script_runner`` startup entries).

Usage: ``python scripts/eval_analyst.py [--url http://IP:8000] [--deterministic] [--build]``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data" / "logs"
FIXTURES = ROOT / "tests" / "data" / "vllm-logs"  # copies of ../shared/fixtures/vllm-logs
PROJECT = "my-project"
INSTANCE = {"name": "gemma4-qr-node", "zone": "us-west4-a", "id": "189351555337452"}
_PREFIX = re.compile(
    r"^(?:\([A-Za-z_]+ pid=\d+\)\s+)?(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d:\d\d:\d\d) "
)


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
    DATA.mkdir(parents=True, exist_ok=True)
    for src, dst in (
        ("v5e1-e2b-qwix-int8-abstract-fail.log", "v5e1-qwix-int8-export.json"),
        ("v6e1-e2b-boot-ok.log", "v6e1-boot-ok-export.json"),
    ):
        entries = convert(FIXTURES / src)
        (DATA / dst).write_text(json.dumps(entries, indent=1) + "\n")
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
    (DATA / "v6e1-preempted-export.json").write_text(json.dumps(entries, indent=1) + "\n")
    print(f"wrote v6e1-preempted-export.json: {len(entries)} entries")


def load_cases() -> list[dict[str, Any]]:
    """The evaluation cases, with ``root_cause_insert_ids`` filled from the export."""
    from tpu_devops.logs.sources import FileSource

    cases = json.loads((DATA / "eval_set.json").read_text())
    for case in cases:
        if case.get("root_cause_regex"):
            pattern = re.compile(case["root_cause_regex"])
            source = FileSource(str(DATA / case["export"]))
            case["root_cause_insert_ids"] = [
                r.insert_id for page in source.pages() for r in page if pattern.search(r.message)
            ]
        else:
            case["root_cause_insert_ids"] = []
    return cases


def deterministic(case: dict[str, Any]) -> dict[str, Any]:
    """Score the summary of one case: root cause first, and the pack cites one of its entries."""
    from tpu_devops.logs.evidence import is_root_cause, summarize_mining
    from tpu_devops.logs.mining import mine
    from tpu_devops.logs.sources import FileSource

    source = FileSource(str(DATA / case["export"]))
    summary = summarize_mining(mine(source.pages()), source=case["export"])
    top = summary.ranked[0].stats if summary.ranked else None
    if not case.get("root_cause_regex"):
        no_error = top is None or not is_root_cause(summary.ranked[0])
        return {
            "case": case["id"],
            "root_cause_first": no_error,
            "cited": no_error,
            "tokens": summary.pack.tokens,
        }
    first_ok = top is not None and re.search(case["root_cause_regex"], top.template) is not None
    cited = any(i in summary.pack.text for i in case["root_cause_insert_ids"])
    return {
        "case": case["id"],
        "root_cause_first": first_ok,
        "cited": cited,
        "tokens": summary.pack.tokens,
        "top": top.template[:80] if top else None,
    }


async def model_score(case: dict[str, Any], url: str) -> dict[str, Any]:
    """Run the analyst on one case against ``url`` and score the model's own words (0-2)."""
    from tpu_devops.config import load_settings
    from tpu_devops.logs.analyst import analyze, read_into_index, verify_citations
    from tpu_devops.logs.sources import FileSource
    from tpu_devops.serving.client import close_all

    settings = load_settings(environ={"VLLM_URL": url, "TPU_DEVOPS_ENV_FILE": "/nonexistent"})
    try:
        result = await analyze(case["question"], FileSource(str(DATA / case["export"])), settings=settings)
    finally:
        await close_all()  # the shared HTTP client belongs to this event loop
    # Drop the deterministic summary the analyst appends to an uncited answer: score the model only.
    own = result.answer.split("\n\nDeterministic summary:")[0] if result.model_consulted else ""
    index, _ = read_into_index(FileSource(str(DATA / case["export"])))
    _, own_cites = verify_citations(own, index)
    verified = {c.ref for c in own_cites if c.verified}
    root_ids = set(case["root_cause_insert_ids"])
    root_templates = {result.root_cause.template_id} if result.root_cause else set()
    if case.get("root_cause_regex"):
        cites_root = bool(verified & (root_ids | root_templates))
    else:
        cites_root = bool(own)
    keywords = case.get("keywords") or []
    keyword = bool(own) and (not keywords or any(k.lower() in own.lower() for k in keywords))
    score = 0 if result.unverified_citations else int(cites_root) + int(keyword)
    return {
        "case": case["id"],
        "consulted": result.model_consulted,
        "score": score,
        "cites_root": cites_root,
        "keyword": keyword,
        "unverified": result.unverified_citations,
        "answer": result.answer[:300],
    }


def main() -> int:
    """CLI entry point; prints one line per case and the total score."""
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
        print(f"deterministic score: {ok}/{len(rows)}")
        return 0 if ok == len(rows) else 1
    rows = [asyncio.run(model_score(c, args.url)) for c in cases]
    for r in rows:
        print(json.dumps(r))
    total = sum(r["score"] for r in rows)
    consulted = sum(r["consulted"] for r in rows)
    print(f"model score: {total}/{2 * len(rows)} ({consulted}/{len(rows)} answers from the model)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
