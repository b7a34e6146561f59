"""The lookup agent's tool module: settings, the HTTP client against the real stub, the cache
and the latency window."""

from __future__ import annotations

import time

import pytest

from functions.lookup import tool
from infra.local.tool_stub import ToolStub


class FakeClock(list[float]):
    """A monotonic clock the test moves: ``clock()`` is ``clock[0]`` s."""

    def __call__(self) -> float:
        return self[0]


# -- settings ---------------------------------------------------------------------------------
def test_settings_defaults_and_an_unset_url() -> None:
    settings = tool.LookupSettings.from_settings({})
    assert settings.tool_url is None
    assert "LOOKUP_TOOL_URL is not set" in str(settings.url_problem)
    assert (settings.timeout_ms, settings.cache_ttl_s, settings.max_stale_s, settings.cache_size) == (
        tool.DEFAULT_TIMEOUT_MS, tool.DEFAULT_CACHE_TTL_S, tool.DEFAULT_MAX_STALE_S, tool.DEFAULT_CACHE_SIZE)


def test_settings_read_their_variables() -> None:
    settings = tool.LookupSettings.from_settings({
        "LOOKUP_TOOL_URL": "http://orders.internal:8080/api/", "LOOKUP_TOOL_TIMEOUT_MS": "250",
        "LOOKUP_CACHE_TTL_S": "5", "LOOKUP_CACHE_MAX_STALE_S": "60", "LOOKUP_CACHE_SIZE": "3"})
    assert settings == tool.LookupSettings("http://orders.internal:8080/api", None, 250.0, 5.0, 60.0, 3)


@pytest.mark.parametrize("url", ["orders.internal", "ftp://orders", "http://", "http://host:notaport"])
def test_an_unusable_url_is_a_problem_naming_the_variable(url: str) -> None:
    settings = tool.LookupSettings.from_settings({"LOOKUP_TOOL_URL": url})
    assert settings.tool_url is None
    assert str(settings.url_problem).startswith("LOOKUP_TOOL_URL is not an http(s) URL")


@pytest.mark.parametrize(("name", "value"), [
    ("LOOKUP_TOOL_TIMEOUT_MS", "soon"), ("LOOKUP_TOOL_TIMEOUT_MS", "0"), ("LOOKUP_CACHE_TTL_S", "-1"),
    ("LOOKUP_CACHE_SIZE", "1.5"), ("LOOKUP_CACHE_SIZE", "0"), ("LOOKUP_CACHE_TTL_S", "inf"),
    ("LOOKUP_CACHE_TTL_S", "nan"),
])
def test_a_bad_number_names_its_variable(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"^{name}="):
        tool.LookupSettings.from_settings({name: value})


def test_max_stale_below_the_ttl_is_refused() -> None:
    with pytest.raises(ValueError, match="LOOKUP_CACHE_MAX_STALE_S=10 is below LOOKUP_CACHE_TTL_S=20"):
        tool.LookupSettings.from_settings({"LOOKUP_CACHE_TTL_S": "20", "LOOKUP_CACHE_MAX_STALE_S": "10"})


# -- the client against the real stub ---------------------------------------------------------
def test_client_gets_an_order(stub: ToolStub) -> None:
    stub.latency_ms = 30
    stub.statuses["A 1/x"] = "shipped"
    client = tool.OrderClient(stub.url, timeout_ms=2000)
    assert client.order("A-1001") == stub.order("A-1001")
    assert client.order("A 1/x")["status"] == "shipped"  # the id is quoted into one segment
    assert stub.requests == ["A-1001", "A 1/x"]


def test_client_maps_404_5xx_and_bad_answers(stub: ToolStub) -> None:
    client = tool.OrderClient(stub.url, timeout_ms=2000)
    stub.missing.add("GONE")
    with pytest.raises(tool.OrderNotFound) as not_found:
        client.order("GONE")
    assert (not_found.value.status, not_found.value.code, not_found.value.tag) == (404, "order_not_found", "bad_request")
    stub.fail("error", status=503, times=1)
    with pytest.raises(tool.ToolUnavailable, match="answered HTTP 503") as unavailable:
        client.order("A-1")
    assert (unavailable.value.status, unavailable.value.tag) == (502, "tool_unavailable")
    stub.fail("error", status=200, times=1)  # a 200 that is not an order
    with pytest.raises(tool.ToolUnavailable, match="not an order"):
        client.order("A-1")
    assert stub.url not in str(unavailable.value)  # the client-facing message hides the URL


def test_client_times_out_on_the_whole_call(stub: ToolStub) -> None:
    stub.fail("hang")
    client = tool.OrderClient(stub.url, timeout_ms=150)
    started = time.perf_counter()
    with pytest.raises(tool.ToolTimeout, match="did not answer within 150 ms") as timeout:
        client.order("A-1")
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    assert 150 <= elapsed_ms < 1000
    assert (timeout.value.status, timeout.value.code, timeout.value.tag) == (504, "tool_timeout", "timeout_network")
    assert timeout.value.elapsed_ms >= 150


def test_slow_answer_past_the_deadline_is_a_timeout(stub: ToolStub) -> None:
    stub.latency_ms = 300
    with pytest.raises(tool.ToolTimeout):
        tool.OrderClient(stub.url, timeout_ms=100).order("A-1")


def test_client_refused(stub: ToolStub) -> None:
    stub.fail("refuse")
    with pytest.raises(tool.ToolUnavailable, match="refused the connection"):
        tool.OrderClient(stub.url, timeout_ms=500).order("A-1")


def test_client_refuses_a_non_http_url() -> None:
    with pytest.raises(ValueError, match="not an http"):
        tool.OrderClient("orders:80", timeout_ms=100)


# -- cache and latency window ------------------------------------------------------------------
def test_cache_ttl_stale_limit_and_lru_bound() -> None:
    clock = FakeClock([1000.0])
    cache = tool.AnswerCache(max_entries=2, clock_s=clock)
    cache.put("A", {"status": "packed"})
    clock[0] += 10
    assert cache.get("A", max_age_s=30) == tool.CachedAnswer({"status": "packed"}, 10.0)
    assert cache.get("A", max_age_s=5) is None  # too old for this use, still kept
    assert cache.get("A", max_age_s=60) is not None
    cache.put("B", {"status": "shipped"})
    cache.get("A", max_age_s=60)  # A is now the most recently used
    cache.put("C", {"status": "received"})
    assert cache.get("B", max_age_s=60) is None  # B dropped: least recently used
    assert len(cache) == 2
    cache.resize(1)
    assert len(cache) == 1 and cache.get("C", max_age_s=60) is not None


def test_cached_answers_are_copies() -> None:
    cache = tool.AnswerCache()
    order = {"status": "packed"}
    cache.put("A", order)
    order["status"] = "changed"
    got = cache.get("A", max_age_s=1.0)
    assert got is not None and got.order == {"status": "packed"}
    got.order["status"] = "changed"
    assert cache.get("A", max_age_s=1.0).order == {"status": "packed"}  # type: ignore[union-attr]


def test_latency_window_p95_and_forgetting() -> None:
    clock = FakeClock([1000.0])
    window = tool.LatencyWindow(seed_ms=100.0, window_s=60.0, max_samples=64, clock_s=clock)
    assert window.p95_ms() == 100.0  # the seed until measured
    for ms in range(1, 21):  # 1..20 ms
        window.observe(float(ms))
    assert window.p95_ms() == 19.0  # nearest rank: ceil(0.95 * 20) = 19th
    window.observe(5000.0)
    assert window.p95_ms() == 20.0
    clock[0] += 61.0
    assert window.p95_ms() == 100.0  # an old outage is forgotten: the tool is tried again
    assert len(window) == 0


def test_state_downstream_is_zero_for_a_fresh_answer(stub: ToolStub) -> None:
    clock = FakeClock([1000.0])
    state = tool.LookupState(tool.LookupSettings(cache_ttl_s=30.0, max_stale_s=600.0), clock_s=clock)
    client = tool.OrderClient(stub.url, timeout_ms=1000)
    assert state.downstream_ms("A-1") == tool.TOOL_P95_SEED_MS
    order, elapsed_ms = state.fetch(client, "A-1")
    assert order["order_id"] == "A-1" and elapsed_ms == 0.0  # the fake clock did not move
    assert state.downstream_ms("A-1") == 0.0
    assert state.downstream_ms("B-2") == 0.0  # the measured p95 (the fake clock's 0 ms)
    clock[0] += 31
    fresh, usable = state.fresh("A-1"), state.usable("A-1")
    assert fresh is None and usable is not None and state.is_stale(usable)


def test_latency_window_p95_is_the_sorted_windows_through_evictions_and_expiry() -> None:
    # GIVEN a small window fed latencies out of order (repeats included), over time
    clock = FakeClock([1000.0])
    window = tool.LatencyWindow(seed_ms=100.0, window_s=10.0, max_samples=8, clock_s=clock)
    kept: list[tuple[float, float]] = []
    for step, ms in enumerate([7, 3, 3, 9, 1, 12, 5, 5, 8, 2, 30, 4, 4, 6, 11, 0, 3]):
        clock[0] += 1.5 if step % 3 else 4.0
        window.observe(float(ms))
        kept = [*kept, (clock[0], float(ms))][-8:]  # the newest 8 (max_samples)
        # WHEN the p95 is read
        got = window.p95_ms()
        # THEN it is the nearest-rank p95 of the samples still in the window (by age and count)
        live = sorted(v for t, v in kept if t >= clock[0] - 10.0)
        assert got == live[max(0, -(-95 * len(live) // 100) - 1)]
        assert len(window) == len(live)
    clock[0] += 11.0
    assert window.p95_ms() == 100.0 and len(window) == 0  # all expired: the seed again
