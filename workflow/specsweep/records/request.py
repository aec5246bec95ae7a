"""The record of one request as the client saw it: the unit every section statistic is made of."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestRecord:
    """One request as the client saw it; times are seconds since the section started.

    ``chunk_t``/``chunk_tokens``: arrival time of every stream event that carried tokens and how
    many tokens it carried, by the server's own running count (several under speculation).
    """

    section: str
    index: int
    prompt_tokens: int
    output_tokens: int
    t_scheduled: float
    t_send: float
    t_first_token: float
    t_end: float
    chunk_t: tuple[float, ...]
    chunk_tokens: tuple[int, ...]
    server_predicted_per_second: float | None
    draft_tokens: int
    draft_accepted: int
    repeat: int = 0
    verify_steps: int | None = None  # verification forward passes, where the server reports them
    prompt_sha256: str | None = None  # identity of the prompt sent (prompts.prompt_id of its token ids)

    @property
    def schedule_lag_s(self) -> float:
        """How late the client sent the request against its schedule (client-side queueing)."""
        return self.t_send - self.t_scheduled

    @property
    def ttft_s(self) -> float:
        return self.t_first_token - self.t_send

    @property
    def e2e_s(self) -> float:
        return self.t_end - self.t_send

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first."""
        if self.output_tokens < 2:
            return None
        return (self.t_end - self.t_first_token) / (self.output_tokens - 1)

    @property
    def decode_tok_s(self) -> float | None:
        """Tokens after the first over the time after the first token; None for 1 token."""
        span = self.t_end - self.t_first_token
        if self.output_tokens < 2 or span <= 0:
            return None
        return (self.output_tokens - 1) / span

    @property
    def itl_s(self) -> list[float]:
        """Gaps between consecutive token-carrying events: what a reader of the stream waits."""
        return [b - a for a, b in zip(self.chunk_t, self.chunk_t[1:])]
