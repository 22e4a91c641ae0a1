"""bench/few_tokens.py on tiny repeats: every row runs, agrees with numpy (each row checks its values
before timing) and lands in the report; nothing is written without --out-prefix."""
from __future__ import annotations

import pytest

from bench import few_tokens


def test_rows_run_agree_and_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(few_tokens, "PAUSE_S", 0.0)
    chain = [few_tokens.chain_row(tokens, "CLANG", repeats=1) for tokens in (1, 7, 33)]
    mlp = [few_tokens.mlp_row(5, "CLANG", repeats=1)]
    for row in (*chain, *mlp):
        assert row["fast_us"] > 0 and row["numpy_us"] > 0 and row["ratio"] > 0
    text = few_tokens.report({"device": "CLANG", "when": "now", "chain": chain, "mlp": mlp})
    assert "| 7 |" in text and "| 33 |" in text and "| 5 |" in text
