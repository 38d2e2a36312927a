"""The REST API's answers (``/api/v1``), as pydantic models: the OpenAPI schema.

Values that come from messages or state (event payloads, state values) are any JSON;
message bytes (dead letters) are ``{"text": UTF-8 or null, "base64": exact bytes}``.

A model whose bare name is a class elsewhere in the package takes ``Out`` (``AssetOut``
is how the API shows an :class:`~sharedstream.triggers.Asset`), so a name read in the
code means one class (tests/unit/test_class_names.py). Their old bare names still load, with a
``DeprecationWarning``, until the next release.
"""

from __future__ import annotations

import warnings
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field, PlainSerializer

from sharedstream.statestore.durations import stamp

T = TypeVar("T")

# Every time the API answers, as the pages and the commands print it (ISO 8601, UTC, to
# the second, ``Z``).
Stamp = Annotated[datetime, PlainSerializer(stamp, return_type=str, when_used="json")]

TriggererHealth = Literal["ok", "not_ready", "unreachable", "no_status", "stale"]
GroupHealth = Literal["ok", "held", "unowned", "not_polling", "no_triggerer"]


class Page(BaseModel, Generic[T]):
    """One page of a list: ``items[offset:offset+limit]`` of ``total``."""

    items: list[T]
    total: int
    limit: int
    offset: int


class Problem(BaseModel):
    detail: str


class TriggererOut(BaseModel):
    id: str
    host: str
    pid: int
    version: str
    modules: list[str] = Field(description="The watcher modules it runs.")
    groups: list[str] = Field(description="Its consumer groups.")
    status_url: str | None
    started_at: Stamp
    last_seen: Stamp
    seen_ago_s: float
    alive: bool = Field(description="Seen within the last 30 s (else the process is gone).")
    ready: bool | None
    not_ready: list[str]
    status_error: str | None
    health: TriggererHealth


class MemberCounts(BaseModel):
    """A group's member in one triggerer: its watchers and counters (``/status``)."""

    cohort: list[str]
    present: list[str]
    polling: bool
    paused: bool
    in_flight: int
    queued: int
    received: int
    redelivered: int
    unrouted: int = Field(0, description="Messages no watcher's match took (a routed group).")
    matches: dict[str, Any] = Field(
        default_factory=dict, description="What each watcher with a match wants.")


class StatusProcess(BaseModel):
    id: str
    host: str | None = None
    pid: int | None = None
    version: str | None = None


class StatusPartition(BaseModel):
    """An assigned partition as its owner's ledger sees it (``core/snapshot.py``), with
    the committed offset, the log end and the lag (end minus floor)."""

    topic: str
    partition: int
    base: int | None
    floor: int | None
    position: int | None
    remembered: int
    held: int
    open_bytes: int
    fetch: str
    committed: int | None
    end: int | None
    lag: int | None
    paused: bool


class StatusHeld(BaseModel):
    topic: str
    partition: int
    offset: int
    reasons: dict[str, str]
    attempts: dict[str, int]
    rounds: int
    retry_in: float | None


class StatusGroup(MemberCounts):
    consumer_group: str
    partitions: list[StatusPartition] = []
    held: list[StatusHeld] = []


class StatusDestination(BaseModel):
    id: str
    kind: str
    holder: bool
    cursor: int | None
    lag_events: int | None
    lag_seconds: float | None
    delivered: int
    undeliverable: int
    failing: bool
    last_error: str | None
    failures: dict[str, int] = {}


class StatusDocument(BaseModel):
    """A triggerer's ``GET /status`` (``triggerer/status.py``): the fields the console
    keeps. Anything else in the answer is dropped; an answer that does not fit is that
    triggerer's ``status_error``."""

    version: str
    process: StatusProcess | None
    ready: bool
    not_ready: list[str] = []
    groups: list[StatusGroup] = []
    destinations: list[StatusDestination] = []


class TriggererDetail(TriggererOut):
    status: StatusDocument | None = Field(description="Its GET /status document: the "
                                                      "fields the console knows.")


class GroupSummary(BaseModel):
    consumer_group: str
    topics: list[str]
    connection: str | None = Field(description="The connection id (never its settings).")
    watchers: list[str]
    recorded_at: Stamp | None
    triggerers: list[str] = Field(description="Ids of the live triggerers in the group.")
    partition_count: int = Field(description="Partitions of its topics (the broker's, "
                                             "or those assigned when it does not answer).")
    assigned: int = Field(description="Partitions the live triggerers report assigned.")
    unowned: list[str] = Field(description="`topic[partition]` of each partition that no "
                                           "live member answering its /status reports "
                                           "assigned (a killed member still holds it at "
                                           "the broker until its session times out).")
    lag: int | None = Field(description="Sum of the partitions' lag: end - floor where a "
                                        "live triggerer reports it, else the broker's "
                                        "committed lag.")
    lag_source: Literal["triggerer", "kafka", "mixed"] | None
    held: int
    polling: bool
    health: GroupHealth


class Member(MemberCounts):
    triggerer: str


class PartitionState(BaseModel):
    topic: str
    partition: int
    owner: str | None = Field(description="The triggerer the partition is assigned to.")
    lag: int | None = Field(description="End minus the owner's floor (what is left to "
                                        "resolve); without an owner, the committed lag.")
    lag_source: Literal["triggerer", "kafka"] | None
    committed: int | None
    remembered: int | None = Field(description="Offsets above the commit already handled "
                                               "(commit metadata).")
    log_start: int | None
    log_end: int | None
    committed_lag: int | None = Field(description="`sharedstream offsets show`'s lag.")
    base: int | None
    floor: int | None
    position: int | None
    held: int | None
    open_bytes: int | None
    fetch: str | None
    paused: bool | None
    unowned: bool = Field(description="No live member consumes it (see GroupSummary).")


class HeldMessageOut(BaseModel):
    consumer_group: str
    triggerer: str
    topic: str
    partition: int
    offset: int
    watchers: list[str]
    reasons: dict[str, str] = Field(description="Why each watcher failed it this round.")
    attempts: dict[str, int]
    rounds: int
    retry_in: float | None


class KafkaGroup(BaseModel):
    state: str | None
    live_members: int | None
    error: str | None


class GroupDetail(GroupSummary):
    members: list[Member]
    partitions: list[PartitionState]
    held_messages: list[HeldMessageOut]
    kafka: KafkaGroup


class LagSeries(BaseModel):
    topic: str
    partition: int
    samples: list[tuple[float, int]] = Field(description="[unix time, lag], oldest first.")


class GroupLag(BaseModel):
    consumer_group: str
    window_s: float
    now: float
    series: list[LagSeries]


class Watcher(BaseModel):
    name: str
    consumer_group: str
    topics: list[str]
    present: bool = Field(description="Subscribed in a live triggerer.")
    held: int
    rejected: int = Field(description="Its distinct dead letters on the console's "
                                      "dead-letter topics, plus its rows in rejected_message.")
    rejected_error: str | None = Field(None, description="Why a dead-letter topic could not "
                                                         "be read (its last counts stand).")
    match: dict[str, Any] | None = Field(
        None, description="What the watcher wants, as its trigger's match says (a live "
                          "triggerer's /status); null: every message of its topics.")


class StateEntryOut(BaseModel):
    key: str
    value: Any
    size: int
    updated_at: Stamp
    expires_at: Stamp | None
    writer_kind: str | None
    writer_id: str | None
    payload_ref: str | None


class AssetOut(BaseModel):
    id: int
    name: str
    uri: str | None
    active: bool
    deactivated_at: Stamp | None
    created_at: Stamp
    updated_at: Stamp
    last_event_id: int | None
    last_event_at: Stamp | None


class AssetDetail(AssetOut):
    state: list[StateEntryOut]


class EventOut(BaseModel):
    id: int
    asset: str
    asset_uri: str | None
    watcher: str
    topic: str
    topic_id: str
    partition: int
    offset: int
    event_index: int
    created_at: Stamp
    payload: Any


class EventPage(BaseModel):
    items: list[EventOut]
    limit: int
    total: int = Field(description="How many events match the filters (every page), "
                                   "counted up to 100,000.")
    total_exact: bool = Field(description="False when more than `total` match (the count "
                                          "stopped there).")
    next_before: int | None = Field(description="Pass as `before` for the next (older) page.")


class TaskScopeOut(BaseModel):
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    keys: int
    updated_at: Stamp | None


class Rejected(BaseModel):
    id: int
    watcher: str
    topic: str
    topic_id: str
    partition: int
    offset: int
    reason: str
    value_preview: str | None
    created_at: Stamp


class Count(BaseModel):
    name: str
    count: int


class WatcherReasonCount(BaseModel):
    watcher: str
    reason: str
    count: int


class RejectedStats(BaseModel):
    total: int
    by_watcher: list[Count]
    by_reason: list[Count]
    by_watcher_reason: list[WatcherReasonCount]


class Binary(BaseModel):
    text: str | None
    base64: str


class DlqPlace(BaseModel):
    partition: int
    offset: int


class Original(BaseModel):
    topic: str
    topic_id: str
    partition: int
    offset: int
    timestamp: int


class DeadLetterOut(BaseModel):
    copies: int
    dlq: list[DlqPlace]
    foreign: bool
    problem: str | None
    identity: str | None
    original: Original | None
    consumer_group: str | None
    rejections: dict[str, str]
    replay_count: int
    timestamp: int
    key: Binary | None
    value: Binary | None
    headers: list[tuple[str, Binary | None]]


class DeadLetterStats(BaseModel):
    """As ``dlq inspect --stats`` (distinct dead letters, each once per reason it carries;
    foreign ones as ``<foreign>``), and the count of each (watcher, reason) pair: of the
    whole topic, or of the records read when ``since`` is given."""

    reasons: dict[str, int]
    watchers: dict[str, int]
    by_watcher_reason: list[WatcherReasonCount]
    records: int = Field(description="Records counted (copies included).")
    distinct: int = Field(description="Distinct dead letters counted.")
    whole_topic: bool = Field(description="Counted over the whole topic (no since).")


class DeadLetterPage(Page[DeadLetterOut]):
    topic: str
    read: int = Field(description="Records read from the topic.")
    distinct: int = Field(description="Distinct dead letters (copies of one identity: one).")
    foreign: int
    truncated: bool = Field(description="Older records were left out (the newest are read).")
    error: str | None
    stats: DeadLetterStats


class Destination(BaseModel):
    id: str
    kind: str | None
    configured: bool
    cursor: int | None
    delivered: int | None
    updated_at: Stamp | None
    holder: str | None
    lease_until: Stamp | None
    newest_event: int | None
    lag_events: int | None
    lag_seconds: float | None
    failing: bool
    last_error: str | None
    undeliverable: int
    reported_by: str | None
    health: Literal["ok", "failing", "idle"]


class UndeliveredOut(BaseModel):
    destination: str
    event: EventOut
    reason: str
    attempts: int
    created_at: Stamp


class Counts(BaseModel):
    alive: int
    stale: int
    groups: int
    held: int
    failing_destinations: int


class Overview(BaseModel):
    database_error: str | None
    triggerers: list[TriggererOut]
    groups: list[GroupSummary]
    destinations: list[Destination]
    counts: Counts


_RENAMED = {old: f"{old}Out" for old in ("Asset", "DeadLetter", "Event", "HeldMessage",
                                         "StateEntry", "TaskScope", "Triggerer",
                                         "Undelivered")}


def __getattr__(name: str) -> Any:
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"sharedstream.web.schemas.{name} is deprecated: use {new} (the same "
                  "model)", DeprecationWarning, stacklevel=2)
    return globals()[new]
