"""The leaderboard site in a real browser: Debian's headless Chromium through Selenium and Debian's
chromedriver (no downloaded browser). Skips without them, unless DAWNBENCH_REQUIRE_BROWSER=1 (CI)."""
from __future__ import annotations

import shutil

import pytest
from conftest import missing
from leaderboard_fixture import (
    EVIL_STEM,
    INFERENCE_COST_ORDER,
    LATENCY_ORDER,
    TRAIN_COST_ORDER,
    TRAIN_TIME_ORDER,
    XSS,
    make_run,
    use_cifar10_labels,
    write_entries,
    write_reproduction,
)

from dawnbench import submit
from dawnbench.cli import main

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def _browser_or_skip():
    absent = [name for name, path in (("chromium", CHROMIUM), ("chromium-driver", CHROMEDRIVER)) if not path]
    try:
        from selenium import webdriver  # noqa: F401
    except ImportError:
        absent.append("selenium (requirements/test.txt)")
    if absent:
        message = f"the browser test needs {', '.join(absent)} (apt-get install chromium chromium-driver)"
        missing(message, "DAWNBENCH_REQUIRE_BROWSER")


@pytest.fixture(scope="module")
def browser():
    _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1600", "--disable-background-networking", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


def no_alert(driver) -> bool:
    from selenium.common.exceptions import NoAlertPresentException
    try:
        _ = driver.switch_to.alert
    except NoAlertPresentException:
        return True
    return False


def image_loaded(driver, css: str) -> int:
    return driver.execute_script(
        "const i = document.querySelector(arguments[0]); return i && i.complete ? i.naturalWidth : 0;", css)


def test_site_in_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By
    tree = write_entries(tmp_path / "entries")
    site = tmp_path / "site"
    assert main(["leaderboard", str(tree), "--out", str(site)]) == 0

    browser.get((site / "index.html").as_uri())
    assert browser.title == "dawnbench leaderboard"
    for table, order in (("train_time", TRAIN_TIME_ORDER), ("train_cost_given", TRAIN_COST_ORDER),
                         ("inference_latency", LATENCY_ORDER), ("inference_cost_given", INFERENCE_COST_ORDER)):
        rows = browser.find_elements(By.CSS_SELECTOR, f"#CIFAR10-{table} tbody tr")
        assert [r.get_attribute("data-entry") for r in rows] == order, table
        assert [r.find_element(By.CSS_SELECTOR, "td").text for r in rows] == [str(k) for k in range(1, len(order) + 1)]
    first = browser.find_element(By.CSS_SELECTOR, "#CIFAR10-train_time tbody tr").find_elements(By.TAG_NAME, "td")
    assert [c.text for c in first[:3]] == ["1", "0:30:00", "$1.53"]
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#CIFAR10-train_time thead th")]
    assert headings[-2:] == ["Verification", "Reproduction"]
    assert {c.text for c in browser.find_elements(By.CSS_SELECTOR, "#CIFAR10-train_time td.reproduction")} == \
        {"not tried"}           # DAWNBench v1 entries: no run to reproduce

    # The hostile entry: its strings appear as text, no element of theirs exists, nothing ran.
    assert no_alert(browser)
    evil = browser.find_element(By.CSS_SELECTOR, "#CIFAR10-train_time tbody tr:nth-child(6)")
    assert evil.get_attribute("data-entry") == EVIL_STEM
    cells = [c.text for c in evil.find_elements(By.TAG_NAME, "td")]
    assert cells[3:6] == [XSS["model"], XSS["author"], XSS["hardware"]]
    assert browser.execute_script("return document.scripts.length") == 0
    assert browser.find_elements(By.CSS_SELECTOR, "svg, img[src='x'], b, [onerror], [onload], [onmouseover]") == []
    assert image_loaded(browser, "#CIFAR10 img.analysis") > 0
    browser.save_screenshot(str(tmp_path / "index.png"))

    # Follow a row to its entry page: the curve loads, the fields are there.
    browser.find_element(By.CSS_SELECTOR, '#CIFAR10-train_time tr[data-entry="dave_dip_v100_pytorch"] a.entry-link').click()
    assert browser.current_url.endswith("/CIFAR10/train/dave_dip_v100_pytorch.html")
    assert browser.find_element(By.TAG_NAME, "h1").text == "dave_dip_v100_pytorch"
    assert image_loaded(browser, "img.curve") > 0
    fields = {r.find_element(By.TAG_NAME, "th").text: r.find_element(By.TAG_NAME, "td").text
              for r in browser.find_elements(By.CSS_SELECTOR, "table.fields tr")}
    assert fields["Time to threshold"].startswith("0:45:00") and fields["Training cost"] == "$1.50"
    assert fields["Rank"] == "4th in training time, 3rd in training cost (submitter-given price)"
    shot = tmp_path / "entry.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert (tmp_path / "index.png").stat().st_size > 10_000

    # The hostile entry's own page: its code URL is text, not a link.
    browser.back()
    browser.find_element(By.CSS_SELECTOR, "#CIFAR10-train_time tbody tr:nth-child(6) a.entry-link").click()
    assert browser.find_element(By.TAG_NAME, "h1").text == EVIL_STEM
    assert image_loaded(browser, "img.curve") > 0
    assert browser.find_elements(By.CSS_SELECTOR, "table.fields a[href^='javascript']") == []
    assert "javascript:alert(1)" in browser.find_element(By.CSS_SELECTOR, "table.fields").text
    assert no_alert(browser) and browser.execute_script("return document.scripts.length") == 0


def test_reproduction_column_in_chromium(browser, tmp_path, monkeypatch, capsys):
    """Entries with a run show what `dawnbench reproduce` found, in the table and on the entry's page."""
    from selenium.webdriver.common.by import By
    use_cifar10_labels(monkeypatch, tmp_path / "labels")
    tree = tmp_path / "entries"
    stems = {}
    for k, author in enumerate(("Same", "Faked", "Untried"), start=3):
        assert submit.main([str(make_run(tmp_path / author, epochs=k)), "--out", str(tree), "--author", author]) == 0
        stems[author] = f"{author}_ResNet-56_1-x-NVIDIA-H100-80GB-HBM3_PyTorch-2.13.0"
    runs = {a: tree / "CIFAR10" / "train" / f"{s}.run" for a, s in stems.items()}
    write_reproduction(runs["Same"])
    faked = write_reproduction(runs["Faked"], tta_factor=5.0)
    site = tmp_path / "site"
    assert main(["leaderboard", str(tree), "--out", str(site)]) == 0
    capsys.readouterr()

    browser.get((site / "index.html").as_uri())
    cells = {r.get_attribute("data-entry"): r.find_element(By.CSS_SELECTOR, "td.reproduction").text
             for r in browser.find_elements(By.CSS_SELECTOR, "#CIFAR10-train_time tbody tr")}
    assert cells == {stems["Same"]: "reproduced", stems["Faked"]: f"not reproduced: {faked['differences'][0]}",
                     stems["Untried"]: "not tried"}
    assert "claimed" in cells[stems["Faked"]] and "reproduced (+400%" in cells[stems["Faked"]]
    browser.find_element(By.CSS_SELECTOR, f'#CIFAR10-train_time tr[data-entry="{stems["Faked"]}"] a.entry-link').click()
    fields = {r.find_element(By.TAG_NAME, "th").text: r.find_element(By.TAG_NAME, "td").text
              for r in browser.find_elements(By.CSS_SELECTOR, "table.fields tr")}
    assert fields["Reproduction"] == cells[stems["Faked"]] and fields["Verification"] == "verified"
