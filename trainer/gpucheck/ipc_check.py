"""gpu-check stage `ipc` (CUDA only): the learner's colocated weight export (`WeightExport.ipc_info`, what
`LearnerWorker.export_ipc` sends per chunk) from an FSDP2 learner on a one-rank NCCL group, rebuilt in a
second process exactly as vLLM's ipc engine rebuilds it (`trainer.gpucheck.ipc_receiver`): every tensor
bitwise equal to the learner's parameters cast to bf16, with the dtype and shape the update announced.
The exporter keeps its copies alive until the receiver is done, then releases them (`export_end`).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import torch

from trainer.gpucheck.common import TINY, Stage, learner_configs, one_rank_group, random_lm, stage_main
from trainer.gpucheck.ipc_receiver import digest

BUCKET_BYTES = 256 * 1024
"""Small chunks, so the tiny model's export takes several updates."""


def run(stage: Stage) -> None:
    if stage.device != "cuda":
        stage.skipped = "CUDA IPC needs a GPU (CPU tensors' handles are tested in tests/trainer/workers)"
        return
    from trainer.backends.weight_transfer import ENGINE_DTYPE, WeightExport, device_key
    from trainer.learner import Learner

    one_rank_group("cuda")
    objective, optim = learner_configs()
    learner = Learner(random_lm(TINY, device="cpu", dtype=torch.float32), objective, optim, device="cuda", fsdp=True)
    state = learner.model.state_dict()
    whole = {name: t.full_tensor() if hasattr(t, "full_tensor") else t for name, t in state.items()}
    expected = {name: digest(t.to(ENGINE_DTYPE) if t.is_floating_point() else t) for name, t in whole.items()}
    export = WeightExport(state, ENGINE_DTYPE, BUCKET_BYTES)
    infos = [export.ipc_info(chunk) for chunk in range(len(export.chunks))]
    uuid = device_key(torch.device("cuda", 0))
    keys = {key for info in infos for handle in info["ipc_handles"] for key in handle}
    stage.check("handles keyed by this GPU's UUID", keys == {uuid}, f"{sorted(keys)} == [{uuid}]")
    paths = [stage.out / name for name in ("ipc-infos.pkl", "ipc-expected.json", "ipc-result.json")]
    paths[0].write_bytes(pickle.dumps(infos))
    paths[1].write_text(json.dumps(expected))
    receiver = [sys.executable, "-m", "trainer.gpucheck.ipc_receiver", *map(str, paths)]
    done = subprocess.run(receiver, capture_output=True, text=True, timeout=180)
    export.release()  # after the receiver finished, as LearnerWorker.export_end after finish_weight_update
    if done.returncode:
        stage.check("receiver ran", False, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output")
        return
    result = json.loads(paths[2].read_text())
    stage.metrics.update(result)
    stage.check("several chunks", result["chunks"] > 1, f"{result['chunks']} updates of <= {BUCKET_BYTES} B")
    stage.check(
        "rebuilt bitwise equal",
        result["bitwise_equal"] == result["expected"] == len(state),
        f"{result['bitwise_equal']} of {result['expected']} tensors, in {result['devices']}",
    )
    stage.check("announced dtype and shape", result["announced_dtype_and_shape"] == len(state), "every tensor")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(stage_main("ipc", run))
