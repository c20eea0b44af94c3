"""The Search-QA overlay played with `podman kube play`: a pod killed and a rolling restart lose no episode.

Slow: builds the Search-QA image (deploy/docker/build.sh; cached layers after the first time), plays
the rendered overlay's two replicas, and runs `envhub bench --profile kube` briefly (8 episodes at a
time, 5 s quiet phases). Needs what .ci/run installs (podman, buildah, runc, debootstrap, kubectl)
and root: the client reaches the pods on podman's pod network, as a headless Service's answer.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from envhub.bench.kube.play import KubeBenchSettings, run_kube_bench

pytestmark = pytest.mark.slow


def needs(ok: bool, what: str) -> None:
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"{what} (.ci/run installs the tools and runs as root)")
        pytest.skip(what)


@pytest.mark.timeout(1800)
def test_a_killed_pod_and_a_rolling_restart_lose_no_episode(tmp_path: Path) -> None:
    for tool in ("podman", "buildah", "debootstrap", "kubectl"):
        needs(shutil.which(tool) is not None, f"{tool} is not installed")
    needs(os.geteuid() == 0, "rootful podman is needed (pod IPs reachable from this host)")

    result = run_kube_bench(KubeBenchSettings("searchqa", str(tmp_path), sessions=8, quiet_s=5.0, tasks=16))

    episodes = result["episodes"]
    assert episodes["lost"] == [] and episodes["differing"] == [], episodes
    assert episodes["completed"] >= 8
    kill = next(event for event in result["events"] if event["event"] == "kill")
    assert kill["sessions"] > 0, "the killed pod held sessions"
    assert result["recoveries"] > result["migrations"], "the killed pod's sessions came back from held snapshots"
    ends = result["terminations"]
    assert len(ends) == 2 and all(end["exit_code"] == 0 and end["drained"] for end in ends), ends
    assert not any(end["sessions_lost"] for end in ends), "a drained pod left sessions behind"
    assert result["migrations"] >= 1, "a draining pod's sessions moved by fresh snapshots"
    assert result["liveness_restarts"] == 0
    assert len(result["pods_at_end"]) == 2 and all(
        name.startswith("envhub-searchqa-") for name in result["pods_at_end"]
    )
    assert result["passed"], result["checks"]
    assert (tmp_path / "envhub-kube-play-searchqa.md").exists()
