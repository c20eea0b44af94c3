"""GPU placement: the pure plan, and Ray giving each actor its own logical GPUs (no GPU needed)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from trainer.config import PlacementConfig, config_from_dict
from trainer.workers import RayExecutor
from trainer.workers.placement import Slot, gpu_loads, plan_placement


def test_no_gpus_means_no_group_and_no_gpu_requests() -> None:
    plan = plan_placement(PlacementConfig(), rollout_workers=2, teacher=True)
    assert plan.bundles == [] and plan.learner == [Slot()] and plan.rollout == [Slot(), Slot()]


def test_colocated_shares_each_learner_gpu_evenly() -> None:
    plan = plan_placement(PlacementConfig(mode="colocated", learner_gpus=2), rollout_workers=2, teacher=True)
    assert plan.bundles == [{"GPU": 1.0}, {"GPU": 1.0}]
    assert [s.bundle for s in plan.learner] == [0, 1] and [s.bundle for s in plan.rollout] == [0, 1]
    assert plan.teacher == Slot(1, 0.3333)  # bundle 1 holds a learner rank, a rollout engine and the teacher
    for bundle in range(2):
        used = sum(s.num_gpus for s in [*plan.learner, *plan.rollout, plan.teacher] if s and s.bundle == bundle)
        assert used <= 1.0


def test_split_gives_each_role_its_own_bundles() -> None:
    config = PlacementConfig(mode="split", learner_gpus=2, rollout_gpus=1, teacher_gpus=2)
    plan = plan_placement(config, rollout_workers=1, teacher=True)
    assert plan.bundles == [{"GPU": 1.0}, {"GPU": 1.0}, {"GPU": 1.0}, {"GPU": 2.0}]
    assert plan.learner == [Slot(0, 1.0), Slot(1, 1.0)] and plan.rollout == [Slot(2, 1.0)]
    assert plan.teacher == Slot(3, 2.0)


def test_gpu_loads_count_the_engines_and_learner_ranks_sharing_each_gpu() -> None:
    colocated = plan_placement(PlacementConfig(mode="colocated", learner_gpus=2), rollout_workers=3, teacher=True)
    assert gpu_loads(colocated) == [(2, 1), (2, 1)]  # rollout 0 and 2 on GPU 0; rollout 1 and the teacher on GPU 1
    config = PlacementConfig(mode="split", learner_gpus=1, teacher_gpus=2)
    split = plan_placement(config, rollout_workers=1, teacher=True)
    assert gpu_loads(split) == [(0, 1), (1, 0), (1, 0)]
    # no placement group (Ray off): everything on the process's one visible GPU
    assert gpu_loads(plan_placement(PlacementConfig(), rollout_workers=1, teacher=False)) == [(1, 1)]


def test_gpu_placement_needs_ray() -> None:
    with pytest.raises(ValueError, match=r"ray\.enabled"):
        config_from_dict({"placement": {"learner_gpus": 1}})


class DeviceProbe:
    """Reports the GPUs Ray gave this actor."""

    def devices(self) -> tuple[list[str], str | None]:
        import ray

        return [str(i) for i in ray.get_gpu_ids()], os.environ.get("CUDA_VISIBLE_DEVICES")


@pytest.fixture(scope="module")
def logical_gpus() -> Iterator[None]:
    """A local Ray with 4 logical GPUs (none real) and a small object store."""
    ray = pytest.importorskip("ray")
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(num_gpus=4, num_cpus=2, object_store_memory=100 * 1024 * 1024, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["split", "colocated"])
def test_ray_actors_get_their_own_devices(logical_gpus: None, mode: str) -> None:
    config = config_from_dict({"ray": {"enabled": True}, "placement": {"mode": mode, "learner_gpus": 2}})
    plan = plan_placement(config.placement, rollout_workers=1, teacher=True)
    executor = RayExecutor(config)
    executor.reserve(plan.bundles)
    slots = [*plan.learner, *plan.rollout, plan.teacher]
    actors = [executor.spawn(slot, DeviceProbe) for slot in slots]
    seen = executor.gather([executor.submit(a, DeviceProbe.devices) for a in actors])
    with pytest.raises(TypeError, match="is not a method of DeviceProbe"):
        executor.submit(actors[0], plan_placement)  # type: ignore[arg-type]
    executor.kill(actors)
    for ids, visible in seen:
        assert len(ids) == 1 and visible == ids[0]
    learner_0, learner_1, rollout, teacher = (ids[0] for ids, _ in seen)
    assert learner_0 != learner_1
    if mode == "split":
        assert len({learner_0, learner_1, rollout, teacher}) == 4
    else:  # the rollout engine shares learner rank 0's GPU, the teacher rank 1's
        assert (rollout, teacher) == (learner_0, learner_1)
