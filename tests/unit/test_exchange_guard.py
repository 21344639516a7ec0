"""ExchangeGuard's cached verdicts and re-check schedule, with an injected clock and examiner."""
import logging

import pika.exceptions

from delayq.nodes.amqp.exchanges import ExchangeGuard

FANOUT = "it is a fanout exchange"


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Broker:
    """Answers checks from a table (None: usable; an exception instance: raised); counts them."""

    def __init__(self, **answers):
        self.answers, self.calls = answers, []

    def __call__(self, exchange):
        self.calls.append(exchange)
        answer = self.answers[exchange]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _guard(broker, clock, recheck_s=30.0):
    return ExchangeGuard(None, recheck_s=recheck_s, monotonic=clock, examine=broker)


def test_a_usable_exchange_is_checked_once_then_again_after_the_recheck_interval():
    clock, broker = Clock(), Broker(good=None)
    guard = _guard(broker, clock)
    assert guard.verdict("good") is None
    assert guard.verdict("good") is None
    assert broker.calls == ["good"]
    assert guard.retry_in("good") == 30.0
    clock.now += 29.9
    guard.refresh()
    assert broker.calls == ["good"]
    clock.now += 0.1
    guard.refresh()
    assert broker.calls == ["good", "good"]


def test_an_unusable_exchange_backs_off_from_2_s_doubling_to_the_recheck_interval():
    clock, broker = Clock(), Broker(bad=FANOUT)
    guard = _guard(broker, clock, recheck_s=10.0)
    assert guard.verdict("bad") == FANOUT
    waits = []
    for _ in range(5):
        waits.append(guard.retry_in("bad"))
        clock.now += waits[-1]
        guard.refresh()
    assert waits == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert len(broker.calls) == 6
    assert guard.unusable() == {"bad": FANOUT}


def test_a_fixed_exchange_is_usable_again_and_its_backoff_starts_over_if_it_goes_bad_again():
    clock, broker = Clock(), Broker(ex=FANOUT)
    guard = _guard(broker, clock)
    guard.check("ex")
    clock.now += guard.retry_in("ex")
    guard.refresh()                                 # 4 s backoff now
    broker.answers["ex"] = None
    clock.now += guard.retry_in("ex")
    guard.refresh()
    assert guard.verdict("ex") is None and guard.unusable() == {}
    assert guard.retry_in("ex") == 30.0
    broker.answers["ex"] = FANOUT
    assert guard.check("ex") == FANOUT
    assert guard.retry_in("ex") == 2.0


def test_one_warning_per_change_of_verdict(caplog):
    clock, broker = Clock(), Broker(bad=FANOUT)
    guard = _guard(broker, clock)
    with caplog.at_level(logging.INFO, logger="delayq.nodes.amqp.exchanges"):
        for _ in range(5):
            guard.check("bad")
        broker.answers["bad"] = None
        guard.check("bad")
        guard.check("bad")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(warnings) == 1 and "fanout" in warnings[0].getMessage()
    assert len(infos) == 1 and "usable again" in infos[0].getMessage()


def test_forget_rechecks_only_the_exchange_rabbitmq_named():
    clock, broker = Clock(), Broker(a=None, b=None)
    guard = _guard(broker, clock)
    guard.verdict("a"), guard.verdict("b")
    guard.forget("(404, \"NOT_FOUND - no exchange 'a' in vhost '/'\")")
    guard.verdict("a"), guard.verdict("b")
    assert broker.calls == ["a", "b", "a"]
    guard.forget("(320, 'CONNECTION_FORCED')")
    guard.verdict("a")
    assert broker.calls == ["a", "b", "a"]


def test_while_rabbitmq_is_unreachable_verdicts_stand_and_are_retried_every_2_s_with_one_warning(caplog):
    clock, broker = Clock(), Broker(bad=FANOUT, new=None)
    guard = _guard(broker, clock)
    guard.check("bad")
    down = pika.exceptions.AMQPConnectionError("refused")
    broker.answers.update(bad=down, new=down)
    with caplog.at_level(logging.INFO, logger="delayq.nodes.amqp.exchanges"):
        assert guard.verdict("new") is None           # unknown while nothing can be published
        for _ in range(10):
            clock.now += 1.0
            guard.refresh()
        assert guard.unusable() == {"bad": FANOUT}
        assert len(broker.calls) <= 1 + 1 + 2 * 5     # every 2 s, not every refresh
        broker.answers.update(bad=None, new=None)
        clock.now += 2.0
        guard.refresh()
    assert guard.unusable() == {}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("unreachable" in w for w in warnings) == 1
