"""Host reads answered by a rule say what they assumed (capture/hostreads.py)."""

from __future__ import annotations

from cachalot.capture import hostreads


def test_every_rule_says_what_it_assumes():
    for suffix, code, _answer in hostreads.RULES:
        assert code in hostreads.ASSUMED, f"{suffix}: {code} has no assumption to report"


def test_an_answered_read_names_its_site_and_the_value_assumed():
    reads = hostreads.HostReads()
    mask = '(model_kwargs["attention_mask"] == 1).all()'
    reads.answered[f"{hostreads._HF_GEN}: {mask}"] += 3
    reads.unanswered["train.py:12: if loss.item() > 4:"] += 2
    answered, unanswered = reads.warnings()
    assert "3 host reads" in answered and mask in answered, answered
    assert "all ones" in answered and "under-predicts" in answered, answered
    assert "train.py:12" in unanswered and "2x" in unanswered and "was 0" in unanswered
