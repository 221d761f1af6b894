"""Template mining with drain3: group log lines into templates and keep per-template statistics.

Each record's body (the message without vLLM's ``LEVEL MM-DD HH:MM:SS [file:line]`` prefix) is masked
with drain3's `LogMasker` (timestamps, IPs, UUIDs, hex, long ids, sizes, numbers) and clustered by
drain3's Drain tree (He et al., "Drain: An Online Log Parsing Approach with Fixed Depth Tree", ICWS
2017; defaults sim_th 0.4, depth 4). Per template we keep: count, highest severity and severity counts,
first/last seen, the rate over the analysed window, and two exemplars (the first and the latest
occurrence) with their ``insertId``. Raw entries are not kept: a consumer feeds pages and drops them.

Speed: masked bodies repeat a lot (the same line with other numbers), so a bounded dict maps a masked
body to its cluster and skips the tree search on a hit. This is exact for Drain without a cluster
limit: re-adding a token sequence that a cluster already absorbed leaves that cluster's template
unchanged. `scripts/bench_logs.py` measures the throughput.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from tpu_devops.logs.failure_lines import continued
from tpu_devops.logs.filters import SEVERITY_RANK
from tpu_devops.logs.sources import LogRecord, parse_epoch

# (pattern, mask name). Applied in order by drain3's LogMasker; "<NAME>" replaces each match.
MASKS: list[tuple[str, str]] = [
    (
        r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?|\b\d\d-\d\d \d\d:\d\d:\d\d\b",
        "TS",
    ),
    (r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?(?![\w.])", "IP"),
    (r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", "UUID"),
    (r"\b0x[0-9a-fA-F]+\b|(?<![\w<])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", "HEX"),
    (r"\b\d+(?:\.\d+)?(?:[KMGT]i?B?|B|ms|s|%)?(?![\w.>])", "NUM"),
]
_DIGIT = re.compile(r"\d")
CONTEXT_RECORDS = 4  # records kept around an exception header that announces its reason on the next lines
MAX_EXEMPLAR_CHARS = 2000  # long enough for the numbers at the end of an XLA or vLLM error line
CACHE_LIMIT = 200_000


@dataclass(slots=True)
class Exemplar:
    """One concrete entry of a template.

    ``after`` / ``before``: for an exception header whose message continues on the next lines
    (`logs.failure_lines.continued`), the messages of the next / previous `CONTEXT_RECORDS` records of
    the stream (which of them follows in time depends on the stream's order); None otherwise."""

    insert_id: str
    timestamp: str
    severity: str
    message: str
    epoch: float | None = None
    after: list[str] | None = None
    before: list[str] | None = None


@dataclass
class TemplateStats:
    """Statistics of one template (one Drain cluster).

    Attributes:
        id: ``T<n>``, numbered in order of first appearance in the input.
        template: the Drain template (``<*>`` and ``<NUM>``-style masks for variable parts).
        count: entries matched.
        severity: the highest severity seen; ``severities`` counts each.
        first_seen, last_seen: RFC 3339 strings ('' when unknown); ``first_epoch``/``last_epoch`` seconds.
        order: index of the first entry in the input (stream order); ``last_order`` of the latest.
        exemplars: the first and the latest entry (at most two).
    """

    id: str
    cluster_id: int
    count: int = 0
    severity: str = "DEFAULT"
    severities: dict[str, int] = field(default_factory=dict)
    first_seen: str = ""
    last_seen: str = ""
    first_epoch: float | None = None
    last_epoch: float | None = None
    order: int = 0
    last_order: int = 0
    exemplars: list[Exemplar] = field(default_factory=list)
    template: str = ""


class TemplateView(BaseModel):
    """A template as tools show it (see `TemplateStats`); ``rate_per_min`` is over the whole window."""

    id: str
    template: str
    count: int
    severity: str
    first_seen: str
    last_seen: str
    rate_per_min: float | None = None
    exemplars: list[dict[str, str]] = []


@dataclass
class MiningResult:
    """All templates plus totals. ``window_s`` is last minus first timestamp (None when unknown)."""

    templates: list[TemplateStats]
    total: int
    severities: dict[str, int]
    first_seen: str
    last_seen: str
    window_s: float | None
    newest_first: bool = False  # the input listed newer entries first (gcloud logging read's order)

    def rate_per_min(self, t: TemplateStats) -> float | None:
        """Entries per minute of ``t`` over the analysed window (None without timestamps)."""
        if not self.window_s:
            return None
        return round(t.count / (self.window_s / 60.0), 3)

    def view(self, t: TemplateStats) -> TemplateView:
        return TemplateView(
            id=t.id,
            template=t.template,
            count=t.count,
            severity=t.severity,
            first_seen=t.first_seen,
            last_seen=t.last_seen,
            rate_per_min=self.rate_per_min(t),
            exemplars=[
                {"insert_id": e.insert_id, "timestamp": e.timestamp, "message": e.message}
                for e in t.exemplars
            ],
        )


def _new_miner() -> Any:
    from drain3 import TemplateMiner
    from drain3.masking import MaskingInstruction
    from drain3.template_miner_config import TemplateMinerConfig

    config = TemplateMinerConfig()
    # One instruction per pattern, applied in order: measured faster than one combined alternation.
    config.masking_instructions = [MaskingInstruction(p, name) for p, name in MASKS]
    config.profiling_enabled = False
    return TemplateMiner(config=config)


class LogMiner:
    """Streaming miner: call `add` (or `add_page`) for each record, then `result`.

    Also keeps, per record, the template id it was assigned (``template_of``) when ``remember`` is
    True, so the analyst can search by template (bounded by the records the caller keeps).
    """

    def __init__(self) -> None:
        self._miner = _new_miner()
        self._mask = self._miner.masker.mask
        self._drain = self._miner.drain
        self._cache: dict[str, int] = {}
        self._stats: dict[int, TemplateStats] = {}
        self._severities: dict[str, int] = {}
        self._seen = 0
        self._first: tuple[float, str] | None = None
        self._last: tuple[float, str] | None = None
        self._prev_epoch: float | None = None
        self._steps = [0, 0]  # timestamps going down, going up from one entry to the next
        self._recent: deque[str] = deque(maxlen=CONTEXT_RECORDS)  # the last messages, newest last
        self._awaiting: list[Exemplar] = []  # exemplars still collecting the records after them

    def cluster_of(self, body: str) -> int:
        """Drain cluster id for a message body (masking + cache + tree)."""
        body = body.strip()
        # Every mask needs a digit (timestamps, IPs, numbers, hex ids with a digit), so a line without
        # digits is its own masked form.
        masked = self._mask(body) if _DIGIT.search(body) else body
        cid = self._cache.get(masked)
        if cid is None:
            cluster, _ = self._drain.add_log_message(masked)
            cid = cluster.cluster_id
            if len(self._cache) < CACHE_LIMIT:
                self._cache[masked] = cid
        return cid

    def add(self, record: LogRecord) -> str:
        """Account one record; returns its template id (``T<n>``)."""
        if self._awaiting:
            for waiting in self._awaiting:
                assert waiting.after is not None
                waiting.after.append(record.message)
            self._awaiting = [w for w in self._awaiting if len(w.after or ()) < CONTEXT_RECORDS]
        stats_id = self._add(record)
        self._recent.append(record.message)
        return stats_id

    def _add(self, record: LogRecord) -> str:
        cid = self.cluster_of(record.body)
        stats = self._stats.get(cid)
        if stats is None:
            stats = TemplateStats(id=f"T{len(self._stats) + 1}", cluster_id=cid, order=self._seen)
            self._stats[cid] = stats
        stats.last_order = self._seen
        self._seen += 1
        sev = record.severity
        stats.count += 1
        stats.severities[sev] = stats.severities.get(sev, 0) + 1
        self._severities[sev] = self._severities.get(sev, 0) + 1
        if SEVERITY_RANK.get(sev, 0) > SEVERITY_RANK.get(stats.severity, 0):
            stats.severity = sev
        epoch = parse_epoch(record.timestamp) if record.timestamp else None
        if epoch is not None:
            if self._prev_epoch is not None and epoch != self._prev_epoch:
                self._steps[epoch > self._prev_epoch] += 1
            self._prev_epoch = epoch
            if stats.first_epoch is None or epoch < stats.first_epoch:
                stats.first_epoch, stats.first_seen = epoch, record.timestamp
            if stats.last_epoch is None or epoch >= stats.last_epoch:
                stats.last_epoch, stats.last_seen = epoch, record.timestamp
            if self._first is None or epoch < self._first[0]:
                self._first = (epoch, record.timestamp)
            if self._last is None or epoch > self._last[0]:
                self._last = (epoch, record.timestamp)
        ex = stats.exemplars
        if len(ex) < 2 or (epoch is not None and epoch >= (ex[-1].epoch or 0.0)):
            item = Exemplar(
                record.insert_id, record.timestamp, sev, record.message[:MAX_EXEMPLAR_CHARS], epoch
            )
            if "rror" in record.body or ":" in record.body[-2:]:  # cheap filter before the exact test
                if continued(record.body):
                    item.after, item.before = [], list(reversed(self._recent))
                    self._awaiting.append(item)
            if len(ex) < 2:
                ex.append(item)
                if len(ex) == 2 and (ex[0].epoch or 0.0) > (ex[1].epoch or 0.0):
                    ex.reverse()
            else:
                ex[1] = item
        return stats.id

    def add_page(self, records: Iterable[LogRecord]) -> None:
        """`add` every record of a page."""
        for record in records:
            self.add(record)

    def result(self) -> MiningResult:
        """Templates (in order of first appearance) with their final Drain template text."""
        templates = sorted(self._stats.values(), key=lambda s: s.order)
        for stats in templates:
            cluster = self._drain.id_to_cluster.get(stats.cluster_id)
            stats.template = cluster.get_template() if cluster is not None else ""
        first = self._first[1] if self._first else ""
        last = self._last[1] if self._last else ""
        window = (self._last[0] - self._first[0]) if self._first and self._last else None
        return MiningResult(
            templates=templates,
            total=self._seen,
            severities=dict(self._severities),
            first_seen=first,
            last_seen=last,
            window_s=window,
            newest_first=self._steps[0] > self._steps[1],
        )


def mine(pages: Iterable[list[LogRecord]]) -> MiningResult:
    """Mine every page of a source (pages are dropped after use)."""
    miner = LogMiner()
    for page in pages:
        miner.add_page(page)
    return miner.result()
