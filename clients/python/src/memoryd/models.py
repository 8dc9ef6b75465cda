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
    name: str | None = None
    workspaces: KeyWorkspaces
    permissions: list[Permission]
    expires_at: datetime | None = None
    created_at: datetime


class KeyList(_Model):
    keys: list[Key]


class IssuedKey(_Model):
    """A key just made, with its secret (shown once)."""

    tenant_id: str | None = None
    name: str | None = None
    key_id: str
    api_key: str
    workspaces: KeyWorkspaces | None = None
    permissions: list[Permission] | None = None
    expires_at: datetime | None = None
    created_at: datetime | None = None


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
    """A tenant's limits in force; ``None`` is unlimited."""

    requests_per_second: float | None = None
    burst: int | None = None
    storage_bytes: int | None = None
    model_tokens_per_day: int | None = None
    open_sessions: int | None = None


class ModelUse(_Model):
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


class UsageDay(_Model):
    """A tenant's counters of one UTC day."""

    date: date_type
    segments: int = 0
    bytes_ingested: int = 0
    closes: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    runs: int = 0
    by_kind: dict[str, ModelUse] = {}


class Usage(_Model):
    """What a tenant used: the bytes it keeps now, and its days, oldest first."""

    storage_bytes: int
    days: list[UsageDay] = []


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
    name: str | None = None
    etag: str | None = None


class LayoutList(_Model):
    layouts: list[Layout] = []


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
    session_id: str | None = None
    layout: str | None = None
    rollout_id: str | None = None
    segment_index: int | None = None
    rollout_path: str | None = None


class NewSession(_Model):
    session_id: FileSafeId | None = None
    workspace: FileSafeId | None = None
    metadata: dict[str, Any] | None = None


class SessionRollout(_Model):
    layout: str | None = None
    rollout_id: str | None = None
    segment_count: int | None = None


class ForgetSpec(_Model):
    """``Job.forget``: what a forget job removes, and how."""

    scope: Literal["rollouts", "workspace", "tenant"] | None = None
    mode: Literal["scrub", "rebuild"] | None = None
    rollout_ids: list[str] = []


class Job(_Model):
    job_id: str | None = None
    kind: JobKind | None = None
    state: JobState | None = None
    session_id: str | None = None
    workspace: str | None = None
    layout: str | None = None
    rollout_id: str | None = None
    attempts: int | None = None
    run_after: datetime | None = None
    last_error: str | None = None
    usage: dict[str, Any] | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    sessions: list[str] = []
    restore_run_id: str | None = None
    eager: bool = False
    forget: ForgetSpec | None = None
    redactions: dict[str, int] = {}


class JobList(_Model):
    jobs: list[Job] = []
    next_cursor: str | None = None


class SessionSummary(_Model):
    session_id: str | None = None
    workspace: str | None = None
    state: SessionState | None = None
    created_at: datetime | None = None
    closed_at: datetime | None = None
    segments: int | None = None
    rollouts: int | None = None
    memory_status: dict[str, Any] | None = None


class SessionPage(_Model):
    sessions: list[SessionSummary] = []
    next_cursor: str | None = None


class WorkspaceSummary(_Model):
    name: str | None = None
    layouts: list[str] = []
    sessions: int | None = None
    updated_at: datetime | None = None


class WorkspaceList(_Model):
    workspaces: list[WorkspaceSummary] = []


class MemoryFile(_Model):
    path: str | None = None
    bytes: int | None = None
    modified_at: datetime | None = None


class FileList(_Model):
    files: list[MemoryFile] = []


class TenantSummary(_Model):
    tenant_id: str | None = None
    name: str | None = None
    created_at: datetime | None = None
    keys: int | None = None
    sessions: int | None = None
    state: Literal["active", "deleting"] | None = None


class TenantList(_Model):
    tenants: list[TenantSummary] = []
    next_cursor: str | None = None


class Session(_Model):
    session_id: str | None = None
    workspace: str | None = None
    state: SessionState | None = None
    metadata: dict[str, Any] | None = None
    memory_status: dict[str, Any] | None = None
    created_at: datetime | None = None
    closed_at: datetime | None = None
    waiting: str | None = None
    """``"model_budget"`` while a closing session's jobs wait for its tenant's token budget."""
    rollouts: list[SessionRollout] = []
    jobs: list[Job] = []


class QueuedJob(_Model):
    job_id: str | None = None
    kind: JobKind | None = None
    layout: str | None = None
    rollout_id: str | None = None
    state: JobState | None = None


class CloseResult(_Model):
    session_id: str | None = None
    state: SessionState | None = None
    memory_status: dict[str, Any] | None = None
    jobs: list[QueuedJob] = []


class SelectionItem(_Model):
    rollout_id: str | None = None
    updated_at: str | None = None
    rollout_path: str | None = None
    rollout_summary_file: str | None = None
    terminal_state: str | None = None
    usage_count: int = 0
    last_usage: str | None = None


class PhaseTwoSelection(_Model):
    version: int | None = None
    updated_at: str | None = None
    run_id: str | None = None
    selected: list[SelectionItem] = []
    added_rollout_ids: list[str] = []
    retained_rollout_ids: list[str] = []
    removed: list[SelectionItem] = []


class PhaseTwoRun(_Model):
    run_id: str | None = None
    kind: Literal["phase_two", "restore", "forget", "edit"] | None = None
    job_id: str | None = None
    session_id: str | None = None
    state: Literal["succeeded", "skipped", "failed"] | None = None
    selected: int | None = None
    added: int | None = None
    retained: int | None = None
    removed: int | None = None
    files_changed: list[str] = []
    sessions: list[str] = []
    restored_from: str | None = None
    rollout_id: str | None = None
    reason: str | None = None
    redactions: dict[str, int] = {}
    usage: dict[str, Any] | None = None
    turns: int | None = None
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


class FileChange(_Model):
    path: str | None = None
    change: Literal["added", "modified", "deleted"] | None = None
    diff: str | None = None
    before_bytes: int | None = None
    after_bytes: int | None = None


class RunDetail(PhaseTwoRun):
    history_kept: bool = False
    changes: list[FileChange] | None = None


class RunList(_Model):
    runs: list[PhaseTwoRun] = []
    next_cursor: str | None = None


class Instructions(_Model):
    instructions: str
    memory_dir: str | None = None
    truncated: bool = False


EventType = Literal[
    "session.closed", "run.succeeded", "run.failed", "job.failed", "forget.completed", "memory.edited", "webhook.test"
]


class MemoryEntry(_Model):
    """A file or folder of a layout's memory folder (path relative to it)."""

    path: str
    kind: Literal["file", "dir"]
    bytes: int | None = None
    modified_at: datetime | None = None


class MemoryListing(_Model):
    entries: list[MemoryEntry] = []
    next_cursor: str | None = None


class MemoryRead(_Model):
    """Lines of a memory file; ``sha256`` is the whole file's (an edit's ``expect``)."""

    path: str
    text: str
    offset: int
    lines: int
    total_lines: int
    truncated: bool = False
    sha256: str


class MemoryMatch(_Model):
    path: str
    line: int
    text: str
    before: list[str] = []
    after: list[str] = []


class MemorySearch(_Model):
    matches: list[MemoryMatch] = []
    next_cursor: str | None = None


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
    changes: list[EditedFile] = []


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
    description: str | None = None
    state: Literal["enabled", "disabled"]
    disabled_reason: str | None = None
    previous_secret_until: datetime | None = None
    created_at: datetime
    updated_at: datetime


class WebhookWithSecret(Webhook):
    secret: str


class Delivery(_Model):
    event_id: str
    event_type: str
    state: Literal["pending", "succeeded", "failed", "dropped"]
    attempts: int
    last_status: int | None = None
    last_error: str | None = None
    last_response: str | None = None
    last_attempt_at: datetime | None = None
    next_attempt_at: datetime | None = None
    created_at: datetime


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
    error: str | None = None


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
