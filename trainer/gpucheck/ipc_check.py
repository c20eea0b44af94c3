"""gpu-check stage `ipc` (CUDA only): the learner's colocated weight export (`WeightExport.ipc_info`, what
`LearnerWorker.export_ipc` sends per chunk) from an FSDP2 learner on a one-rank NCCL group, rebuilt in a
second process exactly as vLLM's ipc engine rebuilds it (`trainer.gpucheck.ipc_receiver`): every tensor
bitwise equal to the learner's parameters cast to bf16, with the dtype and shape the update announced.
The exporter keeps its copies alive until the receiver is done, then releases them (`export_end`). The
receiver's time limit is what is left of the stage's less a margin, so the stage can always record what
the receiver did; its whole traceback goes into this stage's log.
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
RECEIVER_MARGIN_S = 10.0
"""Kept back from the stage's limit when the receiver is started (the stage then writes its record)."""
RECEIVER_MAX_S = 120.0
"""The receiver's limit when the stage has no limit of its own."""


def receiver_timeout(time_left: float) -> float:
    """The receiver's time limit given the stage's time left: that less `RECEIVER_MARGIN_S`, at most
    `RECEIVER_MAX_S` (always below the stage's limit)."""
    return min(time_left - RECEIVER_MARGIN_S, RECEIVER_MAX_S)


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
    timeout = receiver_timeout(stage.time_left())
    if timeout < 5:
        stage.check("receiver ran", False, f"not started: {stage.time_left():.0f} s left in the stage")
        return
    try:
        done = subprocess.run(receiver, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        _keep_output("receiver (timed out)", exc.stdout, exc.stderr)
        stage.check("receiver ran", False, f"timed out after {timeout:.0f} s (its output is in this stage's log)")
        return
    finally:
        export.release()  # after the receiver finished, as LearnerWorker.export_end after finish_weight_update
    _keep_output("receiver", done.stdout, done.stderr)
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        stage.check("receiver ran", False, f"exit {done.returncode}: {lines[-1] if lines else 'no output'}")
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


def _keep_output(what: str, stdout: str | bytes | None, stderr: str | bytes | None) -> None:
    """The receiver's output (a traceback, say) into this stage's log."""
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        text = text.decode(errors="replace") if isinstance(text, bytes) else text or ""
        if text.strip():
            print(f"--- {what} {name} ---\n{text.rstrip()}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(stage_main("ipc", run))
