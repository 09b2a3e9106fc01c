"""`kbroker console` in a real browser (headless Chromium) against a real kbroker broker:
each view shows what a real client did (a topic it created, a group's lag as it grows,
records holding HTML and script shown as text), refreshing without a reload; each write
works with --allow-writes, through its confirmation step, and is refused read-only or
without the page's token; bad URLs and an unreachable cluster get a clear page.

Every check compares with what confluent-kafka (librdkafka) says or did, never with the
tools the console itself calls.
"""

from __future__ import annotations

import html
import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from selenium.webdriver.common.by import By

from kbroker.cli import main
from tests.console.conftest import Broker, ConsoleProcess, wait_until
from tests.helpers import create_topic, free_port, produce, topic_name


def text(browser: Any, css: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, css).text)


def open_page(browser: Any, url: str) -> None:
    browser.get(url)
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "main#live h1"), f"{url} to load")


def mark(browser: Any) -> None:
    """Marks the loaded page: a reload would lose the mark."""
    browser.execute_script("window.__kept = 'yes';")


def still_marked(browser: Any) -> bool:
    return browser.execute_script("return window.__kept;") == "yes"  # type: ignore[no-any-return]


def alerts(browser: Any) -> list[str]:
    return browser.execute_script("return window.__alerts || [];")  # type: ignore[no-any-return]


def admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def partition_count(broker: Broker, topic: str) -> int | None:
    topics = admin(broker).list_topics(timeout=10).topics
    return len(topics[topic].partitions) if topic in topics else None


def topic_config(broker: Broker, topic: str, name: str) -> str:
    resource = ConfigResource("topic", topic)
    client = admin(broker)  # kept until the answer came: its end fails the future
    [future] = client.describe_configs([resource]).values()
    return str(future.result(timeout=10)[name].value)


def committed_offset(broker: Broker, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=10)
        return int(tp.offset)
    finally:
        c.close()


def lag_points(console: ConsoleProcess, group: str) -> list[tuple[float, int]]:
    answer = console.get("/api/lag?group=" + urllib.parse.quote(group))
    assert answer.status == 200
    return [(t, lag) for t, lag in json.loads(answer.body)["points"]]


def commit(broker: Broker, group: str, topic: str, offset: int) -> Consumer:
    """A member of ``group`` assigned ``topic`` that committed ``offset``; the caller
    closes it (the group then has no member)."""
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([topic])
    wait_until(lambda: c.poll(0.5) is not None, f"a record of {topic} for {group}")
    c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    return c


# -- views ----------------------------------------------------------------------------


def test_cluster_view_shows_brokers_and_links_to_every_view(
    console_ro: ConsoleProcess, console_broker: Broker, browser: Any, screenshots: Path
) -> None:
    md = admin(console_broker).list_topics(timeout=10)
    [(node_id, meta)] = md.brokers.items()
    open_page(browser, console_ro.url + "/")
    row = f"#brokers tr[data-broker='{node_id}']"
    assert text(browser, row + " .endpoint") == f"{meta.host}:{meta.port}"
    assert text(browser, "#controller") == str(md.controller_id)
    led_before = int(text(browser, row + " .led"))
    mark(browser)
    create_topic(console_broker.bootstrap, topic_name("cluster"), partitions=3)
    wait_until(
        lambda: int(text(browser, row + " .led")) == led_before + 3,
        "the broker's led partitions to grow by 3 on the open page",
    )
    assert still_marked(browser), "the page reloaded instead of refreshing its live part"
    assert text(browser, "#offline") == "0"
    assert text(browser, "#under-min-isr") == "0"
    browser.save_screenshot(str(screenshots / "cluster.png"))
    browser.find_element(By.LINK_TEXT, "Topics").click()
    wait_until(lambda: browser.current_url == console_ro.url + "/topics", "the topics page")
    browser.find_element(By.LINK_TEXT, "Consumer groups").click()
    wait_until(lambda: browser.current_url == console_ro.url + "/groups", "the groups page")
    browser.find_element(By.LINK_TEXT, "Cluster").click()
    wait_until(lambda: browser.current_url == console_ro.url + "/", "the cluster page")


def test_a_topic_created_by_a_client_appears_with_its_partitions_and_configs(
    console_ro: ConsoleProcess, console_broker: Broker, browser: Any, screenshots: Path
) -> None:
    open_page(browser, console_ro.url + "/topics")
    mark(browser)
    name = topic_name("appears")
    other = topic_name("other")
    create_topic(console_broker.bootstrap, other)
    create_topic(console_broker.bootstrap, name, partitions=2, **{"retention.ms": "123456"})
    row = f"#topics tr[data-name='{name}']"
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, row), f"{name} on the open page")
    assert still_marked(browser)
    assert text(browser, row + " .under-replicated") == "0"
    assert text(browser, row + " .size") == "0"
    assert [c.text for c in browser.find_elements(By.CSS_SELECTOR, row + " td")][:3] == [
        name,
        "2",
        "1",
    ]
    browser.find_element(By.ID, "topic-filter").send_keys(name[-10:])
    wait_until(
        lambda: (
            not browser.find_element(By.CSS_SELECTOR, f"tr[data-name='{other}']").is_displayed()
        ),
        "the filter to hide other topics",
    )
    assert browser.find_element(By.CSS_SELECTOR, row).is_displayed()
    browser.save_screenshot(str(screenshots / "topics.png"))

    browser.find_element(By.LINK_TEXT, name).click()
    wait_until(lambda: text(browser, "#topic-name") == name, "the topic page")
    assert text(browser, "#partition-count") == "2"
    [(node_id, _)] = admin(console_broker).list_topics(timeout=10).brokers.items()
    for p in (0, 1):
        prow = f"#partitions tr[data-partition='{p}']"
        assert text(browser, prow + " .leader") == str(node_id)
        assert text(browser, prow + " .replicas") == str(node_id)
        assert text(browser, prow + " .isr") == str(node_id)
        assert text(browser, prow + " .log-end") == "0"
    retention = "#configs tr[data-config='retention.ms']"
    assert text(browser, retention + " .value") == "123456"
    assert text(browser, retention + " .source") == "DYNAMIC_TOPIC_CONFIG"
    mark(browser)
    produce(console_broker.bootstrap, name, [(None, b"v", None, 1)] * 3)
    wait_until(
        lambda: text(browser, "#partitions tr[data-partition='1'] .log-end") == "3",
        "partition 1's end offset to reach 3 on the open page",
    )
    assert still_marked(browser)
    browser.save_screenshot(str(screenshots / "topic.png"))


def test_a_groups_lag_shows_and_grows_on_the_open_page(
    console_ro: ConsoleProcess, console_broker: Broker, browser: Any, screenshots: Path
) -> None:
    topic = topic_name("lag")
    group = topic_name("group")
    create_topic(console_broker.bootstrap, topic)
    produce(console_broker.bootstrap, topic, [(None, b"x")] * 10)
    member = commit(console_broker, group, topic, 4)
    try:
        # The console samples every group's lag in the background (--lag-sample 1), before
        # any page of the group is shown.
        wait_until(
            lambda: [lag for _, lag in lag_points(console_ro, group)][-1:] == [6],
            "the background sample of the group's lag",
            seen=lambda: lag_points(console_ro, group),
        )
        open_page(browser, console_ro.url + "/groups")
        wait_until(
            lambda: browser.find_elements(By.CSS_SELECTOR, f"#groups tr[data-name='{group}']"),
            f"{group} listed",
        )
        browser.find_element(By.LINK_TEXT, group).click()
        wait_until(lambda: text(browser, "#group-name") == group, "the group page")
        assert text(browser, "#group-state") == "Stable"
        assert text(browser, "#member-count") == "1"
        assert text(browser, "#members .assignment") == f"{topic}: 0"
        tp = f"#offsets tr[data-tp='{topic}-0']"
        assert text(browser, tp + " .committed") == "4"
        assert text(browser, tp + " .lag") == "6"
        mark(browser)
        produce(console_broker.bootstrap, topic, [(None, b"y")] * 5)
        wait_until(lambda: text(browser, tp + " .lag") == "11", "the lag to grow to 11")
        assert text(browser, "#total-lag") == "11"
        assert still_marked(browser)
        # The lag chart (uPlot) draws the samples, the newest 11.
        chart = browser.find_element(By.ID, "lag-chart")
        wait_until(lambda: chart.get_attribute("data-last") == "11", "the chart's newest lag")
        assert int(chart.get_attribute("data-points")) >= 2
        assert browser.find_elements(By.CSS_SELECTOR, "#lag-chart canvas")
        browser.save_screenshot(str(screenshots / "group.png"))
    finally:
        member.close()


def test_records_show_as_text_json_or_hex_and_html_is_never_run(
    console_ro: ConsoleProcess, console_broker: Broker, browser: Any, screenshots: Path
) -> None:
    topic = topic_name("records")
    create_topic(console_broker.bootstrap, topic)
    script = "<script>alert(1)</script>"
    image = "<img src=x onerror=alert(2)>"
    document = {"a": 1, "b": [1, 2], "c": "<b>not bold</b>"}
    produce(
        console_broker.bootstrap,
        topic,
        [
            (b"<b>key</b>", script.encode(), [("h", image.encode())]),
            (None, json.dumps(document).encode()),
            (b"bin", bytes([0, 1, 2, 255])),
            (b"big", b"x" * 300_000),
        ],
    )
    open_page(browser, f"{console_ro.url}/topics/{topic}/records?from=0&count=10")
    first = "#records tr[data-offset='0']"
    assert text(browser, first + " .value pre") == script
    assert text(browser, first + " .key pre") == "<b>key</b>"
    assert text(browser, first + " .header-name") == "h"
    assert text(browser, first + " .header pre") == image
    assert not browser.find_elements(By.CSS_SELECTOR, "#records script, #records img, #records b")
    assert alerts(browser) == []
    shown_json = text(browser, "#records tr[data-offset='1'] .value pre")
    assert shown_json == json.dumps(document, indent=2)
    assert text(browser, "#records tr[data-offset='2'] .value pre") == "00 01 02 ff"
    big = "#records tr[data-offset='3'] .value"
    assert text(browser, big + " pre") == "x" * 4096
    assert text(browser, big + " .cut") == "cut: 300000 bytes in all"
    browser.save_screenshot(str(screenshots / "records.png"))

    open_page(browser, f"{console_ro.url}/topics/{topic}/records?from=0&count=1&format=hex")
    assert text(browser, first + " .value pre") == script.encode().hex(" ")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#records tbody tr")) == 1
    # The last two records, from the form; a record produced then shows up (a live tail).
    open_page(browser, f"{console_ro.url}/topics/{topic}/records")
    count = browser.find_element(By.ID, "records-count")
    count.clear()
    count.send_keys("2")
    count.submit()
    wait_until(lambda: offsets_shown(browser) == ["2", "3"], "the last two records")
    mark(browser)
    produce(console_broker.bootstrap, topic, [(None, b"later", None, None, 2_000_000_000_000)])
    wait_until(lambda: offsets_shown(browser) == ["3", "4"], "the new record in the tail")
    assert text(browser, "#records tr[data-offset='4'] .value pre") == "later"
    assert still_marked(browser)
    # From a time: the first record at or after it.
    open_page(browser, f"{console_ro.url}/topics/{topic}/records?from=@2033-05-18T03:33:20Z")
    assert offsets_shown(browser) == ["4"]
    assert alerts(browser) == []


def offsets_shown(browser: Any) -> list[str]:
    return [
        str(r.get_attribute("data-offset"))
        for r in browser.find_elements(By.CSS_SELECTOR, "#records tbody tr")
    ]


# -- writes ------------------------------------------------------------------------------


def submit(browser: Any, form_field_id: str) -> None:
    browser.find_element(By.ID, form_field_id).submit()
    wait_until(lambda: browser.find_elements(By.ID, "confirm-what"), "the confirmation page")


def confirm(browser: Any) -> str:
    browser.find_element(By.ID, "confirm-button").click()
    wait_until(lambda: browser.find_elements(By.ID, "done-what"), "the done page")
    return text(browser, "#done-what")


def fill(browser: Any, field_id: str, value: str) -> None:
    element = browser.find_element(By.ID, field_id)
    element.clear()
    element.send_keys(value)


def test_each_write_works_after_its_confirmation_with_allow_writes(
    console_rw: ConsoleProcess, console_broker: Broker, browser: Any, screenshots: Path
) -> None:
    name = topic_name("written")
    open_page(browser, console_rw.url + "/topics")
    fill(browser, "create-name", name)
    fill(browser, "create-partitions", "2")
    fill(browser, "create-configs", "retention.ms=7654321")
    submit(browser, "create-name")
    assert name in text(browser, "#confirm-what")
    assert partition_count(console_broker, name) is None, "created before the confirmation"
    assert confirm(browser) == f"Created topic {name!r}."
    # Kafka's brokers learn of a change from ZooKeeper a moment after it is made.
    wait_until(lambda: partition_count(console_broker, name) == 2, "2 partitions")
    wait_until(lambda: topic_config(console_broker, name, "retention.ms") == "7654321", "config")

    browser.find_element(By.ID, "done-link").click()
    wait_until(lambda: browser.find_elements(By.ID, "partition-total"), "the topic page")
    fill(browser, "partition-total", "4")
    submit(browser, "partition-total")
    assert partition_count(console_broker, name) == 2
    confirm(browser)
    wait_until(lambda: partition_count(console_broker, name) == 4, "4 partitions")

    open_page(browser, f"{console_rw.url}/topics/{name}")
    fill(browser, "config-set", "retention.ms=1111")
    submit(browser, "config-set")
    assert topic_config(console_broker, name, "retention.ms") == "7654321"
    confirm(browser)
    wait_until(lambda: topic_config(console_broker, name, "retention.ms") == "1111", "1111")

    # Reset a group's offsets: a dry run first, then the commit.
    group = topic_name("reset")
    produce(console_broker.bootstrap, name, [(None, b"r", None, 0)] * 5)
    commit(console_broker, group, name, 5).close()
    open_page(browser, f"{console_rw.url}/groups/{group}")
    fill(browser, "reset-topic", name)
    submit(browser, "reset-topic")  # to earliest, the form's first choice
    assert text(browser, f"#plan tr[data-tp='{name}-0'] .new-offset") == "0"
    assert committed_offset(console_broker, group, name) == 5, "committed during the dry run"
    browser.save_screenshot(str(screenshots / "reset-offsets-dry-run.png"))
    confirm(browser)
    assert committed_offset(console_broker, group, name) == 0
    # The CLI's other ways to choose offsets, as dry runs (no member, so each could commit).
    token = browser.find_element(By.CSS_SELECTOR, "meta[name=csrf-token]").get_attribute("content")
    for to, value, new_offset in [
        ("latest", "", "5"),
        ("current", "", "0"),
        ("offset", "3", "3"),
        ("shift", "2", "2"),
        ("datetime", "2100-01-01T00:00", "5"),  # no record that late: the end
        ("duration", "PT1H", "0"),  # every record is of the last hour
    ]:
        form = {"csrf": token, "group": group, "topic": name, "to": to, "value": value}
        answer = console_rw.post("/write/reset-offsets", form)
        assert answer.status == 200, (to, answer.body)
        planned = re.search(r'<td class="new-offset">(\d+)</td>', answer.body)
        assert planned is not None and planned.group(1) == new_offset, (to, answer.body)
    assert committed_offset(console_broker, group, name) == 0

    open_page(browser, f"{console_rw.url}/topics/{name}")
    browser.find_element(By.CSS_SELECTOR, "form.danger button").click()
    wait_until(lambda: browser.find_elements(By.ID, "confirm-what"), "the confirmation page")
    assert "cannot be undone" in text(browser, "#confirm-what")
    assert partition_count(console_broker, name) == 4
    confirm(browser)
    wait_until(lambda: partition_count(console_broker, name) is None, f"{name} deleted")


def write_requests(topic: str, group: str) -> list[tuple[str, dict[str, str]]]:
    """Each write endpoint with a complete, confirmed form."""
    return [
        ("/write/topic", {"name": topic_name("never"), "partitions": "1"}),
        (f"/topics/{topic}/delete", {}),
        (f"/topics/{topic}/partitions", {"count": "5"}),
        (f"/topics/{topic}/config", {"set": "retention.ms=1"}),
        ("/write/reset-offsets", {"group": group, "to": "earliest"}),
    ]


def test_read_only_console_refuses_every_write(
    console_ro: ConsoleProcess, console_broker: Broker, browser: Any, screenshots: Path
) -> None:
    topic = topic_name("kept")
    create_topic(console_broker.bootstrap, topic, partitions=1, **{"retention.ms": "99999"})
    open_page(browser, f"{console_ro.url}/topics/{topic}")
    assert not browser.find_elements(By.CSS_SELECTOR, "form.write")
    assert text(browser, "#mode") == "read-only"
    token = browser.find_element(By.CSS_SELECTOR, "meta[name=csrf-token]").get_attribute("content")
    for path, form in write_requests(topic, "g"):
        answer = console_ro.post(path, {**form, "csrf": token, "confirmed": "1"})
        assert answer.status == 403, (path, answer.status)
        assert "start it with --allow-writes" in answer.body
    assert partition_count(console_broker, topic) == 1
    assert topic_config(console_broker, topic, "retention.ms") == "99999"
    # A form a page would post, in the browser: a clear page.
    browser.execute_script(
        "const f = document.createElement('form'); f.method = 'post';"
        "f.action = arguments[0]; const t = document.createElement('input');"
        "t.name = 'csrf'; t.value = arguments[1]; f.appendChild(t);"
        "document.body.appendChild(f); f.submit();",
        f"/topics/{topic}/delete",
        token,
    )
    wait_until(lambda: "Read-only console" in text(browser, "h1"), "the read-only page")
    browser.save_screenshot(str(screenshots / "read-only-refused.png"))
    assert partition_count(console_broker, topic) == 1


def test_a_write_without_the_pages_token_or_from_another_host_is_refused(
    console_rw: ConsoleProcess, console_broker: Broker
) -> None:
    topic = topic_name("token")
    create_topic(console_broker.bootstrap, topic)
    page = console_rw.get("/topics")
    token = re.search(r'name="csrf-token" content="([^"]+)"', page.body)
    assert token is not None
    for path, form in write_requests(topic, "g"):
        for bad in ({}, {"csrf": "x" + token.group(1)[1:]}):
            answer = console_rw.post(path, {**form, **bad, "confirmed": "1"})
            assert answer.status == 403, (path, bad, answer.status)
            assert "CSRF token missing or wrong" in answer.body
    assert partition_count(console_broker, topic) == 1
    assert topic_config(console_broker, topic, "retention.ms") != "1"
    # Writes are POST only; and a page asked under another site's name is refused.
    assert console_rw.get(f"/topics/{topic}/delete").status == 405
    assert console_rw.get("/topics", {"Host": "attacker.example"}).status == 400
    assert "content-security-policy" in {k.lower() for k in page.headers}


# -- bad input --------------------------------------------------------------------------


def test_bad_urls_and_values_get_a_clear_page(
    console_rw: ConsoleProcess, console_broker: Broker, browser: Any, screenshots: Path
) -> None:
    topic = topic_name("bad")
    create_topic(console_broker.bootstrap, topic)
    produce(console_broker.bootstrap, topic, [(None, b"1")] * 3)
    token = re.search(r'name="csrf-token" content="([^"]+)"', console_rw.get("/").body)
    assert token is not None
    csrf = token.group(1)
    cases: list[tuple[str, dict[str, str] | None, int, str]] = [
        ("/topics/no-such-topic", None, 404, "no topic named 'no-such-topic'"),
        ("/groups/no-such-group", None, 404, "no group named 'no-such-group'"),
        (f"/topics/{topic}/records?partition=7", None, 404, "has no partition 7"),
        (f"/topics/{topic}/records?from=4", None, 400, "offset 4 is past the end"),
        (f"/topics/{topic}/records?from=soon", None, 400, "expected an offset, 'end' or @TIME"),
        (f"/topics/{topic}/records?from=@yesterday", None, 400, "an ISO date/time"),
        (f"/topics/{topic}/records?count=0", None, 400, "count must be 1 to 500"),
        (f"/topics/{topic}/records?count=lots", None, 400, "count must be a whole number"),
        (f"/topics/{topic}/records?format=xml", None, 400, "format must be one of"),
        ("/no/such/page", None, 404, "no such page"),
        ("/write/topic", {"name": "x", "partitions": "many"}, 400, "partitions must be a whole"),
        ("/write/topic", {"name": " ", "partitions": "1"}, 400, "the form has no name"),
        (f"/topics/{topic}/config", {"set": "no equals"}, 400, "expected NAME=VALUE"),
        (f"/topics/{topic}/partitions", {"count": "1"}, 409, "INVALID_PARTITIONS"),
        ("/write/reset-offsets", {"group": "g", "to": "tomorrow"}, 400, "reset to earliest"),
        (
            "/write/reset-offsets",
            {"group": "g", "to": "duration", "value": "an hour"},
            400,
            "expected an ISO 8601 duration",
        ),
    ]
    for path, form, status, says in cases:
        answer = (
            console_rw.get(path) if form is None else console_rw.post(path, {**form, "csrf": csrf})
        )
        assert answer.status == status, (path, answer.status, answer.body)
        assert says in html.unescape(answer.body), (path, answer.body)
        assert "Traceback" not in answer.body
    open_page(browser, f"{console_rw.url}/topics/{topic}/records?from=4")
    assert "past the end" in text(browser, "#error-message")
    browser.save_screenshot(str(screenshots / "bad-offset.png"))


def test_an_unreachable_cluster_gets_a_clear_page(tmp_path: Path) -> None:
    console = ConsoleProcess(f"127.0.0.1:{free_port()}", tmp_path / "console.log").start()
    try:
        for path in ("/", "/topics", "/groups"):
            answer = console.get(path)
            assert answer.status == 503
            assert "Cannot reach the cluster" in answer.body
            assert "Traceback" not in answer.body
    finally:
        console.stop()


def test_a_cluster_that_does_not_answer_gets_a_clear_page_in_time(tmp_path: Path) -> None:
    """A listener that takes connections and never answers: each call is bounded by the
    client timeout (--timeout 1 here: the last of the two given wins)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        console = ConsoleProcess(address, tmp_path / "console.log", ("--timeout", "1")).start()
        try:
            started = time.monotonic()
            answer = console.get("/topics")
            assert answer.status == 504
            assert "The cluster did not answer in time" in answer.body
            assert "timed out" in answer.body
            assert time.monotonic() - started < 10
        finally:
            console.stop()


def test_console_without_its_extra_says_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['uvicorn'] = None\n"
        "from kbroker.cli import main\n"
        "main(['console', '-b', '127.0.0.1:1'])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "Error: kbroker console needs its web packages (uvicorn is missing): "
        "pip install 'kbroker[console]'"
    )


def test_bad_command_line_values_get_one_line(console_ro: ConsoleProcess) -> None:
    taken = console_ro.url.removeprefix("http://")
    cases = [
        (["--listen", taken], 1, f"Error: cannot listen on {taken}: Address already in use"),
        (["--listen", "nowhere"], 2, "expected HOST:PORT, got 'nowhere'"),
        (["--metrics", "ftp://b1/metrics"], 2, "expected an http(s) URL"),
        (["--lag-sample", "0.5"], 2, "0 (off) or at least 1 second"),
    ]
    for args, code, says in cases:
        result = CliRunner().invoke(main, ["console", "-b", "127.0.0.1:1", *args])
        assert result.exit_code == code, (args, result.output)
        assert says in result.output, (args, result.output)
        assert "Traceback" not in result.output
