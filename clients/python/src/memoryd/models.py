"""Typed mirrors of the schemas in memoryd's ``openapi.yaml``.

One model (or type alias) per schema of ``components/schemas``, with the
schema's properties as fields; ``tests/test_models.py`` fails when the two
drift apart. Models accept fields they do not know yet (``extra="allow"``),
so an older client keeps working against a newer memoryd.
"""

from __future__ import annotations

from datetime import date as date_type
from datetime import datetime
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

FileSafeId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
SessionState = Literal["open", "closing", "closed"]
JobKind = Literal["phase_one", "phase_two", "restore", "forget", "import"]
JobState = Literal["queued", "running", "succeeded", "skipped", "failed", "cancelled"]
TerminalState = Literal[
    "completed", "interrupted", "cancelled", "failed", "max_turns_exceeded", "guardrail_tripped"
]


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


class IssuedKey(_Model):
    tenant_id: Optional[str] = None
    name: Optional[str] = None
    key_id: Optional[str] = None
    api_key: Optional[str] = None


class GenerateConfig(_Model):
    """``LayoutConfig.generate``: the layout makes memory (phase one and two)."""

    max_raw_memories_for_consolidation: int = 256
    phase_one_model: str = "gpt-5.4-mini"
    phase_two_model: str = "gpt-5.5"
    phase_one_reasoning_effort: Optional[str] = "medium"
    phase_two_reasoning_effort: Optional[str] = "medium"
    phase_two_max_turns: int = 500
    extra_prompt: Optional[str] = None


class ReadConfig(_Model):
    """``LayoutConfig.read``: runs read the layout's memory."""

    live_update: bool = True


class RetentionConfig(_Model):
    """``LayoutConfig.retention``: how long the layout keeps conversations."""

    rollout_days: Optional[float] = None


class LimitsBody(_Model):
    """What ``set_limits`` sends: a field left out takes the server's default, 0 is unlimited."""

    requests_per_second: Optional[float] = None
    burst: Optional[int] = None
    storage_bytes: Optional[int] = None
    model_tokens_per_day: Optional[int] = None
    open_sessions: Optional[int] = None


class Limits(_Model):
    """A tenant's limits in force; ``None`` is unlimited."""

    requests_per_second: Optional[float] = None
    burst: Optional[int] = None
    storage_bytes: Optional[int] = None
    model_tokens_per_day: Optional[int] = None
    open_sessions: Optional[int] = None


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

    rules: Union[str, list[str]] = "default"
    patterns: list[RedactionPattern] = []
    at_ingest: bool = False


Redactions = dict[str, int]


class LayoutConfig(_Model):
    memories_dir: str
    sessions_dir: str
    generate: Optional[GenerateConfig] = Field(default_factory=GenerateConfig)
    read: Optional[ReadConfig] = Field(default_factory=ReadConfig)
    retention: Optional[RetentionConfig] = None
    redaction: Optional[RedactionConfig] = None


class Layout(LayoutConfig):
    name: Optional[str] = None
    etag: Optional[str] = None


class LayoutList(_Model):
    layouts: list[Layout] = []


class TerminalMetadata(_Model):
    terminal_state: TerminalState
    exception_type: Optional[str] = None
    exception_message: Optional[str] = None
    has_final_output: bool = False


class Segment(_Model):
    """One agent run, as the SDK's ``build_rollout_payload`` makes it."""

    rollout_id: Optional[str] = None
    updated_at: Optional[str] = None
    input: Union[str, list[dict[str, Any]], None] = None
    generated_items: Optional[list[dict[str, Any]]] = None
    interruptions: Optional[list[dict[str, Any]]] = None
    terminal_metadata: Optional[TerminalMetadata] = None
    final_output: Any = None


class AppendedSegment(_Model):
    session_id: Optional[str] = None
    layout: Optional[str] = None
    rollout_id: Optional[str] = None
    segment_index: Optional[int] = None
    rollout_path: Optional[str] = None


class NewSession(_Model):
    session_id: Optional[FileSafeId] = None
    workspace: Optional[FileSafeId] = None
    metadata: Optional[dict[str, Any]] = None


class SessionRollout(_Model):
    layout: Optional[str] = None
    rollout_id: Optional[str] = None
    segment_count: Optional[int] = None


class ForgetSpec(_Model):
    """``Job.forget``: what a forget job removes, and how."""

    scope: Optional[Literal["rollouts", "workspace", "tenant"]] = None
    mode: Optional[Literal["scrub", "rebuild"]] = None
    rollout_ids: list[str] = []


class Job(_Model):
    job_id: Optional[str] = None
    kind: Optional[JobKind] = None
    state: Optional[JobState] = None
    session_id: Optional[str] = None
    workspace: Optional[str] = None
    layout: Optional[str] = None
    rollout_id: Optional[str] = None
    attempts: Optional[int] = None
    run_after: Optional[datetime] = None
    last_error: Optional[str] = None
    usage: Optional[dict[str, Any]] = None
    created_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    sessions: list[str] = []
    restore_run_id: Optional[str] = None
    eager: bool = False
    forget: Optional[ForgetSpec] = None
    redactions: dict[str, int] = {}


class JobList(_Model):
    jobs: list[Job] = []
    next_cursor: Optional[str] = None


class SessionSummary(_Model):
    session_id: Optional[str] = None
    workspace: Optional[str] = None
    state: Optional[SessionState] = None
    created_at: Optional[datetime] = None
    closed_at: Optional[datetime] = None
    segments: Optional[int] = None
    rollouts: Optional[int] = None
    memory_status: Optional[dict[str, Any]] = None


class SessionPage(_Model):
    sessions: list[SessionSummary] = []
    next_cursor: Optional[str] = None


class WorkspaceSummary(_Model):
    name: Optional[str] = None
    layouts: list[str] = []
    sessions: Optional[int] = None
    updated_at: Optional[datetime] = None


class WorkspaceList(_Model):
    workspaces: list[WorkspaceSummary] = []


class MemoryFile(_Model):
    path: Optional[str] = None
    bytes: Optional[int] = None
    modified_at: Optional[datetime] = None


class FileList(_Model):
    files: list[MemoryFile] = []


class TenantSummary(_Model):
    tenant_id: Optional[str] = None
    name: Optional[str] = None
    created_at: Optional[datetime] = None
    keys: Optional[int] = None
    sessions: Optional[int] = None
    state: Optional[Literal["active", "deleting"]] = None


class TenantList(_Model):
    tenants: list[TenantSummary] = []
    next_cursor: Optional[str] = None


class Session(_Model):
    session_id: Optional[str] = None
    workspace: Optional[str] = None
    state: Optional[SessionState] = None
    metadata: Optional[dict[str, Any]] = None
    memory_status: Optional[dict[str, Any]] = None
    created_at: Optional[datetime] = None
    closed_at: Optional[datetime] = None
    waiting: Optional[str] = None
    """``"model_budget"`` while a closing session's jobs wait for its tenant's token budget."""
    rollouts: list[SessionRollout] = []
    jobs: list[Job] = []


class QueuedJob(_Model):
    job_id: Optional[str] = None
    kind: Optional[JobKind] = None
    layout: Optional[str] = None
    rollout_id: Optional[str] = None
    state: Optional[JobState] = None


class CloseResult(_Model):
    session_id: Optional[str] = None
    state: Optional[SessionState] = None
    memory_status: Optional[dict[str, Any]] = None
    jobs: list[QueuedJob] = []


class SelectionItem(_Model):
    rollout_id: Optional[str] = None
    updated_at: Optional[str] = None
    rollout_path: Optional[str] = None
    rollout_summary_file: Optional[str] = None
    terminal_state: Optional[str] = None


class PhaseTwoSelection(_Model):
    version: Optional[int] = None
    updated_at: Optional[str] = None
    run_id: Optional[str] = None
    selected: list[SelectionItem] = []
    added_rollout_ids: list[str] = []
    retained_rollout_ids: list[str] = []
    removed: list[SelectionItem] = []


class PhaseTwoRun(_Model):
    run_id: Optional[str] = None
    kind: Optional[Literal["phase_two", "restore", "forget"]] = None
    job_id: Optional[str] = None
    session_id: Optional[str] = None
    state: Optional[Literal["succeeded", "skipped", "failed"]] = None
    selected: Optional[int] = None
    added: Optional[int] = None
    retained: Optional[int] = None
    removed: Optional[int] = None
    files_changed: list[str] = []
    sessions: list[str] = []
    restored_from: Optional[str] = None
    redactions: dict[str, int] = {}
    usage: Optional[dict[str, Any]] = None
    turns: Optional[int] = None
    error: Optional[str] = None
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None


class FileChange(_Model):
    path: Optional[str] = None
    change: Optional[Literal["added", "modified", "deleted"]] = None
    diff: Optional[str] = None
    before_bytes: Optional[int] = None
    after_bytes: Optional[int] = None


class RunDetail(PhaseTwoRun):
    history_kept: bool = False
    changes: Optional[list[FileChange]] = None


class RunList(_Model):
    runs: list[PhaseTwoRun] = []
    next_cursor: Optional[str] = None


class Instructions(_Model):
    instructions: str
    memory_dir: Optional[str] = None
    truncated: bool = False


EventType = Literal["session.closed", "run.succeeded", "run.failed", "job.failed", "forget.completed", "webhook.test"]


class WebhookBody(_Model):
    url: str
    events: Optional[list[str]] = None
    description: Optional[str] = None


class Webhook(_Model):
    webhook_id: str
    url: str
    events: list[str]
    description: Optional[str] = None
    state: Literal["enabled", "disabled"]
    disabled_reason: Optional[str] = None
    previous_secret_until: Optional[datetime] = None
    created_at: datetime
    updated_at: datetime


class WebhookWithSecret(Webhook):
    secret: str


class Delivery(_Model):
    event_id: str
    event_type: str
    state: Literal["pending", "succeeded", "failed", "dropped"]
    attempts: int
    last_status: Optional[int] = None
    last_error: Optional[str] = None
    last_response: Optional[str] = None
    last_attempt_at: Optional[datetime] = None
    next_attempt_at: Optional[datetime] = None
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
    error: Optional[str] = None


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
