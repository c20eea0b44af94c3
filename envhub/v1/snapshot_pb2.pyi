from envhub.v1 import envhub_pb2 as _envhub_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SignedSnapshot(_message.Message):
    __slots__ = ("state", "signature", "key_id")
    STATE_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    state: bytes
    signature: bytes
    key_id: str
    def __init__(self, state: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., key_id: _Optional[str] = ...) -> None: ...

class SnapshotState(_message.Message):
    __slots__ = ("format", "environment", "environment_version", "task_id", "seed", "options", "max_steps", "step_index", "action_log", "reset_digest", "native_state", "last_observation", "done")
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    ACTION_LOG_FIELD_NUMBER: _ClassVar[int]
    RESET_DIGEST_FIELD_NUMBER: _ClassVar[int]
    NATIVE_STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    format: int
    environment: str
    environment_version: str
    task_id: str
    seed: int
    options: _containers.ScalarMap[str, str]
    max_steps: int
    step_index: int
    action_log: _containers.RepeatedCompositeFieldContainer[ReplayStep]
    reset_digest: bytes
    native_state: str
    last_observation: _envhub_pb2.Observation
    done: bool
    def __init__(self, format: _Optional[int] = ..., environment: _Optional[str] = ..., environment_version: _Optional[str] = ..., task_id: _Optional[str] = ..., seed: _Optional[int] = ..., options: _Optional[_Mapping[str, str]] = ..., max_steps: _Optional[int] = ..., step_index: _Optional[int] = ..., action_log: _Optional[_Iterable[_Union[ReplayStep, _Mapping]]] = ..., reset_digest: _Optional[bytes] = ..., native_state: _Optional[str] = ..., last_observation: _Optional[_Union[_envhub_pb2.Observation, _Mapping]] = ..., done: _Optional[bool] = ...) -> None: ...

class ReplayStep(_message.Message):
    __slots__ = ("action", "observation_digest")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_DIGEST_FIELD_NUMBER: _ClassVar[int]
    action: str
    observation_digest: bytes
    def __init__(self, action: _Optional[str] = ..., observation_digest: _Optional[bytes] = ...) -> None: ...
