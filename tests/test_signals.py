"""Reading what a response's headers say of the server's rate limit: each style as servers send it, the
server's Date against a skewed local clock, and hostile headers, which are ignored, never raised."""

from __future__ import annotations

import dataclasses
import datetime
import math

import pytest
from aiotb import _signals
from aiotb._signals import EPOCH_FROM, LONGEST_WAIT, MOST, QUOTAS, Quota, Signals, read_quota, read_signals
from hypothesis import given
from hypothesis import strategies as st
from profiles import hypothesis_settings

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
EPOCH_NOW = int(NOW.timestamp())


def test_no_headers_and_unrelated_headers_say_nothing():
    for headers in ({}, [], {"Content-Type": "application/json", "Date": "Sat, 28 Nov 2026 12:00:00 GMT",
                              "X-Request-Id": "req_123"}):
        signals = read_signals(headers, NOW)
        assert not signals
        assert signals == Signals()


def test_anything_read_makes_the_result_truthy():
    assert read_signals({"Retry-After": "0"}, NOW)
    assert read_signals({"X-RateLimit-Remaining": "0"}, NOW)


def test_the_local_clock_is_read_only_for_an_absolute_instant_without_the_servers_date():
    calls: list[int] = []

    def clock() -> datetime.datetime:
        calls.append(1)
        return NOW

    assert read_signals({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "30"}, clock).requests == Quota(3, 30, None)
    assert read_signals({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": str(EPOCH_NOW + 30),
                         "Date": "Sat, 28 Nov 2026 11:59:00 GMT"}, clock).requests == Quota(3, 90, None)
    assert calls == []
    assert read_signals({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": str(EPOCH_NOW + 30)},
                        clock).requests == Quota(3, 30, None)
    assert calls == [1]


def test_github_epoch_reset():
    headers = {"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4987", "X-RateLimit-Used": "13",
               "X-RateLimit-Reset": str(EPOCH_NOW + 1800), "X-RateLimit-Resource": "core"}
    assert read_signals(headers, NOW) == Signals(requests=Quota(4987.0, 1800.0, 5000.0))


@pytest.mark.parametrize("reset, seconds", [
    ("60", 60.0),
    ("0", 0.0),
    ("12.5", 12.5),
    (str(int(LONGEST_WAIT)), LONGEST_WAIT),
    (str(int(LONGEST_WAIT) + 1), None),  # a delta beyond a year is absurd
    (str(int(EPOCH_FROM) - 1), None),  # still a delta: 31 years
    (str(int(EPOCH_FROM)), 0.0),  # an epoch instant, in 2001: past
    (f"{EPOCH_NOW + 42}.25", 42.25),
    (str(EPOCH_NOW - 5), 0.0),
    (str(EPOCH_NOW + int(LONGEST_WAIT) + 10), None),
    ("1" + "0" * 400, None),
])
def test_x_ratelimit_reset_is_delta_below_the_epoch_threshold_and_an_instant_from_it(reset, seconds):
    headers = {"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": reset}
    assert read_signals(headers, NOW).requests == Quota(3.0, seconds, None)


def test_openai_requests_and_tokens():
    headers = {"x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "9999",
               "x-ratelimit-reset-requests": "6ms", "x-ratelimit-limit-tokens": "2000000",
               "x-ratelimit-remaining-tokens": "1999832", "x-ratelimit-reset-tokens": "5ms"}
    signals = read_signals(headers, NOW)
    assert signals.requests == Quota(9999.0, 0.006, 10000.0)
    assert signals.tokens == Quota(1999832.0, 0.005, 2000000.0)
    assert signals.input_tokens is None and signals.retry_after is None


@pytest.mark.parametrize("duration, seconds", [
    ("6m0s", 360.0), ("1m30s", 90.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.5s", 0.5), ("7.66s", 7.66),
    ("250us", 0.00025), ("1m", 60.0), ("2", 2.0), ("0s", 0.0),
    ("", None), ("s", None), ("1x", None), ("-1s", None), ("1m-3s", None), ("1 m", None), ("9999h", None),
    ("nan", None), ("inf", None), ("1e3s", None), ("\u0661s", None),
])
def test_openai_go_durations(duration, seconds):
    headers = {"x-ratelimit-remaining-requests": "1", "x-ratelimit-reset-requests": duration}
    expected = None if seconds is None else pytest.approx(seconds)
    assert read_signals(headers, NOW).requests == Quota(1.0, expected, None)


def test_anthropic_every_quota_with_rfc3339_resets():
    headers = {
        "anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": "2026-11-28T12:00:01Z",
        "anthropic-ratelimit-tokens-limit": "90000", "anthropic-ratelimit-tokens-remaining": "88000",
        "anthropic-ratelimit-tokens-reset": "2026-11-28T12:00:30Z",
        "anthropic-ratelimit-input-tokens-limit": "40000", "anthropic-ratelimit-input-tokens-remaining": "39000",
        "anthropic-ratelimit-input-tokens-reset": "2026-11-28T13:00:02.5+01:00",
        "anthropic-ratelimit-output-tokens-limit": "8000", "anthropic-ratelimit-output-tokens-remaining": "7000",
        "anthropic-ratelimit-output-tokens-reset": "2026-11-28T11:59:00Z",  # past: reset already
        "retry-after": "12",
    }
    assert read_signals(headers, NOW) == Signals(
        requests=Quota(49.0, 1.0, 50.0), tokens=Quota(88000.0, 30.0, 90000.0),
        input_tokens=Quota(39000.0, 2.5, 40000.0), output_tokens=Quota(7000.0, 0.0, 8000.0), retry_after=12.0)


@pytest.mark.parametrize("instant", ["2026-11-28", "2026-11-28T12:00:30", "tomorrow", "2026-13-28T12:00:30Z",
                                     "1764331230", "9999-12-31T23:59:59Z"])
def test_anthropic_reset_without_an_offset_or_malformed_is_ignored(instant):
    headers = {"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": instant}
    assert read_signals(headers, NOW).requests == Quota(0.0, None, None)


def test_the_draft_field_with_its_policy():
    headers = {"RateLimit": '"default";r=50;t=30', "RateLimit-Policy": '"default";q=100;w=60'}
    assert read_signals(headers, NOW) == Signals(requests=Quota(50.0, 30.0, 100.0))


def test_the_draft_cloudflare_style_lower_case_names_and_a_partition_key():
    headers = [("ratelimit", '"default";r=7;t=52;pk=:dXNlcjE=:'), ("ratelimit-policy", '"default";q=10;w=60')]
    assert read_signals(headers, NOW).requests == Quota(7.0, 52.0, 10.0)


def test_several_draft_policies_the_least_remaining_wins_with_its_reset_and_quota():
    headers = [("RateLimit-Policy", '"burst";q=100;w=60, "daily";q=1000;w=86400'),
               ("RateLimit", '"burst";r=80;t=40'), ("RateLimit", '"daily";r=7;t=3600')]
    assert read_signals(headers, NOW).requests == Quota(7.0, 3600.0, 1000.0)


def test_several_draft_policies_equal_remaining_the_later_reset_wins():
    headers = {"RateLimit": '"minute";r=0;t=20, "hour";r=0;t=1200, "other";r=0'}
    assert read_signals(headers, NOW).requests == Quota(0.0, 1200.0, None)


@pytest.mark.parametrize("field, quota", [
    ('"a";r=5;t=10, "b";r=-1;t=1, "c";r=nope, "d";t=3', Quota(5.0, 10.0, None)),  # malformed members left out
    ('"a";r=5;t=10, "b";r=2;t=1;', Quota(5.0, 10.0, None)),  # a trailing ";" spoils its member only
    ('"a";r=5;t=-3', Quota(5.0, None, None)),
    ('"a, b";r=4;t=8', Quota(4.0, 8.0, None)),  # a comma inside a string splits nothing
    ('"a";r=5;t=10, "open;r=1', None),  # a string left open spoils the whole field
    ("default;r=3;t=9", Quota(3.0, 9.0, None)),  # a token name, leniently
    ("r=3, t=9", None),
])
def test_malformed_draft_members(field, quota):
    assert read_signals({"RateLimit": field}, NOW).requests == quota


def test_a_draft_policy_counted_in_bytes_is_no_request_quota():
    headers = {"RateLimit-Policy": '"bytes";q=65536;qu="content-bytes";w=10, "calls";q=10;w=1',
               "RateLimit": '"bytes";r=0;t=5, "calls";r=3;t=1'}
    assert read_signals(headers, NOW).requests == Quota(3.0, 1.0, 10.0)


def test_older_drafts_separate_fields():
    headers = {"RateLimit-Limit": "100, 100;w=60", "RateLimit-Remaining": "50", "RateLimit-Reset": "30"}
    assert read_signals(headers, NOW).requests == Quota(50.0, 30.0, 100.0)


def test_several_styles_at_once_the_most_restrictive_wins_whole():
    headers = {"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "12", "X-RateLimit-Reset": "45",
               "RateLimit": '"default";r=9;t=20', "RateLimit-Policy": '"default";q=30;w=60',
               "RateLimit-Remaining": "10", "RateLimit-Reset": "50"}
    assert read_signals(headers, NOW).requests == Quota(9.0, 20.0, 30.0)


def test_date_corrects_a_skewed_local_clock_for_absolute_instants():
    server = "Sat, 28 Nov 2026 11:50:00 GMT"  # the local clock is 10 minutes ahead of the server's
    headers = {"Date": server, "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(EPOCH_NOW - 600 + 30),
               "anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": "2026-11-28T11:50:45Z",
               "Retry-After": "Sat, 28 Nov 2026 11:51:00 GMT"}
    signals = read_signals(headers, NOW)
    assert signals.requests == Quota(0.0, 30.0, None)
    assert signals.tokens == Quota(0.0, 45.0, None)
    assert signals.retry_after == 60.0
    skewed = {name: value for name, value in headers.items() if name != "Date"}
    assert read_signals(skewed, NOW) == Signals(requests=Quota(0.0, 0.0, None), tokens=Quota(0.0, 0.0, None),
                                                retry_after=0.0)


def test_date_does_not_move_delta_seconds_and_a_malformed_date_is_the_local_clock():
    headers = {"Date": "Sat, 28 Nov 2026 11:00:00 GMT", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "30",
               "Retry-After": "15"}
    assert read_signals(headers, NOW) == Signals(requests=Quota(1.0, 30.0, None), retry_after=15.0)
    headers = {"Date": "yesterday", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": str(EPOCH_NOW + 30)}
    assert read_signals(headers, NOW).requests == Quota(1.0, 30.0, None)


@pytest.mark.parametrize("value, seconds", [
    ("120", 120.0), ("1.5", 1.5), ("Sat, 28 Nov 2026 12:02:00 GMT", 120.0), ("Sat, 28 Nov 2026 11:00:00 GMT", 0.0),
    ("-1", None), ("soon", None), ("nan", None), ("99999999999", None), ("Mon, 01 Jan 2029 00:00:00 GMT", None),
])
def test_retry_after(value, seconds):
    assert read_signals({"Retry-After": value, "X-RateLimit-Remaining": "2"}, NOW) == Signals(
        requests=Quota(2.0, None, None), retry_after=seconds)


def test_byte_names_and_values_and_mixed_case_names():
    raw = [(b"X-RATELIMIT-LIMIT", b"60"), (b"x-RateLimit-Remaining", b" 59 "), (b"X-Ratelimit-Reset", b"60"),
           (b"RETRY-AFTER", b"3"), ("x-ratelimit-remaining-TOKENS", b"900"), (b"X-RateLimit-Reset-Tokens", "1s")]
    assert read_signals(raw, NOW) == Signals(requests=Quota(59.0, 60.0, 60.0), tokens=Quota(900.0, 1.0, None),
                                             retry_after=3.0)


def test_a_mapping_and_pairs_read_the_same():
    pairs = [("RateLimit", '"default";r=50;t=30'), ("RateLimit-Policy", '"default";q=100;w=60'),
             ("Retry-After", "5")]
    assert read_signals(dict(pairs), NOW) == read_signals(pairs, NOW) == Signals(
        requests=Quota(50.0, 30.0, 100.0), retry_after=5.0)


@pytest.mark.parametrize("remaining", ["-1", "nan", "inf", "-inf", "1e3", "", "ten", "9" * 400, str(2**53 + 2),
                                       "0x10", "+5", "5 requests", "\u0665"])
def test_a_malformed_value_is_ignored_and_the_rest_still_read(remaining):
    headers = {"X-RateLimit-Remaining": remaining, "X-RateLimit-Limit": "60", "X-RateLimit-Reset": "30",
               "x-ratelimit-remaining-tokens": "100", "Retry-After": "4"}
    assert read_signals(headers, NOW) == Signals(tokens=Quota(100.0, None, None), retry_after=4.0)


def test_the_largest_count_is_read():
    assert read_signals({"X-RateLimit-Remaining": str(2**53)}, NOW).requests == Quota(MOST, None, None)


def test_entries_that_are_no_pairs_of_text_are_skipped():
    headers = [("X-RateLimit-Remaining",), ("X-RateLimit-Remaining", 5), 7, ("Retry-After", "2", "x"),
               (None, "1"), ("X-RateLimit-Remaining", "8")]
    assert read_signals(headers, NOW) == Signals(requests=Quota(8.0, None, None))


def test_the_result_is_immutable():
    signals = read_signals({"Retry-After": "1"}, NOW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        signals.retry_after = 2.0


def test_a_naive_now_is_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        read_signals({}, NOW.replace(tzinfo=None))


def test_times_are_against_the_given_now():
    later = NOW + datetime.timedelta(seconds=10)
    headers = {"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": str(EPOCH_NOW + 30)}
    assert read_signals(headers, later).requests == Quota(1.0, 20.0, None)


KNOWN_NAMES = [
    "ratelimit", "ratelimit-policy", "ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "x-ratelimit-limit",
    "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after", "date",
    *(f"x-ratelimit-{what}-{kind}" for what in ("limit", "remaining", "reset") for kind in ("requests", "tokens")),
    *(f"anthropic-ratelimit-{kind}-{what}" for what in ("limit", "remaining", "reset")
      for kind in ("requests", "tokens", "input-tokens", "output-tokens")),
]
NUMBERS = st.one_of(st.integers(min_value=0, max_value=2 * 10**9).map(str),
                    st.integers(min_value=EPOCH_NOW - 100, max_value=EPOCH_NOW + 100_000).map(str),
                    st.floats(min_value=0, max_value=1e6).map("{:.3f}".format),
                    st.floats(allow_nan=True, allow_infinity=True).map(str),
                    st.integers(min_value=-(10**30), max_value=10**30).map(str))
NEAR = st.datetimes(min_value=datetime.datetime(2026, 11, 27), max_value=datetime.datetime(2026, 11, 30))
INSTANTS = st.one_of(st.datetimes(timezones=st.timezones()), NEAR.map(lambda when: when.replace(tzinfo=UTC)),
                     NEAR).map(datetime.datetime.isoformat)
HTTP_DATES = st.one_of(st.datetimes(min_value=datetime.datetime(1, 1, 2)), NEAR).map(
    lambda when: when.strftime("%a, %d %b %Y %H:%M:%S GMT"))
DURATIONS = st.lists(st.tuples(NUMBERS, st.sampled_from(["h", "m", "s", "ms", "us", "µs", "ns", "x", ""])),
                     max_size=4).map(lambda parts: "".join(number + unit for number, unit in parts))
ITEMS = st.builds('"{}";r={};t={};q={};w={};qu={}'.format, st.sampled_from(["default", "a", ""]), NUMBERS, NUMBERS,
                  NUMBERS, NUMBERS, st.sampled_from(['"request"', '"content-bytes"', "?1", ":AA==:", '"']))
LISTS = st.lists(st.one_of(ITEMS, st.text(max_size=20)), max_size=4).map(", ".join)
TEXT_VALUES = st.one_of(NUMBERS, INSTANTS, HTTP_DATES, DURATIONS, LISTS, st.text(max_size=50))


def fitting(name: str) -> st.SearchStrategy[str]:
    """Values of the shape the field name is read as, often well formed, often not."""
    if name in ("ratelimit", "ratelimit-policy"):
        return LISTS
    if name in ("date", "retry-after"):
        return st.one_of(HTTP_DATES, NUMBERS)
    if name.startswith("anthropic-") and name.endswith("-reset"):
        return st.one_of(INSTANTS, st.text(alphabet="0123456789-:TZ.+ ", max_size=30))
    if name.startswith("x-ratelimit-reset-"):
        return DURATIONS
    return NUMBERS


def cased(name: str) -> st.SearchStrategy[str]:
    """The name with each letter in either case."""
    return st.lists(st.booleans(), min_size=len(name), max_size=len(name)).map(
        lambda upper: "".join(c.upper() if u else c for c, u in zip(name, upper)))


FITTING = st.sampled_from(KNOWN_NAMES).flatmap(lambda name: st.tuples(cased(name), fitting(name)))
ANY = st.tuples(st.one_of(st.sampled_from(KNOWN_NAMES).flatmap(cased), st.text(max_size=30)),
                st.one_of(TEXT_VALUES, TEXT_VALUES.map(lambda text: text.encode("utf-8")), st.binary(max_size=40)))
HEADERS = st.lists(st.one_of(FITTING, FITTING, ANY), max_size=16)


def assert_sane(signals: Signals) -> None:
    """Every number read is finite and >= 0, every wait within LONGEST_WAIT, every count within MOST."""
    for quota in (signals.requests, signals.tokens, signals.input_tokens, signals.output_tokens):
        if quota is not None:
            assert isinstance(quota, Quota)
            assert 0 <= quota.remaining <= MOST
            assert quota.limit is None or 0 <= quota.limit <= MOST
            assert quota.reset_after is None or 0 <= quota.reset_after <= LONGEST_WAIT
    assert signals.retry_after is None or 0 <= signals.retry_after <= LONGEST_WAIT
    for field in dataclasses.fields(signals):
        value = getattr(signals, field.name)
        numbers = [] if value is None else [value] if isinstance(value, float) else [x for x in value if x is not None]
        assert all(isinstance(x, float) and math.isfinite(x) for x in numbers)


@hypothesis_settings(fast=400, long=20_000)
@given(HEADERS, st.datetimes(timezones=st.timezones()).filter(lambda when: when.utcoffset() is not None))
def test_random_headers_never_raise_and_read_only_sane_numbers(headers, now):
    assert_sane(read_signals(headers, now))
    assert_sane(read_signals(dict(headers), now))


@hypothesis_settings(fast=200, long=5_000)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 86400)), min_size=1, max_size=6))
def test_several_draft_policies_read_as_the_least_remaining(policies):
    field = ", ".join(f'"p{i}";r={remaining};t={reset}' for i, (remaining, reset) in enumerate(policies))
    least = min(remaining for remaining, _ in policies)
    latest = max(reset for remaining, reset in policies if remaining == least)
    assert read_signals({"RateLimit": field}, NOW).requests == Quota(float(least), float(latest), None)


@hypothesis_settings(fast=400, long=20_000)
@given(HEADERS, st.datetimes(timezones=st.timezones()).filter(lambda when: when.utcoffset() is not None))
def test_reading_one_quota_reads_what_reading_them_all_does(headers, now):
    for pairs in (headers, dict(headers), [(name.encode("utf-8"), value) for name, value in headers]):
        signals = read_signals(pairs, now)
        for quota in QUOTAS:
            assert read_quota(pairs, quota, now) == getattr(signals, quota), (quota, pairs)


def test_names_as_sent_are_remembered_up_to_a_bound_and_read_the_same(monkeypatch):
    monkeypatch.setattr(_signals, "_NAMES", {})
    raw = [(b"x-RateLimit-Remaining", b"7"), ("X-RATELIMIT-RESET", "30"), (b"Server", b"nginx")]
    first = read_signals(raw, NOW)
    assert first == Signals(requests=Quota(7.0, 30.0, None))
    assert _signals._NAMES == {b"x-RateLimit-Remaining": "x-ratelimit-remaining",
                               "X-RATELIMIT-RESET": "x-ratelimit-reset", b"Server": ""}
    assert read_signals(raw, NOW) == first  # read again through what was remembered
    # a server that sends ever new names fills the memory up to its bound, and no further; fields still read
    monkeypatch.setattr(_signals, "NAMES_KEPT", 50)
    for i in range(200):
        headers = [(f"X-Noise-{i}".encode(), b"1"), (f"X-Ratelimit-Remaining{' ' * (i % 3)}".encode(), str(i).encode())]
        assert read_signals(headers, NOW).requests == Quota(float(i), None, None)
    assert len(_signals._NAMES) == 50
