"""Typed mirrors of the schemas in memoryd's ``openapi.yaml``.

One model (or type alias) per schema of ``components/schemas``, with the
schema's properties as fields; ``tests/test_models.py`` fails when the two
drift apart. Models accept fields they do not know yet (``extra="allow"``),
so an older client keeps working against a newer memoryd.
"""

from __future__ import annotations

from datetime import date as date_type
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

FileSafeId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
SessionState = Literal["open", "closing", "closed"]
JobKind = Literal["phase_one", "phase_two", "restore", "forget", "import", "edit"]
JobState = Literal["queued", "running", "succeeded", "skipped", "failed", "cancelled"]
TerminalState = Literal["completed", "interrupted", "cancelled", "failed", "max_turns_exceeded", "guardrail_tripped"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Problem(_Model):
    type: str
    title: str
    status: int
    detail: str
    code: str
    index: int | None = None


class NewTenant(_Model):
    name: str


Permission = Literal["ingest", "close", "read", "edit", "manage"]
#: ``"*"`` (every workspace) or the workspaces' names.
KeyWorkspaces = Literal["*"] | list[str]


class KeyRequest(_Model):
    """What a key may reach (``POST /v1/keys``): within what the maker holds."""

    name: str | None = None
    workspaces: KeyWorkspaces
    permissions: list[Permission]
    expires_at: datetime | None = None


class AdminKeyRequest(_Model):
    """As :class:`KeyRequest` for the admin; left out: every workspace and permission."""

    name: str | None = None
    workspaces: KeyWorkspaces | None = None
    permissions: list[Permission] | None = None
    expires_at: datetime | None = None


class Key(_Model):
    """A live key as listed: never its secret."""

    key_id: str
    name: str | None
    workspaces: KeyWorkspaces
    permissions: list[Permission]
    expires_at: datetime | None
    created_at: datetime
    #: The key that made it (``None``: a tenant's first key, or the admin's);
    #: revoking that key revokes this one too.
    created_by: str | None


class KeyList(_Model):
    keys: list[Key]
    next_cursor: str | None


class IssuedKey(Key):
    """A key just made: as listed, with its secret (shown once) and, from the admin's route, its tenant."""

    api_key: str
    tenant_id: str | None = None


class NewTenantKey(_Model):
    """A tenant just made, with its first key (shown once)."""

    tenant_id: str
    name: str
    key_id: str
    api_key: str


class GenerateConfig(_Model):
    """``LayoutConfig.generate``: the layout makes memory (phase one and two)."""

    max_raw_memories_for_consolidation: int = 256
    phase_one_model: str = "gpt-5.4-mini"
    phase_two_model: str = "gpt-5.5"
    phase_one_reasoning_effort: str | None = "medium"
    phase_two_reasoning_effort: str | None = "medium"
    phase_two_max_turns: int = 500
    extra_prompt: str | None = None
    selection: Literal["recent", "usage"] = "recent"
    max_unused_days: int | None = None


class ReadConfig(_Model):
    """``LayoutConfig.read``: runs read the layout's memory."""

    live_update: bool = True
    citations: bool = False


class RetentionConfig(_Model):
    """``LayoutConfig.retention``: how long the layout keeps conversations."""

    rollout_days: float | None = None


class LimitsBody(_Model):
    """What ``set_limits`` sends: a field left out takes the server's default, 0 is unlimited."""

    requests_per_second: float | None = None
    burst: int | None = None
    storage_bytes: int | None = None
    model_tokens_per_day: int | None = None
    open_sessions: int | None = None


class Limits(_Model):
    """A tenant's limits in force; ``None`` is unlimited (every field is answered)."""

    requests_per_second: float | None
    burst: int | None
    storage_bytes: int | None
    model_tokens_per_day: int | None
    open_sessions: int | None


class ModelUse(_Model):
    model_calls: int
    input_tokens: int
    output_tokens: int


class UsageDay(_Model):
    """A tenant's counters of one UTC day."""

    date: date_type
    segments: int
    bytes_ingested: int
    closes: int
    model_calls: int
    input_tokens: int
    output_tokens: int
    runs: int
    embedding_tokens: int
    by_kind: dict[str, ModelUse]


class Usage(_Model):
    """What a tenant used: the bytes it keeps now, and its days, oldest first."""

    storage_bytes: int
    days: list[UsageDay]


class RedactionPattern(_Model):
    name: str
    regex: str


class RedactionConfig(_Model):
    """``LayoutConfig.redaction``: secrets kept from the model and the memory."""

    rules: str | list[str] = "default"
    patterns: list[RedactionPattern] = []
    at_ingest: bool = False


Redactions = dict[str, int]


class LayoutConfig(_Model):
    memories_dir: str
    sessions_dir: str
    generate: GenerateConfig | None = Field(default_factory=GenerateConfig)
    read: ReadConfig | None = Field(default_factory=ReadConfig)
    retention: RetentionConfig | None = None
    redaction: RedactionConfig | None = None


class Layout(LayoutConfig):
    name: str
    etag: str


class LayoutList(_Model):
    layouts: list[Layout]


class TerminalMetadata(_Model):
    terminal_state: TerminalState
    exception_type: str | None = None
    exception_message: str | None = None
    has_final_output: bool = False


class Segment(_Model):
    """One agent run, as the SDK's ``build_rollout_payload`` makes it."""

    rollout_id: str | None = None
    updated_at: str | None = None
    input: str | list[dict[str, Any]] | None = None
    generated_items: list[dict[str, Any]] | None = None
    interruptions: list[dict[str, Any]] | None = None
    terminal_metadata: TerminalMetadata | None = None
    final_output: Any = None


class AppendedSegment(_Model):
    session_id: str
    layout: str
    rollout_id: str
    segment_index: int
    rollout_path: str


class BatchSegment(Segment):
    """A segment of a batch append, naming the layout it goes to."""

    layout: str


class SegmentBatch(_Model):
    segments: list[BatchSegment]


class AppendedBatch(_Model):
    """Each segment's receipt, in the batch's order."""

    session_id: str
    receipts: list[AppendedSegment]


class NewSession(_Model):
    session_id: FileSafeId | None = None
    workspace: FileSafeId | None = None
    metadata: dict[str, Any] | None = None


class SessionRollout(_Model):
    layout: str
    rollout_id: str
    segment_count: int


class ForgetSpec(_Model):
    """``Job.forget``: what a forget job removes, and how."""

    scope: Literal["rollouts", "workspace", "tenant"]
    mode: Literal["scrub", "rebuild"]
    rollout_ids: list[str] = []


class Job(_Model):
    job_id: str
    kind: JobKind
    state: JobState
    session_id: str | None
    workspace: str
    layout: str
    rollout_id: str | None = None
    attempts: int
    run_after: datetime
    last_error: str | None
    usage: dict[str, Any] | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    sessions: list[str] = []
    restore_run_id: str | None = None
    eager: bool = False
    forget: ForgetSpec | None = None
    redactions: dict[str, int]


class JobList(_Model):
    jobs: list[Job]
    next_cursor: str | None


class SessionSummary(_Model):
    session_id: str
    workspace: str
    state: SessionState
    created_at: datetime
    closed_at: datetime | None
    segments: int
    rollouts: int
    memory_status: dict[str, Any] | None


class SessionPage(_Model):
    sessions: list[SessionSummary]
    next_cursor: str | None


class WorkspaceSummary(_Model):
    name: str
    layouts: list[str]
    sessions: int
    updated_at: datetime | None


class WorkspaceList(_Model):
    workspaces: list[WorkspaceSummary]


class MemoryFile(_Model):
    path: str
    bytes: int
    modified_at: datetime


class FileList(_Model):
    files: list[MemoryFile]


class TenantSummary(_Model):
    tenant_id: str
    name: str
    created_at: datetime
    keys: int
    sessions: int
    state: Literal["active", "deleting"]


class TenantList(_Model):
    tenants: list[TenantSummary]
    next_cursor: str | None


class Session(_Model):
    session_id: str
    workspace: str
    state: SessionState
    metadata: dict[str, Any]
    memory_status: dict[str, Any] | None
    created_at: datetime
    closed_at: datetime | None
    waiting: str | None = None
    """``"model_budget"`` while a closing session's jobs wait for its tenant's token budget."""
    rollouts: list[SessionRollout]
    jobs: list[Job]


class QueuedJob(_Model):
    job_id: str
    kind: JobKind
    layout: str
    rollout_id: str | None = None
    state: JobState


class CloseResult(_Model):
    session_id: str
    state: SessionState
    memory_status: dict[str, Any] | None
    jobs: list[QueuedJob]


class SelectionItem(_Model):
    rollout_id: str
    updated_at: str
    rollout_path: str
    rollout_summary_file: str
    terminal_state: str
    usage_count: int
    last_usage: str | None


class PhaseTwoSelection(_Model):
    version: int
    updated_at: str
    run_id: str
    selected: list[SelectionItem]
    added_rollout_ids: list[str]
    retained_rollout_ids: list[str]
    removed: list[SelectionItem]


class PhaseTwoRun(_Model):
    run_id: str
    kind: Literal["phase_two", "restore", "forget", "edit"]
    job_id: str
    session_id: str
    state: Literal["succeeded", "skipped", "failed"]
    selected: int
    added: int
    retained: int
    removed: int
    files_changed: list[str]
    sessions: list[str]
    restored_from: str | None = None
    rollout_id: str | None = None
    reason: str | None = None
    redactions: dict[str, int]
    usage: dict[str, Any]
    turns: int
    error: str | None
    started_at: datetime
    finished_at: datetime


class FileChange(_Model):
    path: str
    change: Literal["added", "modified", "deleted"]
    diff: str | None
    before_bytes: int | None
    after_bytes: int | None


class RunDetail(PhaseTwoRun):
    history_kept: bool
    changes: list[FileChange] | None


class RunList(_Model):
    runs: list[PhaseTwoRun]
    next_cursor: str | None


class Instructions(_Model):
    instructions: str
    memory_dir: str
    truncated: bool


EventType = Literal[
    "session.closed", "run.succeeded", "run.failed", "job.failed", "forget.completed", "memory.edited", "webhook.test"
]


class MemoryEntry(_Model):
    """A file or folder of a layout's memory folder (path relative to it)."""

    path: str
    kind: Literal["file", "dir"]
    bytes: int | None
    modified_at: datetime | None


class MemoryListing(_Model):
    entries: list[MemoryEntry]
    next_cursor: str | None


class MemoryRead(_Model):
    """Lines of a memory file; ``sha256`` is the whole file's (an edit's ``expect``)."""

    path: str
    text: str
    offset: int
    lines: int
    total_lines: int
    truncated: bool
    sha256: str
    #: Where in line ``offset`` the text starts (0: at its start).
    byte_offset: int = 0


class MemoryMatch(_Model):
    path: str
    line: int
    text: str
    before: list[str]
    after: list[str]


class MemorySearch(_Model):
    matches: list[MemoryMatch]
    next_cursor: str | None


class MemoryPassage(_Model):
    """A section of a memory file, as ``search(mode="ranked")`` ranks it."""

    path: str
    line: int
    end_line: int
    heading: str
    score: float
    text: str


class MemoryPassages(_Model):
    mode: Literal["ranked", "semantic", "hybrid"]
    matches: list[MemoryPassage]
    next_cursor: str | None
    not_embedded: int | None = None


class MemoryCommand(_Model):
    """One command of Anthropic's memory tool, as an edit takes it."""

    command: Literal["create", "str_replace", "insert", "delete", "rename"]
    path: str | None = None
    file_text: str | None = None
    old_str: str | None = None
    new_str: str | None = None
    insert_line: int | None = None
    insert_text: str | None = None
    old_path: str | None = None
    new_path: str | None = None


class MemoryEdit(_Model):
    """An edit: ``patch`` (V4A) or ``operations``, with optional preconditions."""

    patch: str | None = None
    operations: list[MemoryCommand] | None = None
    expect: dict[str, str | None] | None = None
    session_id: str | None = None
    rollout_id: str | None = None
    reason: str | None = None


class EditedFile(_Model):
    path: str
    change: Literal["added", "modified", "deleted"]


class PublishedEdit(_Model):
    """An edit that was published: its job, its run and what it changed."""

    job_id: str
    run_id: str
    changes: list[EditedFile]


class WebhookBody(_Model):
    url: str
    events: list[str] | None = None
    description: str | None = None


class WebhookPatch(_Model):
    """What ``update_webhook`` may change; what is left out stays."""

    url: str | None = None
    events: list[str] | None = None
    description: str | None = None
    state: str | None = None


class Webhook(_Model):
    webhook_id: str
    url: str
    events: list[str]
    description: str | None
    state: Literal["enabled", "disabled"]
    disabled_reason: str | None
    previous_secret_until: datetime | None
    created_at: datetime
    updated_at: datetime


class WebhookWithSecret(Webhook):
    secret: str


class Delivery(_Model):
    event_id: str
    event_type: str
    state: Literal["pending", "succeeded", "failed", "dropped"]
    attempts: int
    last_status: int | None
    last_error: str | None
    last_response: str | None
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    created_at: datetime


class WebhookList(_Model):
    webhooks: list[Webhook]


class DeliveryList(_Model):
    deliveries: list[Delivery]


class Health(_Model):
    """``/healthz`` (``ok``) and ``/readyz`` (``ready``)."""

    status: str


class SessionClosedData(_Model):
    session_id: str
    workspace: str
    memory_status: dict[str, Any]


class RunFinishedData(_Model):
    run_id: str
    workspace: str
    layout: str
    kind: str
    selected: int
    added: int
    retained: int
    removed: int
    error: str | None


class JobFailedData(_Model):
    job_id: str
    kind: str
    workspace: str
    layout: str
    error: str


class ForgetCompletedData(_Model):
    job_id: str
    workspace: str
    forget: dict[str, Any]


class MemoryEditedData(_Model):
    run_id: str
    workspace: str
    layout: str
    paths: list[str]


class WebhookTestData(_Model):
    webhook_id: str
    message: str


class Event(_Model):
    """What a webhook receives and a stream's ``data:`` carries; ``data`` is
    one of the ``…Data`` models' fields, as a dict."""

    type: str
    timestamp: datetime
    data: dict[str, Any]


class StreamedEvent(Event):
    """An event of :meth:`memoryd.Memoryd.events`, with its id (pass it as
    ``last_event_id`` to resume after it)."""

    id: str
