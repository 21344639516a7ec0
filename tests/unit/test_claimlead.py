"""Unit tests for how far ahead of their due time the prompt lane claims tasks
(delayq.nodes.dispatch.claimlead): the configured lead while claims are quick, longer while they are slow."""
from __future__ import annotations

from delayq.nodes.dispatch.claimlead import RECENT, ClaimLead


def test_the_claim_lead_is_the_configured_one_while_claims_are_quick():
    lead = ClaimLead(20, max_ms=250)
    assert lead.ms == 20
    for took in (2.0, 3.0, 12.0):
        lead.claimed(took)
    assert lead.ms == 20


def test_the_claim_lead_follows_the_slowest_recent_claim_up_to_its_limit_and_back():
    lead = ClaimLead(20, max_ms=250)
    lead.claimed(60.0)
    assert lead.ms == 90
    lead.claimed(400.0)
    assert lead.ms == 250
    for _ in range(RECENT):
        lead.claimed(2.0)
    assert lead.ms == 20
