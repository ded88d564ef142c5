"""The worked example (``python -m aiotb.demo api``) prints only what its server recorded, and shows what it
says: on the virtual clock, the client that follows the headers meets no 429 once it has news of a window and
uses most of what the other client left; the one counting alone meets 429s."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

import pytest
from aiotb import demo_api
from virtual_loop import run_virtually

LINE = re.compile(r"(?P<label>[a-z ]+): (?P<answered>\d+) answered, (?P<refused>\d+) refused with 429 "
                  r"\((?P<late>\d+) sent after an answer from their window\); (?P<rate>[\d,]+) tokens/s served, "
                  r"(?P<share>\d+) % of the (?P<left>[\d,]+) tokens the other client left in (?P<windows>\d+) windows")


def test_each_printed_figure_is_the_servers_record(capsys: pytest.CaptureFixture[str]) -> None:
    seconds = 3
    records = run_virtually(demo_api.main(seconds))
    lines = [LINE.fullmatch(line) for line in capsys.readouterr().out.splitlines()[2:]]
    assert len(lines) == len(records) == 2 and all(lines), lines
    for match, answers in zip(lines, records):
        assert match is not None
        ours = [a for a in answers if a.ours]
        admitted = [a for a in ours if a.admitted]
        windows = {a.window for a in answers}
        left = len(windows) * demo_api.TOKENS - sum(a.tokens for a in answers if not a.ours)
        served = sum(a.tokens for a in admitted)
        assert int(match["answered"]) == len(admitted)
        assert int(match["refused"]) == len(ours) - len(admitted)
        assert int(match["late"]) == sum(1 for a in ours if not a.admitted and a.informed)
        assert int(match["rate"].replace(",", "")) == round(served / seconds)
        assert int(match["share"]) == round(100 * served / left)
        assert int(match["left"].replace(",", "")) == left and int(match["windows"]) == len(windows) == 3
        # the server keeps its quota in every window, whoever asks
        for window in windows:
            inside = [a for a in answers if a.window == window and a.admitted]
            assert len(inside) <= demo_api.REQUESTS and sum(a.tokens for a in inside) <= demo_api.TOKENS
    assert [match["label"] for match in lines if match] == ["counting alone", "following the headers"]
    following = records
    counted = Counter((a.admitted, a.informed) for a in following[1] if a.ours)
    assert counted[(False, True)] == 0, counted  # no 429 with news of the window
    refused_alone = sum(1 for a in following[0] if a.ours and not a.admitted)
    assert refused_alone > 0  # the contrast: counting alone, the other client's share is not seen
    ours = [a for a in following[1] if a.ours and a.admitted]
    left = 3 * demo_api.TOKENS - sum(a.tokens for a in following[1] if not a.ours)
    assert sum(a.tokens for a in ours) >= 0.9 * left


@pytest.mark.parametrize("argument", ["0", "61", "x", "2.5", "-1"])
def test_the_demo_refuses_a_run_time_out_of_range_by_name(argument: str) -> None:
    done = subprocess.run([sys.executable, "-m", "aiotb.demo", "api", argument], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and f"SECONDS must be a whole number from 1 to 60, got {argument!r}" in done.stderr


def test_the_server_answers_with_openais_fields() -> None:
    server = demo_api.QuotaServer(start=0.0)
    other = demo_api.OTHER_REQUESTS * demo_api.OTHER_TOKENS  # taken as the window opened
    status, headers = server.admit(0.25, 300, informed=False)
    assert status == 200 and headers["x-ratelimit-remaining-tokens"] == str(demo_api.TOKENS - other - 300)
    assert headers["x-ratelimit-reset-tokens"] == headers["x-ratelimit-reset-requests"] == "750ms"
    assert headers["x-ratelimit-remaining-requests"] == str(demo_api.REQUESTS - demo_api.OTHER_REQUESTS - 1)
    status, headers = server.admit(0.5, demo_api.TOKENS, informed=True)  # does not fit what is left
    assert status == 429 and headers["x-ratelimit-remaining-tokens"] == str(demo_api.TOKENS - other - 300)
    status, headers = server.admit(1.0 - 1e-12, 300, informed=False)  # on the next window's edge: the next one
    assert headers["x-window"] == "1" and headers["x-ratelimit-reset-tokens"] == "1000ms"
    assert [(a.window, a.ours, a.admitted) for a in server.answers] == (
        [(0, False, True)] * 4 + [(0, True, True), (0, True, False)] + [(1, False, True)] * 4 + [(1, True, True)])
