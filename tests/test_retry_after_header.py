"""Reading a ``Retry-After`` value a server sent: whatever the text, the reader returns the seconds
to wait (>= 0 and within the engine's range) or raises its one documented ``ValueError``; no other
exception escapes, so that an HTTP adapter can treat every hostile value as absent."""

from __future__ import annotations

import datetime
import math

import pytest
from aiotb import _params
from aiotb._core import MAX_SPAN
from hypothesis import given
from hypothesis import strategies as st
from profiles import hypothesis_settings

NOW = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.timezone.utc)
NOT_A_WAIT = r"^value must be (delta-seconds or an HTTP date|below \d+ s \(about 9 years\)), got "

HOSTILE = [
    "Mon, 01 Jan 99999999999999999999 00:00:00 GMT",  # a year no C long holds
    "Mon, 01 Jan 99999 00:00:00 GMT",
    "Mon, 01 Jan 2026 00:00:00 +9999",
    "Mon, 01 Jan 2026 99999999999999999999:00:00 GMT",
    "Mon, 99999999999999999999 Jan 2026 00:00:00 GMT",
    "Fri, 31 Dec 9999 23:59:59 -2359",  # past the engine's range
    "9" * 5000,
    "-1",
    "nan",
    "inf",
    "1e400",
    "",
    "   ",
    "\u0661\u0662",  # Arabic-Indic digits: no delta-seconds
    "\u00a0",
]


def read(value: str | bytes) -> float | None:
    """The seconds value asks, or None where the reader refused it with its own ValueError."""
    try:
        span = _params.retry_after(value, NOW)
    except ValueError as error:
        assert type(error) is ValueError
        assert "value must be" in str(error)
        return None
    assert isinstance(span, float)
    assert 0 <= span < MAX_SPAN / 1e9 and not math.isnan(span)
    return span


@pytest.mark.parametrize("value", HOSTILE, ids=lambda value: repr(value[:30]))
def test_a_hostile_value_is_refused_with_the_documented_error(value):
    with pytest.raises(ValueError, match=NOT_A_WAIT) as caught:
        _params.retry_after(value, NOW)
    assert type(caught.value) is ValueError
    assert len(str(caught.value)) < 200  # a huge header is not copied whole into the message


@pytest.mark.parametrize("value, seconds", [
    ("120", 120.0),
    (" 1.5 ", 1.5),
    (b"7", 7.0),
    ("Sun, 01 Mar 2026 12:01:00 GMT", 60.0),
    ("Sun, 01 Mar 2026 11:00:00 GMT", 0.0),  # in the past: no wait
    ("Mon, 01 Jan 0001 00:00:00 GMT", 0.0),
])
def test_valid_values_are_still_read(value, seconds):
    assert _params.retry_after(value, NOW) == seconds


@hypothesis_settings(fast=300, long=20_000)
@given(st.text())
def test_any_text_is_a_wait_or_the_documented_error(text):
    read(text)


@hypothesis_settings(fast=100, long=5_000)
@given(st.binary())
def test_any_bytes_are_a_wait_or_the_documented_error(data):
    read(data)


NUMBERS = st.one_of(st.integers(min_value=-(10**30), max_value=10**30).map(str),
                    st.sampled_from(["00", "9999", "99999", "0", "-0", "+1", "1_0"]))
DATES = st.builds(
    "{}, {} {} {} {}:{}:{} {}".format,
    st.sampled_from(["Mon", "Sun", "Xyz", ""]),
    NUMBERS,
    st.sampled_from(["Jan", "Feb", "Dec", "Foo"]),
    NUMBERS, NUMBERS, NUMBERS, NUMBERS,
    st.one_of(st.sampled_from(["GMT", "UTC", "-0000", "EST", "Z", ""]), NUMBERS,
              st.integers(min_value=-(10**9), max_value=10**9).map("{:+05d}".format)),
)


@hypothesis_settings(fast=300, long=20_000)
@given(DATES)
def test_any_date_shaped_text_is_a_wait_or_the_documented_error(text):
    read(text)
