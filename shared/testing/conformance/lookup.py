"""What the dispatch core and Access rely on from their lookups, held by the fakes of
delayq.testing.fakes and by the real classes alike:

- a topic's callback service is found as it was registered, by another node too, and a disabled
  one is found disabled (the dispatcher decides what to do with its tasks), an unknown one is None;
  only an enabled one is got (the submit path), a refusal saying whether the topic is disabled;
- a topic's flow controls read as an operator set them, and every registered topic has some;
- an exchange delayq can route by is usable (None), one of another type is unusable with a
  reason, listed by `unusable()` and checked again within the first back-off;
- the clients load with the version they were read at, and a change moves the version;
- the tenants load with their quotas and the topics given to them; a topic's live tasks are
  counted, topics with none left out.
"""
from __future__ import annotations

import uuid

import pytest

from delayq.access.grants import Permission
from delayq.errors import UnknownTopic
from delayq.nodes.validation import ServiceSpec
from delayq.store.controls import NONE as NO_CONTROLS
from delayq.store.tenants import Tenant
from delayq.testing.conformance.lookups import Lookups

FIRST_BACKOFF_S = 2.0       # delayq.nodes.amqp.exchanges: an unusable exchange's first re-check


def topic() -> str:
    return f"conformance.{uuid.uuid4().hex[:10]}"


class LookupExpectations:
    """Run by a test class that provides the fixture `lookups`, a Lookups."""

    def test_a_service_is_found_as_another_node_registered_it(self, lookups: Lookups):
        name = topic()
        assert lookups.services.find(name) is None
        spec = ServiceSpec(name, "billing", "invoices.due", max_retries=5, backoff="fixed", retry_backoff_ms=200,
                           retry_backoff_max_ms=400, ttr_ms=0, dead_letter_exchange="billing.dead",
                           misfire_threshold_ms=30_000, misfire_policy="fail")
        lookups.register(spec)
        assert lookups.services.find(name) == spec

    def test_a_disabled_service_is_found_disabled(self, lookups: Lookups):
        spec = ServiceSpec(topic(), "delayq", "r", enabled=False)
        lookups.register(spec)
        found = lookups.services.find(spec.topic)
        assert found is not None and not found.enabled

    def test_only_an_enabled_service_is_got_and_a_refusal_says_which_it_is(self, lookups: Lookups):
        enabled, disabled = ServiceSpec(topic(), "delayq", "r"), ServiceSpec(topic(), "delayq", "r", enabled=False)
        for spec in (enabled, disabled):
            lookups.register(spec)
        assert lookups.services.get(enabled.topic) == enabled
        for name, said_disabled in ((disabled.topic, True), (topic(), False)):
            with pytest.raises(UnknownTopic) as refused:
                lookups.services.get(name)
            assert (refused.value.topic, refused.value.disabled) == (name, said_disabled)

    def test_a_topics_flow_controls_read_as_set_and_every_topic_has_some(self, lookups: Lookups):
        limited, free = ServiceSpec(topic(), "delayq", "r"), ServiceSpec(topic(), "delayq", "r")
        for spec in (limited, free):
            lookups.register(spec)
        lookups.set_controls(limited.topic, {"max_fire_rate": 50.0, "max_in_flight": 3, "paused": True})
        set_ = lookups.services.controls(limited.topic)
        assert (set_.max_fire_rate, set_.max_in_flight, set_.paused) == (50.0, 3, True)
        assert not lookups.services.controls(free.topic).limited
        assert lookups.services.controls(topic()) == NO_CONTROLS
        every = lookups.services.all_controls()
        assert every[limited.topic] == set_ and not every[free.topic].limited

    def test_an_exchange_of_another_type_is_unusable_and_checked_again_soon(self, lookups: Lookups):
        name = lookups.unroutable_exchange()
        why = lookups.exchanges.verdict(name)
        assert why
        assert lookups.exchanges.unusable().get(name) == why
        assert 0 < lookups.exchanges.retry_in(name) <= FIRST_BACKOFF_S

    def test_a_topic_exchange_is_usable(self, lookups: Lookups):
        assert lookups.exchanges.verdict("delayq") is None
        assert "delayq" not in lookups.exchanges.unusable()

    def test_clients_load_at_their_version_and_a_change_moves_it(self, lookups: Lookups):
        before = lookups.clients.version()
        assert lookups.clients.load()[0] == before
        name = f"c-{uuid.uuid4().hex[:8]}"
        lookups.add_client(name, (("submit", "orders.*"),))
        version, clients = lookups.clients.load()
        assert version == lookups.clients.version() != before
        assert (clients[name].revoked, set(clients[name].grants)) == (False, {(Permission.SUBMIT, "orders.*")})

    def test_tenants_load_with_their_quotas_and_topics(self, lookups: Lookups):
        mine, theirs = topic(), topic()
        for name in (mine, theirs):
            lookups.register(ServiceSpec(name, "delayq", "r"))
        name = f"t-{uuid.uuid4().hex[:8]}"
        lookups.add_tenant(Tenant(name, max_pending=10, max_submit_rate=2.5), [mine])
        tenants, topics = lookups.tenants.load()
        assert tenants[name] == Tenant(name, max_pending=10, max_submit_rate=2.5)
        assert (topics.get(mine), topics.get(theirs)) == (name, None)

    def test_a_topics_live_tasks_are_counted_and_topics_with_none_left_out(self, lookups: Lookups):
        busy, idle = topic(), topic()
        for name in (busy, idle):
            lookups.register(ServiceSpec(name, "delayq", "r"))
        lookups.submit(busy, 3)
        assert lookups.tenants.pending([busy, idle]) == {busy: 3}
        assert lookups.tenants.pending([]) == {}
