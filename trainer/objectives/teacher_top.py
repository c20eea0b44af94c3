"""The teacher's most likely next tokens at each of the student's reply tokens, and the forward KL over them
(`token_kl: forward`, docs/design/053): at a position with the teacher's top-k tokens j and log-probs l_j,

    KL_k(p_T || p_S) = sum_j q_j (log q_j - log p_S(j)),   q = softmax(l) over the k tokens,

the teacher's distribution renormalised over its k most likely tokens, as soft labels on the student's own states.
Its gradient on the student's logits is p_S - q on the k tokens (and p_S elsewhere): the teacher's choice rises by
its whole gap whether or not the student sampled it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TeacherTop:
    """(N, S, k) token ids and log-probs of the teacher's k most likely tokens predicting each position of a batch,
    and (N, S) where they were scored (0 and False elsewhere)."""

    ids: torch.Tensor
    logp: torch.Tensor
    scored: torch.Tensor

    def to(self, device: torch.device | str) -> TeacherTop:
        """A copy on `device`."""
        return TeacherTop(self.ids.to(device), self.logp.to(device), self.scored.to(device))

    def rows(self, part: slice) -> TeacherTop:
        """The rows `part`."""
        return TeacherTop(self.ids[part], self.logp[part], self.scored[part])

    def narrow(self, rows: slice, width: int) -> TeacherTop:
        """The rows `rows` up to position `width` (a learner micro-batch)."""
        return TeacherTop(self.ids[rows, :width], self.logp[rows, :width], self.scored[rows, :width])

    @property
    def k(self) -> int:
        """Tokens per position."""
        return int(self.ids.shape[-1])


def teacher_top_tensors(
    rows: int, width: int, spans: Sequence[tuple[int, int, list[list[tuple[int, float]]]]]
) -> TeacherTop:
    """`TeacherTop` of an (N = `rows`, S = `width`) batch from (row, start position, per-token top pairs) spans; every
    position of a span must carry the same number of pairs."""
    k = max((len(top) for _, _, tops in spans for top in tops), default=1)
    ids = torch.zeros((rows, width, k), dtype=torch.long)
    logp = torch.zeros((rows, width, k), dtype=torch.float32)
    scored = torch.zeros((rows, width), dtype=torch.bool)
    for row, start, tops in spans:
        if any(len(top) != k for top in tops):
            raise ValueError(f"every position needs the teacher's {k} top tokens")
        if not tops:
            continue
        end = start + len(tops)
        ids[row, start:end] = torch.tensor([[tok for tok, _ in top] for top in tops], dtype=torch.long)
        logp[row, start:end] = torch.tensor([[lp for _, lp in top] for top in tops], dtype=torch.float32)
        scored[row, start:end] = True
    return TeacherTop(ids, logp, scored)


def forward_kl_over_top(
    student_log_softmax: torch.Tensor, top_ids: torch.Tensor, top_logp: torch.Tensor
) -> torch.Tensor:
    """KL_k(p_T || p_S) per position: `student_log_softmax` (P, V), the teacher's `top_ids` and `top_logp` (P, k).
    Returns (P,)."""
    target = torch.log_softmax(top_logp.float(), dim=-1)
    student = student_log_softmax.gather(-1, top_ids)
    return (target.exp() * (target - student)).sum(-1)
