"""The web console (``/ui``) in a real browser against a real broker.

Theory of operation
-------------------
Headless Debian chromium, driven by selenium through ``/usr/bin/chromedriver``,
opens the console a single broker serves on its admin port (``hbroker``,
"single" kind) and does what an operator would: create a topic, browse
records, cancel a delayed record, replay a dead letter, look at a share group
holding records. Each outcome is checked on the Kafka side with real clients
(kafka-python's admin client, confluent-kafka producers and consumers,
librdkafka's share consumer in its own process), not by trusting the page.

Every page a test visits is saved as a PNG under the test's ``tmp_path``;
a failure's message lists them and the error box's text (``Console.recording``).
``test_doc_screenshots`` writes the pictures of ``docs/images/``; it is marked
``screenshots``, left out of ``make test`` and run by ``make screenshots``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from kcompat.ext.nack import nack

from .._broker import REPO_ROOT
from .._browser import new_driver
from .._deployment import Deployment
from .._groups import unique_group, wait_for
from .._share import ShareMember, produce, require_share_apis, set_group_configs
from ..confluent._helpers import consumer, create_topic
from .test_rest_extensions import _until_kept
from .test_rest_v3 import Rest, _ends, _until

DOC_IMAGES = REPO_ROOT / "docs" / "images"

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.parametrize("hbroker", ["single"], indirect=True)]


# -- the browser --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    driver = new_driver()
    try:
        yield driver
    finally:
        driver.quit()


#: reads of a table the page may re-render meanwhile (its rows go stale)
READ_TRIES = 5


class Console:
    """The console in the browser: pages, forms, tables, and screenshots of each step."""

    def __init__(self, driver: webdriver.Chrome, base: str, shots: Path) -> None:
        self.driver = driver
        self.base = base
        self.shots = shots
        self.taken: list[Path] = []

    # -- pages and elements

    def open(self, route: str) -> None:
        """Load ``/ui/#/route`` afresh (a new page: no state of the last test)."""
        self.driver.get("about:blank")
        self.driver.get(f"{self.base}/ui/#/{route}")
        self.wait_for(lambda: self.driver.find_elements(By.CSS_SELECTOR, "#main .page h1"),
                      f"the page {route!r} to render")

    def el(self, testid: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, f'[data-testid="{testid}"]')

    def fill(self, testid: str, text: str) -> None:
        box = self.el(testid)
        box.clear()
        box.send_keys(text)

    def click(self, testid: str) -> None:
        self.el(testid).click()

    def rows(self, testid: str) -> list[list[str]]:
        """The body rows' cell texts of a table ([] when absent or empty); read
        again if the page re-rendered the table while it was being read."""
        for _ in range(READ_TRIES):
            with contextlib.suppress(StaleElementReferenceException):
                return self._rows(testid)
            time.sleep(0.1)
        return self._rows(testid)

    def _rows(self, testid: str) -> list[list[str]]:
        found = self.driver.find_elements(By.CSS_SELECTOR, f'table[data-testid="{testid}"]')
        if not found:
            return []
        return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                for tr in found[0].find_elements(By.CSS_SELECTOR, "tbody tr:not(.empty)")]

    def text(self, testid: str) -> str:
        found = self.driver.find_elements(By.CSS_SELECTOR, f'[data-testid="{testid}"]')
        return found[0].text if found else ""

    def error_text(self) -> str:
        box = self.el("error-box")
        return box.text if box.is_displayed() else ""

    # -- waiting, screenshots, failures

    def wait_for(self, get: Callable[[], Any], what: str, timeout: float = 20.0,
                 every: Callable[[], None] | None = None) -> Any:
        """``get()`` until it is truthy (``every()`` between tries, e.g. a refresh)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(StaleElementReferenceException):
                value = get()
                if value:
                    return value
            if time.monotonic() > deadline:
                self.shot("timeout")
                raise AssertionError(f"waited {timeout:.0f} s for {what}")
            time.sleep(0.2)
            if every is not None:
                with contextlib.suppress(WebDriverException):
                    every()

    def shot(self, name: str) -> Path:
        path = self.shots / f"{len(self.taken):02d}-{name}.png"
        with contextlib.suppress(WebDriverException):
            self.driver.save_screenshot(str(path))
            self.taken.append(path)
        return path

    def doc_shot(self, file_name: str) -> None:
        """A picture for docs/images (``test_doc_screenshots``)."""
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        self.driver.execute_script("window.scrollTo(0, 0)")
        self.driver.save_screenshot(str(DOC_IMAGES / file_name))

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Any failure inside: one more screenshot, and all of them named in the message."""
        try:
            yield
        except Exception as e:
            self.shot("failure")
            error = ""
            with contextlib.suppress(WebDriverException):
                error = self.error_text()
            listed = "\n".join(f"  {p}" for p in self.taken)
            raise AssertionError(f"{type(e).__name__}: {e}\nerror box: {error!r}\n"
                                 f"url: {self.driver.current_url}\nscreenshots:\n{listed}"
                                 ) from e


@pytest.fixture
def ui(browser: webdriver.Chrome, hbroker: Deployment, tmp_path: Path) -> Console:
    return Console(browser, hbroker.brokers[0].admin_url, tmp_path)


def _has_row(ui: Console, table: str, *cells: str) -> list[str] | None:
    """The first row of ``table`` holding every one of ``cells`` (a cell each, exactly)."""
    for row in ui.rows(table):
        if all(c in row for c in cells):
            return row
    return None


# -- scenarios the tests and the doc pictures share ------------------------------------------


def _dead_letter(hbroker: Deployment, topic: str, group: str) -> str:
    """Topic ``topic`` (no retries), one record failed by a consumer of ``group``
    (``nack``, its offset committed): the dead-letter topic's name once it holds it."""
    rest = Rest(hbroker)
    status, made = rest.call("POST", f"{rest.cl}/topics", {
        "topic_name": topic, "partitions_count": 1, "replication_factor": 1,
        "configs": [{"name": "kc.retry.max.attempts", "value": "0"}]})
    assert status == 201, made
    p = Producer({"bootstrap.servers": hbroker.bootstrap})
    p.produce(topic, key=b"dk", value=b"dead letter", headers=[("origin", b"console-test")])
    assert p.flush(30) == 0
    c = consumer(hbroker.bootstrap, **{"group.id": group, "auto.offset.reset": "earliest",
                                       "enable.partition.eof": False})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, "the record never came"
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                break
        nack(p, m, "boom")
        assert p.flush(30) == 0
        c.commit(message=m, asynchronous=False)
    finally:
        c.close()
    dlq = topic + ".dlq"
    _until(lambda: rest.call("GET", f"{rest.cl}/dead-letters")[1],
           lambda b: any(t["topic_name"] == dlq and t["records"] == 1 for t in b["data"]),
           timeout_s=20)
    return dlq


def _dlq_dry_run(ui: Console, dlq: str, original: str) -> None:
    """From the dead-letter list to the dry run of replaying its one record."""
    ui.open("dlq")
    ui.wait_for(lambda: _has_row(ui, "dlq-table", dlq, original, "1"), f"{dlq} listed")
    ui.shot("dlq-list")
    ui.driver.find_element(By.LINK_TEXT, dlq).click()
    ui.wait_for(lambda: ui.driver.find_elements(By.CSS_SELECTOR, '[data-testid="dlq-records-load"]'),
                "the dead-letter page")
    ui.click("dlq-records-load")
    row = ui.wait_for(lambda: _has_row(ui, "dlq-records-table", "dk", "dead letter"),
                      "the dead letter in the record browser")
    assert any("kc-error=boom" in line for line in row[-1].splitlines()), row
    ui.shot("dlq-records")
    ui.click("dlq-replay")  # nothing ticked: a message, nothing sent
    ui.wait_for(lambda: "Select the records" in ui.error_text(), "the nothing-selected message")
    assert not ui.rows("dlq-plan-table")
    ui.driver.find_element(By.CSS_SELECTOR, 'input[data-testid="pick"][data-offset="0"]').click()
    ui.click("dlq-replay")
    ui.wait_for(lambda: _has_row(ui, "dlq-plan-table", "0", original, "dry run"),
                "the dry run's plan")
    assert "Dry run: 1 record" in ui.text("dlq-dry-run")
    ui.shot("dlq-dry-run")


def _stalled_share_member(hbroker: Deployment, topic: str, workdir: Path
                          ) -> tuple[str, ShareMember]:
    """A share group whose one member holds the records of ``topic`` acquired, unacknowledged."""
    require_share_apis(hbroker.bootstrap)
    create_topic(hbroker.bootstrap, topic, partitions=1, replication=1)
    group = unique_group("share")
    set_group_configs(hbroker.bootstrap, group, {"share.auto.offset.reset": "earliest",
                                                 "share.record.lock.duration.ms": "60000"})
    produce(hbroker.bootstrap, topic, ((0, f"k{i}", str(i)) for i in range(5)))
    member = ShareMember(hbroker.bootstrap, topic, group, workdir / "member.log", "m",
                         "--stall-after", "0")
    wait_for(lambda: any(n.startswith("# stalled") for n in member.notes()), 30,
             member.describe, interval=0.2)
    return group, member


def _share_group_page(ui: Console, group: str, topic: str) -> list[str]:
    """The share group's page once it shows a run of ``topic``-0 in flight; that row."""
    ui.open("share-groups")
    ui.wait_for(lambda: _has_row(ui, "share-groups-table", group), f"{group} listed",
                every=lambda: ui.click("refresh"))
    ui.shot("share-groups")
    ui.driver.find_element(By.LINK_TEXT, group).click()

    def in_flight() -> list[str] | None:
        part = _has_row(ui, "share-partitions-table", topic, "0")
        run = _has_row(ui, "share-inflight-table", topic, "0")
        if part is None or run is None or int(part[5]) < 1 or int(run[5]) < 1:
            return None
        return run

    run: list[str] = ui.wait_for(in_flight, "acquired records and their delivery count",
                                 every=lambda: ui.click("refresh"))
    return run


# -- tests ------------------------------------------------------------------------------------


def test_a_topic_created_in_the_console_is_the_one_kafka_clients_see(
        hbroker: Deployment, ui: Console, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=hbroker.bootstrap, request_timeout_ms=20000)
    try:
        with ui.recording():
            ui.open("topics")
            ui.wait_for(lambda: ui.driver.find_elements(By.ID, "topics-table"), "the topic list")
            ui.shot("topics")
            ui.fill("create-topic-name", topic)
            ui.fill("create-topic-partitions", "3")
            ui.fill("create-topic-rf", "1")
            ui.fill("create-topic-configs", "retention.ms")  # bad: no value
            ui.click("create-topic-submit")
            ui.wait_for(lambda: "is not name=value" in ui.error_text(), "the bad-config message")
            ui.shot("create-bad-config")
            assert topic not in admin.list_topics()  # nothing was sent
            ui.fill("create-topic-configs", "retention.ms=3600000\ncleanup.policy=delete")
            ui.click("create-topic-submit")
            ui.wait_for(lambda: topic in ui.text("create-topic-result"), "the created notice")
            ui.wait_for(lambda: _has_row(ui, "topics-table", topic, "3", "1"), "the new row")
            assert not ui.error_text()
            ui.shot("created")
            wait_for(lambda: topic in admin.list_topics(), 15, f"{topic} never listed")
            (described,) = admin.describe_topics([topic])
            assert len(described["partitions"]) == 3, described
            ui.click("create-topic-submit")  # the same again: the broker's refusal, shown
            ui.wait_for(lambda: "exists" in ui.error_text().lower(), "the already-exists error")
            ui.shot("create-exists")
            ui.open(f"topics/{topic}")
            ui.wait_for(lambda: _has_row(ui, "topic-configs-table", "retention.ms", "3600000",
                                         "DYNAMIC_TOPIC_CONFIG"), "the topic's configs")
            assert len(ui.rows("topic-partitions-table")) == 3
            ui.shot("topic-page")
    finally:
        admin.close()


def test_b_a_record_with_headers_shows_in_the_record_browser(
        hbroker: Deployment, ui: Console, topic: str) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=1, replication=1)
    p = Producer({"bootstrap.servers": hbroker.bootstrap})
    p.produce(topic, key=b"user-42", value=b"hello console",
              headers=[("color", b"red"), ("trace", b"t-1")])
    p.produce(topic, key=b"user-43", value=b"second", headers=[("color", b"blue")])
    p.produce(topic, key=None, value=b"\xff\xfe\x00binary")
    assert p.flush(30) == 0
    with ui.recording():
        ui.open(f"topics/{topic}")
        ui.wait_for(lambda: _has_row(ui, "topic-partitions-table", "0", "0", "3"),
                    "the partition's offsets")
        ui.fill("records-limit", "1")
        ui.click("records-load")
        row = ui.wait_for(lambda: _has_row(ui, "records-table", "0", "user-42", "hello console"),
                          "the first record")
        assert row[-1].splitlines() == ["color=red", "trace=t-1"], row
        ui.shot("records-page-1")
        ui.click("records-next")  # metadata.next
        row = ui.wait_for(lambda: _has_row(ui, "records-table", "1", "user-43", "second"),
                          "the second page")
        assert len(ui.rows("records-table")) == 1
        ui.click("records-next")
        row = ui.wait_for(lambda: _has_row(ui, "records-table", "2"), "the third page")
        assert row[2] == "null" and row[3].startswith("base64:"), row  # not UTF-8
        ui.shot("records-page-3")
        ui.fill("records-limit", "20")
        ui.fill("records-filter", "color = 'blue'")
        ui.click("records-load")
        ui.wait_for(lambda: [r[2] for r in ui.rows("records-table")] == ["user-43"],
                    "the filtered page")
        ui.shot("records-filtered")
        ui.fill("records-filter", "color =")  # bad filter: the API's message
        ui.click("records-load")
        ui.wait_for(lambda: "filter" in ui.error_text(), "the filter's error")
        ui.shot("records-bad-filter")


def test_c_a_delayed_record_cancelled_in_the_console_is_never_delivered(
        hbroker: Deployment, ui: Console, topic: str) -> None:
    create_topic(hbroker.bootstrap, topic, partitions=1, replication=1)
    with ui.recording():
        ui.open("delayed")
        ui.wait_for(lambda: ui.text("scheduled-total"), "the scheduled list")
        # the form ready before the records exist: they are due in 8 s (time
        # for the steps below on a loaded machine before the cancelled one is due)
        ui.fill("scheduled-topic", topic)
        ui.fill("cancel-topic", topic)
        ui.fill("cancel-schedule-id", "drop-1")
        p = Producer({"bootstrap.servers": hbroker.bootstrap})
        due = int(time.time() * 1000) + 8000
        for name in ("keep", "drop"):
            p.produce(topic, value=name.encode(), headers=[
                ("kc-deliver-at", str(due).encode()), ("kc-schedule-id", f"{name}-1".encode())])
        assert p.flush(30) == 0
        ui.wait_for(lambda: ui.text("scheduled-total") == "2", "2 pending",
                    timeout=6, every=lambda: ui.click("scheduled-apply"))
        assert _has_row(ui, "scheduled-table", topic, "0", "2")
        ui.shot("delayed-pending")
        ui.click("cancel-submit")
        ui.wait_for(lambda: "drop-1" in ui.text("cancel-result"), "the cancellation notice")
        assert not ui.error_text()
        ui.shot("delayed-cancelled")
        c = consumer(hbroker.bootstrap, **{"auto.offset.reset": "earliest",
                                           "enable.partition.eof": False,
                                           "group.id": f"g-{topic}"})
        try:
            c.subscribe([topic])
            seen = _until_kept(c, due)
            assert seen == [b"keep"], seen  # the cancelled one never comes
        finally:
            c.close()
        ui.click("scheduled-apply")
        ui.wait_for(lambda: ui.text("scheduled-total") == "0", "nothing pending")
        ui.fill("cancel-schedule-id", "")  # bad input: the API's message, nothing sent
        ui.click("cancel-submit")
        ui.wait_for(lambda: "schedule_id" in ui.error_text(), "the empty-id error")
        ui.shot("delayed-bad-input")
        ui.fill("cancel-schedule-id", "x")
        ui.fill("cancel-partition", "5")
        ui.click("cancel-submit")
        ui.wait_for(lambda: f"{topic}-5" in ui.error_text(), "the unknown-partition error")
        assert "HTTP 404" in ui.error_text()


def test_d_a_dead_letter_replayed_in_the_console_is_read_again(
        hbroker: Deployment, ui: Console, topic: str) -> None:
    group = f"g-{topic}"
    dlq = _dead_letter(hbroker, topic, group)
    with ui.recording():
        _dlq_dry_run(ui, dlq, topic)
        assert _ends(hbroker.bootstrap, topic, 1) == {0: 1}  # the dry run sent nothing
        ui.click("dlq-confirm")
        ui.wait_for(lambda: "Replay done: 1 record" in ui.text("dlq-done"), "the replay")
        assert _has_row(ui, "dlq-plan-table", "0", topic, "0", "1", "ok"), ui.rows("dlq-plan-table")
        ui.shot("dlq-replayed")
        c = consumer(hbroker.bootstrap, **{"group.id": group, "enable.partition.eof": False})
        try:
            c.subscribe([topic])  # the group that failed it, past its offset
            deadline = time.monotonic() + 30
            while True:
                assert time.monotonic() < deadline, "the replayed record never came"
                m = c.poll(0.3)
                if m is not None and m.error() is None:
                    break
            assert (m.offset(), m.key(), m.value()) == (1, b"dk", b"dead letter")
            names = [str(header[0]) for header in m.headers() or []]
            assert [n for n in names if n.startswith("kc-")] == [], names
        finally:
            c.close()
        ui.click("dlq-purge")
        ui.wait_for(lambda: "1 record(s) would be deleted" in ui.text("dlq-dry-run"),
                    "the purge's dry run")
        ui.shot("dlq-purge-dry-run")
        ui.click("dlq-confirm")
        ui.wait_for(lambda: "Purge done" in ui.text("dlq-done"), "the purge")
        rest = Rest(hbroker)
        listed = rest.call("GET", f"{rest.cl}/dead-letters")[1]
        assert [t["records"] for t in listed["data"] if t["topic_name"] == dlq] == [0]


def test_e_a_share_groups_records_in_flight_are_shown(
        hbroker: Deployment, ui: Console, topic: str, tmp_path: Path) -> None:
    group, member = _stalled_share_member(hbroker, topic, tmp_path)
    try:
        with ui.recording():
            run = _share_group_page(ui, group, topic)
            assert run[4].upper() == "ACQUIRED" and int(run[5]) >= 1, run
            members = ui.rows("share-members-table")
            assert len(members) == 1 and f"{topic}-0" in members[0][2], members
            ui.shot("share-group")
    finally:
        member.kill9()


@pytest.mark.screenshots
def test_doc_screenshots(hbroker: Deployment, ui: Console, topic: str, tmp_path: Path) -> None:
    """docs/images/console-{delayed,dlq-replay,share-group}.png."""
    create_topic(hbroker.bootstrap, topic, partitions=2, replication=1)
    p = Producer({"bootstrap.servers": hbroker.bootstrap})
    due = int(time.time() * 1000) + 60_000
    for i in range(3):
        p.produce(topic, value=b"v", partition=i % 2, headers=[
            ("kc-deliver-at", str(due + i * 1000).encode()),
            ("kc-schedule-id", f"invoice-{i}".encode())])
    assert p.flush(30) == 0
    group, member = _stalled_share_member(hbroker, topic + "-share", tmp_path)
    ui.driver.set_window_size(1280, 1200)  # a whole page in each picture
    try:
        with ui.recording():
            ui.open("delayed")
            ui.fill("cancel-topic", topic)
            ui.fill("cancel-schedule-id", "invoice-2")
            ui.wait_for(lambda: int(ui.text("scheduled-total") or 0) >= 3, "3 pending",
                        every=lambda: ui.click("scheduled-apply"))
            ui.doc_shot("console-delayed.png")
            dlq = _dead_letter(hbroker, topic + "-orders", f"g-{topic}")
            _dlq_dry_run(ui, dlq, topic + "-orders")
            ui.doc_shot("console-dlq-replay.png")
            _share_group_page(ui, group, topic + "-share")
            ui.doc_shot("console-share-group.png")
    finally:
        ui.driver.set_window_size(1280, 900)
        member.kill9()
    for name in ("console-delayed.png", "console-dlq-replay.png", "console-share-group.png"):
        assert (DOC_IMAGES / name).stat().st_size > 0


def test_the_overview_counts_what_kafka_clients_see(hbroker: Deployment, ui: Console,
                                                    topic: str) -> None:
    """One request whatever the topic count: brokers, topics, partitions led
    per broker and the metadata quorum, as a Kafka admin client sees them."""
    create_topic(hbroker.bootstrap, topic, partitions=3, replication=1)
    admin = KafkaAdminClient(bootstrap_servers=hbroker.bootstrap)
    try:
        listed = [t for t in admin.list_topics() if not t.startswith("__")]
    finally:
        admin.close()
    with ui.recording():
        ui.open("")  # the overview is the console's first page
        ui.wait_for(lambda: ui.rows("brokers-table"), "the brokers table")
        assert ui.text("topic-count") == str(len(listed))
        assert ui.text("broker-count") == str(len(hbroker.brokers))
        led = sum(int(row[3]) for row in ui.rows("brokers-table"))
        assert led == int(ui.text("partition-count")) and led >= 3
        quorum = ui.rows("quorum-table")
        assert any(row[1] == "leader" for row in quorum), quorum
        ui.shot("overview")


def test_the_topics_list_is_narrowed_by_its_filter(hbroker: Deployment, ui: Console,
                                                   topic: str) -> None:
    for suffix in ("a", "b"):
        create_topic(hbroker.bootstrap, f"{topic}-{suffix}", partitions=1, replication=1)
    with ui.recording():
        ui.open("topics")
        ui.wait_for(lambda: _has_row(ui, "topics-table", f"{topic}-b"), "both topics listed")
        box = ui.driver.find_element(By.CSS_SELECTOR, '[data-testid="topics-filter"]')
        box.send_keys(f"{topic}-a")
        ui.wait_for(lambda: [r[0] for r in ui.rows("topics-table")] == [f"{topic}-a"],
                    "only the filtered topic")
        ui.shot("topics-filtered")
