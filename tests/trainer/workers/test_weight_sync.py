"""Weight sync and colocated sleep/wake, on CPU.

vLLM needs a CUDA GPU, so the vLLM paths run against a recording stand-in for the `vllm` package at
the library boundary (`_FakeLLM`: the `LLM` methods our backend calls, with vLLM 0.33's ordering
rules, docs/design/010-gpu-path.md); everything of ours is real: config, `WorkerGroup`, learner,
rollout workers, `WeightSync`, the learner's chunk export and IPC handles (CPU tensors' handles
rebuild in-process). The hf test drives the real driver step with a real ALFWorld server.
"""

from __future__ import annotations

import os
import pickle
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.multiprocessing.reductions import rebuild_tensor

from trainer.backends import vllm as vllm_backend
from trainer.backends.hf import HFBackend
from trainer.backends.weight_transfer import WeightExport, merge_ipc_infos
from trainer.batching import SyncGroups
from trainer.config import TrainerConfig
from trainer.driver import train_step
from trainer.models.loading import load_model
from trainer.models.tiny import TinyModels
from trainer.workers import WorkerGroup
from trainer.workers.executor import LocalExecutor
from trainer.workers.learner import LearnerWorker
from trainer.workers.rollout import RolloutWorker
from trainer.workers.teacher import TeacherWorker
from trainer.workers.weight_sync import WeightSync


class _FakeLLM:
    """Records every call; enforces vLLM's weight-update order (gpu_worker.py:1519-1656); ipc chunks
    are rebuilt from the handle of this "GPU" ("cpu") and kept in `loaded`."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.calls: list[tuple[str, Any]] = []
        self.loaded: dict[str, torch.Tensor] = {}
        self.active = False

    def init_weight_transfer_engine(self, request: dict[str, Any]) -> None:
        assert self.kwargs.get("weight_transfer_config"), "weight_transfer_config not set"
        self.calls.append(("init_weight_transfer_engine", request))

    def start_weight_update(self) -> None:
        if self.active:
            raise RuntimeError("start_weight_update called while a weight update is already active")
        self.active = True
        self.calls.append(("start_weight_update", None))

    def update_weights(self, request: dict[str, Any]) -> None:
        if not self.active:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        info = request["update_info"]
        self.calls.append(("update_weights", info))
        assert len(info["names"]) == len(info["dtype_names"]) == len(info["shapes"])
        if "ipc_handles" in info:
            for name, handle in zip(info["names"], info["ipc_handles"], strict=True):
                self.loaded[name] = rebuild_tensor(*handle["cpu"]).clone()

    def finish_weight_update(self) -> None:
        if not self.active:
            raise RuntimeError("finish_weight_update called without a matching start_weight_update.")
        self.active = False
        self.calls.append(("finish_weight_update", None))

    def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """The in-process engine hands the arguments to the worker extension untouched."""
        self.calls.append(("collective_rpc", method))
        if method != "envhub_load_weights":  # envhub_start_load / envhub_finish_load: the reload session
            return [None]
        for name, tensor in args[0]:
            self.loaded[name] = tensor.clone()
        return [len(args[0])]

    def reset_prefix_cache(self) -> None:
        self.calls.append(("reset_prefix_cache", None))

    def sleep(self, level: int = 1) -> None:
        self.calls.append(("sleep", level))

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append(("wake_up", tags))


_BROADCASTS: list[torch.Tensor] = []
_NCCL_GROUPS: list[dict[str, Any]] = []


class _FakeNcclGroup:
    """vLLM's trainer-side PyNcclCommunicator (pynccl.py:543): records what rank 0 broadcasts."""

    def broadcast(self, tensor: torch.Tensor, src: int, stream: Any = None) -> None:
        assert src == 0 and tensor.is_contiguous()
        _BROADCASTS.append(tensor.clone())


def _trainer_init(info: dict[str, Any], rank: int = 0) -> _FakeNcclGroup:
    _NCCL_GROUPS.append({**info, "rank": rank})
    return _FakeNcclGroup()


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    modules = {
        "vllm": types.ModuleType("vllm"),
        "vllm.distributed": types.ModuleType("vllm.distributed"),
        "vllm.distributed.weight_transfer": types.ModuleType("vllm.distributed.weight_transfer"),
        "vllm.distributed.weight_transfer.nccl_common": types.ModuleType("nccl_common"),
    }
    modules["vllm"].LLM = _FakeLLM  # type: ignore[attr-defined]
    modules["vllm.distributed.weight_transfer.nccl_common"].trainer_init = _trainer_init  # type: ignore[attr-defined]
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setattr(vllm_backend, "_process_engine", None)
    _BROADCASTS.clear()
    _NCCL_GROUPS.clear()


def _as_own_process() -> None:
    """The next engine stands for one in its own actor process (under Ray every engine is one): vLLM runs
    one engine per process, and the backend refuses a second in one process."""
    vllm_backend._process_engine = None


class _RecordingExecutor(LocalExecutor):
    """The local executor, recording (worker class, method, args) of every call in order (a call of a rollout
    worker's engine API, `RolloutWorker.on_engine(VLLMBackend.x, ...)`, is recorded as the engine method's)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, tuple[Any, ...]]] = []

    def call(self, worker: Any, method: Any, *args: Any, **kwargs: Any) -> Any:
        if method is RolloutWorker.on_engine:
            self.calls.append((worker.cls.__name__, args[0].__name__, args[1:]))
        else:
            self.calls.append((worker.cls.__name__, method.__name__, args))
        return super().call(worker, method, *args, **kwargs)


def _config(alfworld_config: Callable[..., TrainerConfig], server: str, **sections: object) -> TrainerConfig:
    """A one-task GRPO step on 2-turn episodes: the least driver work that moves weights."""
    defaults = {
        "env": {"max_turns": 2, "max_tasks": 4},
        "rollout": {"tasks_per_step": 1, "max_new_tokens": 6},
        "objective": {"name": "grpo"},
    }
    return alfworld_config(server, **{**defaults, **sections})


def _engine_weights(student: Path) -> dict[str, torch.Tensor]:
    model = load_model(str(student), device="cpu")
    return {n: t.to(torch.bfloat16) if t.is_floating_point() else t for n, t in model.state_dict().items()}


def _assert_engine_holds_student_weights(llm: _FakeLLM, student: Path) -> None:
    """The engine loaded every weight of the learner (the tiny student), bitwise, in bf16."""
    expected = _engine_weights(student)
    assert llm.loaded.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(llm.loaded[name], tensor), name


def test_weight_sync_modes_resolve_and_validate(alfworld_config: Callable[..., TrainerConfig]) -> None:
    base = _config(alfworld_config, "h:1")
    assert base.weight_sync() == "state_dict"
    vllm = {"kind": "vllm", "device": "cpu"}
    assert _config(alfworld_config, "h:1", backend=vllm).weight_sync() == "inproc"
    ray, placed = {"enabled": True}, {"learner_gpus": 1}
    assert _config(alfworld_config, "h:1", backend=vllm, ray=ray, placement=placed).weight_sync() == "ipc"
    split = {"mode": "split", "learner_gpus": 1}
    assert _config(alfworld_config, "h:1", backend=vllm, ray=ray, placement=split).weight_sync() == "nccl"
    bad = [
        ({"backend": {"weight_sync": "ipc"}}, "backend.kind to vllm"),
        ({"backend": {**vllm, "weight_sync": "ipc"}, "placement": {"mode": "split"}}, "colocated"),
        ({"backend": {**vllm, "weight_sync": "nccl"}}, "split"),
        ({"backend": {**vllm, "weight_sync": "nccl"}, "placement": {"mode": "split"}}, "ray.enabled"),
        ({"backend": {**vllm, "weight_sync": "inproc"}, "ray": ray}, "ray.enabled false"),
        ({"backend": {"weight_sync": "inproc"}, "ray": ray}, "ray.enabled false"),
        ({"backend": {**vllm, "tensor_parallel_size": 2}, "ray": ray}, "placement.mode split"),
        # one process, student and teacher engines: vLLM runs one engine per process
        ({"backend": vllm, "objective": {"name": "atod"}}, "one engine per process"),
        ({"backend": vllm, "ray": {"num_rollout_workers": 2}}, "one engine per process"),
        (
            {
                "backend": {**vllm, "tensor_parallel_size": 2},
                "ray": ray,
                "placement": {**split, "rollout_gpus": 1},
            },
            "rollout_gpus to 2",
        ),
    ]
    for sections, message in bad:
        with pytest.raises(ValueError, match=message):
            _config(alfworld_config, "h:1", **sections)


def test_chunk_plan_and_ipc_payload_round_trip_through_pickle() -> None:
    state = {"a": torch.randn(4, 8), "b": torch.randn(16), "steps": torch.tensor([3]), "c": torch.randn(2, 2)}
    export = WeightExport(state, torch.bfloat16, bucket_bytes=40)
    assert export.chunks == [["a"], ["b", "steps"], ["c"]]  # planned from metadata: 64 B, 32+8 B, 8 B
    assert export.infos[1] == {"names": ["b", "steps"], "dtype_names": ["bfloat16", "int64"], "shapes": [[16], [1]]}
    # two learner ranks export the same chunk on their own devices; the engines get one merged payload
    rank0, rank1 = export.ipc_info(1), WeightExport(state, torch.bfloat16, 40).ipc_info(1)
    rank1["ipc_handles"] = [{"gpu-1": h["cpu"]} for h in rank1["ipc_handles"]]
    merged = merge_ipc_infos([rank0, rank1])
    assert [sorted(h) for h in merged["ipc_handles"]] == [["cpu", "gpu-1"], ["cpu", "gpu-1"]]
    shipped = pickle.loads(pickle.dumps(merged))  # what Ray does between learner and rollout actors
    for name, dtype_name, shape, handle in zip(*(shipped[k] for k in merged), strict=True):
        tensor = rebuild_tensor(*handle["cpu"])
        assert tensor.dtype == getattr(torch, dtype_name) and list(tensor.shape) == shape
        assert torch.equal(tensor, state[name].to(tensor.dtype))
    export.release()
    with pytest.raises(ValueError, match="share one plan"):
        merge_ipc_infos([rank0, export.ipc_info(0)])


def test_ipc_sync_follows_vllm_weight_transfer_order_and_wakes_colocated_engines(
    tiny_models: TinyModels, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str, fake_vllm: None
) -> None:
    config = _config(
        alfworld_config,
        alfworld_server,
        backend={"kind": "vllm", "device": "cpu", "weight_sync": "ipc", "weight_bucket_mb": 0.05},
    )
    executor = _RecordingExecutor()
    group = WorkerGroup(config, [alfworld_server], executor=executor)
    try:
        llm = group.rollout_workers[0].ref.backend.llm
        assert llm.kwargs["weight_transfer_config"] == {"backend": "ipc"} and llm.kwargs["enable_sleep_mode"]
        assert llm.calls == [("init_weight_transfer_engine", {"init_info": {"packed": False}})]
        llm.calls.clear()
        executor.calls.clear()
        group.sync_weights()
        # the learner drops its exported copies and empties its CUDA cache before the KV cache wakes
        memory = [(role, method, args) for role, method, args in executor.calls if method not in _CHUNK_CALLS]
        assert memory == [
            ("RolloutWorker", "wake_up", (["weights"],)),
            ("LearnerWorker", "export_end", ()),
            ("LearnerWorker", "release_memory", ()),
            ("RolloutWorker", "wake_up", (["kv_cache"],)),
        ]
        names = [name for name, _ in llm.calls]
        chunks = names.count("update_weights")
        assert chunks > 1
        assert names == [
            "wake_up",
            "start_weight_update",
            *["update_weights"] * chunks,
            "finish_weight_update",
            "reset_prefix_cache",
            "wake_up",
        ]
        assert llm.calls[0][1] == ["weights"] and llm.calls[-1][1] == ["kv_cache"]
        _assert_engine_holds_student_weights(llm, tiny_models.student)
    finally:
        group.close()


_CHUNK_CALLS = {"export_begin", "start_weight_update", "export_ipc", "receive_weights", "finish_weight_update"}


def test_inproc_sync_hands_bf16_buckets_to_the_engine_in_this_process(
    tiny_models: TinyModels, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str, fake_vllm: None
) -> None:
    config = _config(
        alfworld_config, alfworld_server, backend={"kind": "vllm", "device": "cpu", "weight_bucket_mb": 0.05}
    )
    assert config.weight_sync() == "inproc"  # what `make gpu-smoke` runs first (Ray off)
    group = WorkerGroup(config, [alfworld_server])
    try:
        llm = group.rollout_workers[0].ref.backend.llm
        assert "weight_transfer_config" not in llm.kwargs and llm.calls == []
        group.sync_weights()
        names = [name for name, _ in llm.calls]
        rpcs = [method for name, method in llm.calls if name == "collective_rpc"]
        buckets = rpcs.count("envhub_load_weights")
        assert buckets > 1
        assert rpcs == ["envhub_start_load", *["envhub_load_weights"] * buckets, "envhub_finish_load"]
        assert names == ["wake_up", *["collective_rpc"] * (buckets + 2), "reset_prefix_cache", "wake_up"]
        _assert_engine_holds_student_weights(llm, tiny_models.student)
    finally:
        group.close()


def test_nccl_sync_announces_each_chunk_that_the_learner_broadcasts(
    tiny_models: TinyModels, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str, fake_vllm: None
) -> None:
    config = _config(
        alfworld_config,
        alfworld_server,
        backend={"kind": "vllm", "device": "cpu", "weight_bucket_mb": 0.05},
        ray={"enabled": True},
        placement={"mode": "split", "learner_gpus": 1},
    )
    assert config.weight_sync() == "nccl"
    # In-process calls run one after the other (the fakes never block); under Ray the engines'
    # update_weights and the learner's broadcast run concurrently, as NCCL needs.
    executor = LocalExecutor()
    engines = []
    for _ in range(2):
        _as_own_process()
        engines.append(executor.spawn(None, RolloutWorker, config, alfworld_server))
    learner = executor.spawn(None, LearnerWorker, config)
    sync = WeightSync("nccl", executor, [learner], engines, bucket_bytes=50_000, engine_world_size=2)
    sync.connect()
    inits = [engine.ref.backend.llm.calls[0] for engine in engines]
    assert [name for name, _ in inits] == ["init_weight_transfer_engine"] * 2
    # trainer = rank 0; engine i's TP workers at 1 + 2i, 1 + 2i + 1; 1 + 2 x 2 ranks in all
    assert [r["init_info"]["rank_offset"] for _, r in inits] == [1, 3]
    info = inits[0][1]["init_info"]
    assert [{**{k: info[k] for k in ("master_address", "master_port", "world_size")}, "rank": 0}] == _NCCL_GROUPS
    assert info["world_size"] == 5
    sync.push()
    expected = _engine_weights(tiny_models.student)
    for engine in engines:
        calls = engine.ref.backend.llm.calls[1:]
        chunks = [info for name, info in calls if name == "update_weights"]
        assert len(chunks) > 1 and all("ipc_handles" not in chunk for chunk in chunks)
        assert [n for n, _ in calls] == [
            "start_weight_update",
            *["update_weights"] * len(chunks),
            "finish_weight_update",
            "reset_prefix_cache",
        ]
        announced = [x for c in chunks for x in zip(c["names"], c["dtype_names"], c["shapes"], strict=True)]
        assert [n for n, _, _ in announced] == list(expected)
        # the k-th broadcast tensor is what the engine was told to expect k-th (vLLM receives in order)
        for (name, dtype_name, shape), sent in zip(announced, _BROADCASTS, strict=True):
            assert sent.dtype == getattr(torch, dtype_name) and list(sent.shape) == shape
            assert torch.equal(sent, expected[name]), name


def test_tensor_parallel_engines_run_their_workers_with_mp_spawned(
    alfworld_config: Callable[..., TrainerConfig], monkeypatch: pytest.MonkeyPatch, fake_vllm: None
) -> None:
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    placement = {"mode": "split", "learner_gpus": 1, "rollout_gpus": 2, "teacher_gpus": 4}
    config = _config(
        alfworld_config,
        "h:1",
        objective={"name": "atod"},
        backend={"kind": "vllm", "device": "cpu", "tensor_parallel_size": 2},
        ray={"enabled": True},
        placement=placement,
    )
    engine = RolloutWorker(config, "h:1").backend.llm
    assert (engine.kwargs["tensor_parallel_size"], engine.kwargs["distributed_executor_backend"]) == (2, "mp")
    assert engine.kwargs["weight_transfer_config"] == {"backend": "nccl"} and not engine.kwargs["enable_sleep_mode"]
    assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    _as_own_process()
    teacher = TeacherWorker(config).backend.llm
    assert (teacher.kwargs["tensor_parallel_size"], teacher.kwargs["distributed_executor_backend"]) == (4, "mp")


def test_a_second_vllm_engine_in_one_process_is_refused(fake_vllm: None) -> None:
    from trainer.backends import make_backend

    make_backend("vllm", "runs/models/student")
    with pytest.raises(RuntimeError, match=r"already started a vLLM engine \(runs/models/student\).*ray.enabled true"):
        make_backend("vllm", "runs/models/teacher")


def test_the_hf_teacher_frees_its_weights_through_the_update_and_reads_them_again(
    alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    worker = TeacherWorker(_config(alfworld_config, alfworld_server, objective={"name": "atod"}))
    backend = worker.backend
    assert isinstance(backend, HFBackend)
    prompts, responses = [[3, 4, 5, 6], [3, 9]], [[7, 8], [10, 11, 12]]
    before = backend.score(prompts, responses)
    worker.sleep()
    assert backend.weights_freed and all(param.numel() == 0 for param in backend.model.parameters())
    with pytest.raises(RuntimeError, match="update_weights must come first"):
        backend.score(prompts, responses)
    worker.wake_up()
    assert not backend.weights_freed and backend.score(prompts, responses) == before


def test_colocated_driver_step_sleeps_engines_through_the_update(
    alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    config = _config(alfworld_config, alfworld_server, objective={"name": "atod"})
    group = WorkerGroup(config, [alfworld_server])
    try:
        backend = group.rollout_workers[0].ref.backend
        teacher = group.teacher.ref.backend
        tasks = [(group.task_ids("train", ["pick_and_place_simple"])[0], 1)]
        metrics = train_step(config, group, SyncGroups(config.prompt.context), tasks, step=0)
        assert metrics["rollout/trajectories"] == 2.0 and group.global_step() == 1
        # generate -> sleep(2) -> learn -> wake(weights) -> load weights -> wake(kv_cache)
        assert list(backend.memory_events) == ["sleep:2", "wake:weights", "load_weights", "wake:kv_cache"]
        assert list(teacher.memory_events) == ["sleep:2", "load_weights", "wake:all"]  # read again from disk
    finally:
        group.close()
    split = _config(alfworld_config, alfworld_server, placement={"mode": "split"})
    group = WorkerGroup(split, [alfworld_server])
    try:
        group.sync_weights()
        assert list(group.rollout_workers[0].ref.backend.memory_events) == ["load_weights"]
    finally:
        group.close()


def test_inproc_sync_copies_the_learners_weights_into_the_hf_engine(
    alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    """`inproc` with the hf backend (docs/design/039): after an update the engine holds the learner's new weights,
    copied from the live tensors (no full copy first), and the learner's tensors are not the engine's."""
    config = _config(alfworld_config, alfworld_server, backend={"weight_sync": "inproc"})
    assert config.weight_sync() == "inproc"
    group = WorkerGroup(config, [alfworld_server])
    try:
        tasks = [(group.task_ids("train", ["pick_and_place_simple"])[0], 1)]
        train_step(config, group, SyncGroups(config.prompt.context), tasks, step=0)
        learner = group.learner.ref.learner.model.state_dict()
        engine = group.rollout_workers[0].ref.backend.model.state_dict()
        assert list(engine) == list(learner)
        for name, tensor in learner.items():
            assert torch.equal(engine[name], tensor.to(engine[name].dtype)), name
            assert engine[name].data_ptr() != tensor.data_ptr(), name
    finally:
        group.close()


def test_the_hf_teacher_scores_the_configured_rows_a_forward(
    alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    """`backend.teacher_batch_rows` bounds the hf teacher's scoring forward (its peak memory; docs/design/039)."""
    config = _config(alfworld_config, alfworld_server, objective={"name": "atod"}, backend={"teacher_batch_rows": 2})
    backend = TeacherWorker(config).backend
    assert isinstance(backend, HFBackend) and backend.batch_size == 2
    prompts, responses = [[3, 4, 5, 6], [3, 9], [5, 6, 7]], [[7, 8], [10, 11, 12], [9]]
    wide = HFBackend(backend.model, eos_token_ids=[0], pad_token_id=0, batch_size=64)
    assert backend.score(prompts, responses) == wide.score(prompts, responses)
