"""The web console in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven
by Selenium with that chromedriver: nothing is downloaded at run time), against a real server with
auth on: open, enter the key, browse, search, inspect a result, delete with confirmation, and
restore a memory and a collection from the trash with confirmation.

Skipped, saying why, where chromium or chromedriver is absent (``.ci/run`` installs them). Set
``ENGRAM_CONSOLE_SCREENSHOTS=<dir>`` to keep the screenshots of the main views (the docs use them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram_client.proto.engram.v1.memory_pb2 import ScoreBreakdown
from tests.security.support import threaded_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)",
)
KEY = "console-test-key"
WAIT_S = 60.0  # a hang guard for page updates, not a speed check


@pytest.fixture
def driver() -> Iterator[Any]:
    from selenium import webdriver  # noqa: PLC0415
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1366,860", "--lang=en-US"):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield browser
    finally:
        browser.quit()


def _seed(base: str) -> dict[str, str]:
    headers = {"authorization": f"Bearer {KEY}"}
    ids: dict[str, str] = {}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
        for collection, content, kind, importance in [
            ("default", "The user drinks green tea every morning", "MEMORY_TYPE_EVENT", 6),
            ("default", "The user's name is Ada Lovelace", "MEMORY_TYPE_IDENTITY", 9),
            ("default", "Always answer in British English", "MEMORY_TYPE_DIRECTIVE", 8),
            ("default", "The user met Bob at the conference in Lisbon", "MEMORY_TYPE_EVENT", 4),
            ("work", "The deploy runs every Friday at noon", "MEMORY_TYPE_EVENT", 5),
            ("work", "Run the smoke tests before every deploy", "MEMORY_TYPE_DIRECTIVE", 7),
            ("work", "Announce the deploy in the ops channel first", "MEMORY_TYPE_DIRECTIVE", 6),
        ]:
            tags = ["trigger:deploy"] if "deploy" in content and kind == "MEMORY_TYPE_DIRECTIVE" else []
            r = http.post(
                "/v1/memories",
                json={
                    "collection": collection,
                    "content": content,
                    "type": kind,
                    "importance": importance,
                    "tags": tags,
                },
            )
            assert r.status_code == 200, r.text
            ids[content] = r.json()["memory"]["id"]
        r = http.post("/v1/memories", json={"content": "The user's name is Ada Lovelace", "importance": 9})
        assert r.json()["outcome"] == "ADD_OUTCOME_DUPLICATE", r.text
        tea = ids["The user drinks green tea every morning"]
        r = http.post(
            "/v1/memories:update", json={"id": tea, "content": "The user drinks jasmine tea every morning"}
        )
        assert r.status_code == 200, r.text
    return ids


def test_console_scenario(tmp_path: Path, driver: Any) -> None:
    from selenium.common.exceptions import TimeoutException  # noqa: PLC0415
    from selenium.webdriver.common.by import By  # noqa: PLC0415
    from selenium.webdriver.common.keys import Keys  # noqa: PLC0415
    from selenium.webdriver.support import expected_conditions as ec  # noqa: PLC0415
    from selenium.webdriver.support.ui import WebDriverWait  # noqa: PLC0415

    shots = Path(os.environ.get("ENGRAM_CONSOLE_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    wait = WebDriverWait(driver, WAIT_S)

    def status_contains(text: str) -> None:
        try:
            wait.until(ec.text_to_be_present_in_element((By.ID, "status"), text))
        except TimeoutException:
            raise AssertionError(
                f"status never said {text!r}: {driver.find_element(By.ID, 'status').text!r}"
            ) from None

    with threaded_server(tmp_path / "data", http_port=0, console=True, api_key=KEY) as server:
        base = f"http://127.0.0.1:{server.http_port}"
        ids = _seed(base)
        driver.get(base + "/")  # redirects to /console/

        # Without a key the API refuses and the console says so.
        status_contains("enter an API key")
        assert "error" in driver.find_element(By.ID, "status").get_attribute("class")
        key = driver.find_element(By.ID, "api-key")
        assert key.get_attribute("type") == "password"
        key.send_keys(KEY, Keys.ENTER)
        status_contains("memories shown in default")
        listed = [b.text.split("\n")[0] for b in driver.find_elements(By.CSS_SELECTOR, "#collections button")]
        assert listed == ["default", "work"], listed
        rows = driver.find_elements(By.CSS_SELECTOR, "#memories tbody tr")
        contents = {r.find_element(By.CSS_SELECTOR, "td").text for r in rows}
        assert "The user drinks jasmine tea every morning" in contents
        assert "Always answer in British English" in contents
        driver.save_screenshot(str(shots / "memories.png"))

        # Superseded versions on request.
        driver.find_element(By.ID, "list-history").click()
        driver.find_element(By.CSS_SELECTOR, "#list-form button[type=submit]").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#memories tbody tr.superseded"))
        superseded = driver.find_element(By.CSS_SELECTOR, "#memories tbody tr.superseded td").text
        assert superseded == "The user drinks green tea every morning"

        # Keyboard: arrow keys move between the tabs.
        driver.find_element(By.ID, "tab-memories").send_keys(Keys.ARROW_RIGHT)
        wait.until(lambda d: d.find_element(By.ID, "tab-search").get_attribute("aria-selected") == "true")
        assert driver.switch_to.active_element.get_attribute("id") == "tab-search"
        assert driver.find_element(By.ID, "view-search").is_displayed()

        # The write gate's decisions, a duplicate among them.
        driver.find_element(By.ID, "tab-search").send_keys(Keys.ARROW_RIGHT)
        wait.until(lambda d: d.find_element(By.ID, "view-gate").is_displayed())
        driver.find_element(By.CSS_SELECTOR, "#gate-form button[type=submit]").click()
        status_contains("gate decision(s) in default")
        decided = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#decisions tbody tr")]
        assert any("duplicate (" in row and "Ada Lovelace" in row for row in decided), decided
        assert sum("created" in row for row in decided) == 4, decided
        driver.save_screenshot(str(shots / "gate.png"))
        driver.find_element(By.ID, "tab-search").click()

        # Search and see the score breakdown.
        query = driver.find_element(By.ID, "search-query")
        query.send_keys("what does the user drink?", Keys.ENTER)
        status_contains("result(s) for")
        first = driver.find_element(By.CSS_SELECTOR, "#results tbody tr")
        cells = first.find_elements(By.TAG_NAME, "td")
        assert cells[0].text == "The user drinks jasmine tea every morning"
        final = float(cells[1].text)
        assert 0.0 < final <= 1.5 and float(cells[2].text) > 0.0
        # Every part of ScoreBreakdown has its column, showing what the API answers.
        heads = driver.find_elements(By.CSS_SELECTOR, "#results thead th")
        parts = [h.get_attribute("data-part") for h in heads]
        assert sorted(p for p in parts if p) == sorted(f.json_name for f in ScoreBreakdown.DESCRIPTOR.fields)
        with httpx.Client(base_url=base, headers={"authorization": f"Bearer {KEY}"}, timeout=120) as http:
            r = http.post("/v1/memories:search", json={"query": "what does the user drink?", "limit": 10})
        score = r.json()["results"][0]["score"]
        shown = {p: c.text for p, c in zip(parts, cells, strict=True) if p}
        assert shown == {p: f"{score.get(p, 0.0):.3f}" for p in shown}, (shown, score)
        assert score["rerank"] > 0.0  # (an English query: the cross-encoder judged it)
        driver.save_screenshot(str(shots / "search.png"))

        # Inspect the result: facts and version history.
        cells[0].find_element(By.TAG_NAME, "button").click()
        wait.until(ec.visibility_of_element_located((By.ID, "detail")))
        facts = driver.find_element(By.ID, "detail-facts").text
        assert "jasmine tea" in facts and "Version\n2" in facts
        history = driver.find_element(By.ID, "detail-history").text
        assert "green tea" in history
        assert driver.switch_to.active_element.get_attribute("id") == "detail-title"
        driver.save_screenshot(str(shots / "detail.png"))

        # Delete: cancel first (nothing happens), then confirm.
        driver.find_element(By.ID, "delete").click()
        wait.until(lambda d: d.find_element(By.ID, "confirm").get_attribute("open") is not None)
        driver.save_screenshot(str(shots / "confirm-delete.png"))
        driver.find_element(By.ID, "confirm-cancel").click()
        wait.until(lambda d: d.find_element(By.ID, "confirm").get_attribute("open") is None)
        tea = ids["The user drinks green tea every morning"]
        with httpx.Client(base_url=base, headers={"x-api-key": KEY}) as http:
            assert http.get(f"/v1/memories/{tea}").status_code == 200
        driver.find_element(By.ID, "delete").click()
        wait.until(lambda d: d.find_element(By.ID, "confirm").get_attribute("open") is not None)
        driver.find_element(By.ID, "confirm-delete").click()
        status_contains("Deleted 1 memory")
        status_contains("In the trash until")
        with httpx.Client(base_url=base, headers={"x-api-key": KEY}) as http:
            gone = http.get(f"/v1/memories/{tea}")
            assert gone.status_code == 404, gone.text

        # A protected memory needs the explicit "delete anyway".
        driver.find_element(By.ID, "tab-memories").click()
        wait.until(ec.visibility_of_element_located((By.ID, "memories")))
        for row in driver.find_elements(By.CSS_SELECTOR, "#memories tbody tr"):
            if row.text.startswith("Always answer in British English"):
                row.find_element(By.TAG_NAME, "button").click()
                break
        wait.until(lambda d: "British English" in d.find_element(By.ID, "detail-facts").text)
        driver.find_element(By.ID, "delete").click()
        wait.until(lambda d: d.find_element(By.ID, "force-row").is_displayed())
        driver.find_element(By.ID, "confirm-delete").click()
        status_contains("ERROR_REASON_PROTECTED_MEMORY")
        driver.find_element(By.ID, "delete").click()
        wait.until(lambda d: d.find_element(By.ID, "force-row").is_displayed())
        driver.find_element(By.ID, "confirm-force").click()
        driver.find_element(By.ID, "confirm-delete").click()
        status_contains("Deleted 1 memory")

        # Topics: the topic index of "work" and its trigger names; a topic's and a trigger's
        # memories open, and a memory opens in the detail panel.
        with httpx.Client(base_url=base, headers={"x-api-key": KEY}) as http:
            index = http.get("/v1/collections/work/topics").json()
        names = {t["name"] for t in index["topics"]} | {
            c["name"] for t in index["topics"] for c in t.get("children", [])
        }
        assert names and index["memoryCount"] == 3, index
        driver.find_element(By.ID, "tab-topics").click()
        wait.until(ec.visibility_of_element_located((By.ID, "view-topics")))
        field = driver.find_element(By.ID, "topics-collection")
        field.clear()
        field.send_keys("work", Keys.ENTER)
        status_contains("trigger name(s) in work")
        rows = driver.find_elements(By.CSS_SELECTOR, "#topics tbody tr")
        shown_names = {r.find_element(By.TAG_NAME, "button").text for r in rows}
        assert shown_names == names, (shown_names, names)
        first_id = rows[0].find_elements(By.TAG_NAME, "td")[2].text
        assert first_id == index["topics"][0]["id"] and first_id.startswith("t"), first_id
        triggers = driver.find_elements(By.CSS_SELECTOR, "#triggers button")
        assert [b.text for b in triggers] == ["deploy 2"], [b.text for b in triggers]
        driver.save_screenshot(str(shots / "topics.png"))
        rows[0].find_element(By.TAG_NAME, "button").click()
        status_contains("in topic")
        picked = driver.find_elements(By.CSS_SELECTOR, "#picked tbody tr")
        assert len(picked) == index["topics"][0]["size"], [r.text for r in picked]
        assert "Memories in topic" in driver.find_element(By.ID, "picked-title").text
        triggers[0].click()
        status_contains("2 memories for trigger “deploy”")
        picked = driver.find_elements(By.CSS_SELECTOR, "#picked tbody tr")
        assert [r.find_element(By.TAG_NAME, "td").text for r in picked] == [
            "Run the smoke tests before every deploy",
            "Announce the deploy in the ops channel first",
        ]
        picked[0].find_element(By.TAG_NAME, "button").click()
        wait.until(lambda d: "smoke tests" in d.find_element(By.ID, "detail-facts").text)
        assert "trigger:deploy" in driver.find_element(By.ID, "detail-facts").text
        driver.find_element(By.ID, "close-detail").click()

        # The trash: both deleted memories, and a deleted collection; restore with confirmation.
        with httpx.Client(base_url=base, headers={"x-api-key": KEY}) as http:
            assert http.delete("/v1/collections/work").status_code == 200
        driver.find_element(By.ID, "tab-trash").click()
        wait.until(ec.visibility_of_element_located((By.ID, "view-trash")))
        driver.find_element(By.CSS_SELECTOR, "#trash-form button[type=submit]").click()
        status_contains("2 memories in the trash of default")
        trashed = {
            r.find_element(By.TAG_NAME, "td").text: r
            for r in driver.find_elements(By.CSS_SELECTOR, "#trash tbody tr")
        }
        assert set(trashed) == {
            "The user drinks jasmine tea every morning",
            "Always answer in British English",
        }
        collections = driver.find_element(By.ID, "trashed-collections").text
        assert "work" in collections
        driver.save_screenshot(str(shots / "trash.png"))
        restore = trashed["The user drinks jasmine tea every morning"].find_element(By.TAG_NAME, "button")
        restore.click()
        wait.until(lambda d: d.find_element(By.ID, "confirm-restore").get_attribute("open") is not None)
        assert "jasmine tea" in driver.find_element(By.ID, "restore-text").text
        driver.find_element(By.ID, "restore-cancel").click()
        wait.until(lambda d: d.find_element(By.ID, "confirm-restore").get_attribute("open") is None)
        with httpx.Client(base_url=base, headers={"x-api-key": KEY}) as http:
            assert http.get(f"/v1/memories/{tea}").status_code == 404  # cancelled: still in the trash
        restore.click()
        wait.until(lambda d: d.find_element(By.ID, "confirm-restore").get_attribute("open") is not None)
        driver.find_element(By.ID, "restore-confirm").click()
        status_contains("Restored “The user drinks jasmine tea every morning”")
        rows = driver.find_elements(By.CSS_SELECTOR, "#trash tbody tr")
        assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == ["Always answer in British English"]
        with httpx.Client(base_url=base, headers={"x-api-key": KEY}) as http:
            back = http.get(f"/v1/memories/{tea}?includeHistory=true")
            assert back.status_code == 200 and len(back.json()["history"]) == 1, back.text
        driver.find_element(By.CSS_SELECTOR, "#trashed-collections button").click()
        wait.until(lambda d: d.find_element(By.ID, "confirm-restore").get_attribute("open") is not None)
        driver.find_element(By.ID, "restore-confirm").click()
        status_contains("Restored collection work")
        assert "No deleted collections." in driver.find_element(By.ID, "trashed-collections").text
        driver.find_element(By.ID, "tab-memories").click()
        wait.until(ec.visibility_of_element_located((By.ID, "collections")))
        listed = [b.text.split("\n")[0] for b in driver.find_elements(By.CSS_SELECTOR, "#collections button")]
        assert listed == ["default", "work"], listed

        # The key never went into a cookie.
        assert driver.get_cookies() == []
