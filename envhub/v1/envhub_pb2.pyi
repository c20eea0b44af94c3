from google.protobuf import struct_pb2 as _struct_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListEnvironmentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListEnvironmentsResponse(_message.Message):
    __slots__ = ("environments", "replica_id")
    ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    environments: _containers.RepeatedCompositeFieldContainer[EnvironmentInfo]
    replica_id: str
    def __init__(self, environments: _Optional[_Iterable[_Union[EnvironmentInfo, _Mapping]]] = ..., replica_id: _Optional[str] = ...) -> None: ...

class EnvironmentInfo(_message.Message):
    __slots__ = ("name", "version", "description", "splits", "split_sizes", "capabilities", "default_max_steps", "options", "config")
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SPLITS_FIELD_NUMBER: _ClassVar[int]
    SPLIT_SIZES_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    splits: _containers.RepeatedScalarFieldContainer[str]
    split_sizes: _containers.RepeatedScalarFieldContainer[int]
    capabilities: Capabilities
    default_max_steps: int
    options: _containers.ScalarMap[str, str]
    config: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., splits: _Optional[_Iterable[str]] = ..., split_sizes: _Optional[_Iterable[int]] = ..., capabilities: _Optional[_Union[Capabilities, _Mapping]] = ..., default_max_steps: _Optional[int] = ..., options: _Optional[_Mapping[str, str]] = ..., config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("native_snapshot", "deterministic_replay", "expert", "admissible_actions")
    NATIVE_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_REPLAY_FIELD_NUMBER: _ClassVar[int]
    EXPERT_FIELD_NUMBER: _ClassVar[int]
    ADMISSIBLE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    native_snapshot: bool
    deterministic_replay: bool
    expert: bool
    admissible_actions: bool
    def __init__(self, native_snapshot: _Optional[bool] = ..., deterministic_replay: _Optional[bool] = ..., expert: _Optional[bool] = ..., admissible_actions: _Optional[bool] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("environment", "split", "page_size", "page_token")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    environment: str
    split: str
    page_size: int
    page_token: str
    def __init__(self, environment: _Optional[str] = ..., split: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token", "total_size")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskInfo]
    next_page_token: str
    total_size: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total_size: _Optional[int] = ...) -> None: ...

class TaskInfo(_message.Message):
    __slots__ = ("task_id", "split", "index", "family", "description", "deterministic")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    split: str
    index: int
    family: str
    description: str
    deterministic: bool
    def __init__(self, task_id: _Optional[str] = ..., split: _Optional[str] = ..., index: _Optional[int] = ..., family: _Optional[str] = ..., description: _Optional[str] = ..., deterministic: _Optional[bool] = ...) -> None: ...

class TaskSelector(_message.Message):
    __slots__ = ("task_id", "split_index")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SPLIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    split_index: SplitIndex
    def __init__(self, task_id: _Optional[str] = ..., split_index: _Optional[_Union[SplitIndex, _Mapping]] = ...) -> None: ...

class SplitIndex(_message.Message):
    __slots__ = ("split", "index")
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    split: str
    index: int
    def __init__(self, split: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("environment", "task", "seed", "options", "max_steps", "include_admissible_actions")
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ADMISSIBLE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    environment: str
    task: TaskSelector
    seed: int
    options: _containers.ScalarMap[str, str]
    max_steps: int
    include_admissible_actions: bool
    def __init__(self, environment: _Optional[str] = ..., task: _Optional[_Union[TaskSelector, _Mapping]] = ..., seed: _Optional[int] = ..., options: _Optional[_Mapping[str, str]] = ..., max_steps: _Optional[int] = ..., include_admissible_actions: _Optional[bool] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session_id", "task", "observation")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    task: TaskInfo
    observation: Observation
    def __init__(self, session_id: _Optional[str] = ..., task: _Optional[_Union[TaskInfo, _Mapping]] = ..., observation: _Optional[_Union[Observation, _Mapping]] = ...) -> None: ...

class ResetSessionRequest(_message.Message):
    __slots__ = ("session_id", "task", "seed", "include_admissible_actions", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ADMISSIBLE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    task: TaskSelector
    seed: int
    include_admissible_actions: bool
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., task: _Optional[_Union[TaskSelector, _Mapping]] = ..., seed: _Optional[int] = ..., include_admissible_actions: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class ResetSessionResponse(_message.Message):
    __slots__ = ("task", "observation")
    TASK_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    task: TaskInfo
    observation: Observation
    def __init__(self, task: _Optional[_Union[TaskInfo, _Mapping]] = ..., observation: _Optional[_Union[Observation, _Mapping]] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("text", "task_description", "admissible_actions", "has_admissible_actions", "score", "step_index", "info")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TASK_DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ADMISSIBLE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    HAS_ADMISSIBLE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    text: str
    task_description: str
    admissible_actions: _containers.RepeatedScalarFieldContainer[str]
    has_admissible_actions: bool
    score: float
    step_index: int
    info: _struct_pb2.Struct
    def __init__(self, text: _Optional[str] = ..., task_description: _Optional[str] = ..., admissible_actions: _Optional[_Iterable[str]] = ..., has_admissible_actions: _Optional[bool] = ..., score: _Optional[float] = ..., step_index: _Optional[int] = ..., info: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("session_id", "action", "include_admissible_actions", "expected_step_index", "request_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ADMISSIBLE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    action: str
    include_admissible_actions: bool
    expected_step_index: int
    request_id: str
    def __init__(self, session_id: _Optional[str] = ..., action: _Optional[str] = ..., include_admissible_actions: _Optional[bool] = ..., expected_step_index: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: StepResult
    def __init__(self, result: _Optional[_Union[StepResult, _Mapping]] = ...) -> None: ...

class StepBatchRequest(_message.Message):
    __slots__ = ("steps",)
    STEPS_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[StepRequest]
    def __init__(self, steps: _Optional[_Iterable[_Union[StepRequest, _Mapping]]] = ...) -> None: ...

class StepBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[StepBatchEntry]
    def __init__(self, results: _Optional[_Iterable[_Union[StepBatchEntry, _Mapping]]] = ...) -> None: ...

class StepBatchEntry(_message.Message):
    __slots__ = ("result", "error")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    result: StepResult
    error: _status_pb2.Status
    def __init__(self, result: _Optional[_Union[StepResult, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class StepResult(_message.Message):
    __slots__ = ("observation", "reward", "terminated", "truncated", "won")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    WON_FIELD_NUMBER: _ClassVar[int]
    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    won: bool
    def __init__(self, observation: _Optional[_Union[Observation, _Mapping]] = ..., reward: _Optional[float] = ..., terminated: _Optional[bool] = ..., truncated: _Optional[bool] = ..., won: _Optional[bool] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetExpertActionsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetExpertActionsResponse(_message.Message):
    __slots__ = ("actions",)
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    actions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, actions: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateSnapshotRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CreateSnapshotResponse(_message.Message):
    __slots__ = ("snapshot", "step_index", "environment", "environment_version")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    snapshot: bytes
    step_index: int
    environment: str
    environment_version: str
    def __init__(self, snapshot: _Optional[bytes] = ..., step_index: _Optional[int] = ..., environment: _Optional[str] = ..., environment_version: _Optional[str] = ...) -> None: ...

class RestoreSnapshotRequest(_message.Message):
    __slots__ = ("snapshot", "include_admissible_actions")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ADMISSIBLE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    snapshot: bytes
    include_admissible_actions: bool
    def __init__(self, snapshot: _Optional[bytes] = ..., include_admissible_actions: _Optional[bool] = ...) -> None: ...

class RestoreSnapshotResponse(_message.Message):
    __slots__ = ("session_id", "task", "observation")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    task: TaskInfo
    observation: Observation
    def __init__(self, session_id: _Optional[str] = ..., task: _Optional[_Union[TaskInfo, _Mapping]] = ..., observation: _Optional[_Union[Observation, _Mapping]] = ...) -> None: ...

class RestoreSnapshotBatchRequest(_message.Message):
    __slots__ = ("restores",)
    RESTORES_FIELD_NUMBER: _ClassVar[int]
    restores: _containers.RepeatedCompositeFieldContainer[RestoreSnapshotRequest]
    def __init__(self, restores: _Optional[_Iterable[_Union[RestoreSnapshotRequest, _Mapping]]] = ...) -> None: ...

class RestoreSnapshotBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[RestoreSnapshotBatchEntry]
    def __init__(self, results: _Optional[_Iterable[_Union[RestoreSnapshotBatchEntry, _Mapping]]] = ...) -> None: ...

class RestoreSnapshotBatchEntry(_message.Message):
    __slots__ = ("session", "error")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    session: RestoreSnapshotResponse
    error: _status_pb2.Status
    def __init__(self, session: _Optional[_Union[RestoreSnapshotResponse, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class ForkSessionRequest(_message.Message):
    __slots__ = ("session_id", "count")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    count: int
    def __init__(self, session_id: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class ForkSessionResponse(_message.Message):
    __slots__ = ("session_ids",)
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class SessionStreamRequest(_message.Message):
    __slots__ = ("call_id", "create", "reset", "step", "close")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    create: CreateSessionRequest
    reset: ResetSessionRequest
    step: StepRequest
    close: CloseSessionRequest
    def __init__(self, call_id: _Optional[int] = ..., create: _Optional[_Union[CreateSessionRequest, _Mapping]] = ..., reset: _Optional[_Union[ResetSessionRequest, _Mapping]] = ..., step: _Optional[_Union[StepRequest, _Mapping]] = ..., close: _Optional[_Union[CloseSessionRequest, _Mapping]] = ...) -> None: ...

class SessionStreamResponse(_message.Message):
    __slots__ = ("call_id", "create", "reset", "step", "close", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    create: CreateSessionResponse
    reset: ResetSessionResponse
    step: StepResponse
    close: CloseSessionResponse
    error: _status_pb2.Status
    def __init__(self, call_id: _Optional[int] = ..., create: _Optional[_Union[CreateSessionResponse, _Mapping]] = ..., reset: _Optional[_Union[ResetSessionResponse, _Mapping]] = ..., step: _Optional[_Union[StepResponse, _Mapping]] = ..., close: _Optional[_Union[CloseSessionResponse, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...
