"""The watchers page's search box and pager in Chromium, at 10,000 watchers (issue 42).

``sharedstream web`` runs as a process on the ``scale`` database (conftest.py); the page
is used as a reader does: type part of a name, submit, go to the next page and back.
Once with JavaScript off (the search is a form, the pager links: the console works
without script) and once with it on, where the live part's refresh keeps the page the
reader is on. Every wait is Playwright's polling ``expect``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from bench.console_pages import console, watcher_name
from playwright.sync_api import Browser, Page, expect

pytestmark = pytest.mark.e2e
expect.set_options(timeout=30_000)


@pytest.fixture(scope="module")
def base(scale: Any) -> Iterator[str]:
    with console(scale.url) as url:
        yield url


def shown(page: Page) -> list[str]:
    found: list[str] = page.locator("#watchers tr.watcher").evaluate_all(
        "rows => rows.map(r => r.dataset.watcher)")
    return found


def search_and_page(page: Page, base: str) -> None:
    page.goto(f"{base}/watchers")
    expect(page.locator("#count-watchers")).to_have_text("10010")
    expect(page.locator("#watchers tr.watcher")).to_have_count(50)
    box = page.locator('#watcher-search input[name="q"]')
    box.fill("R-042")  # any case
    box.press("Enter")
    expect(page.locator("#count-watchers")).to_have_text("100")
    expect(page.locator("#watchers tr.watcher")).to_have_count(50)
    assert shown(page) == [watcher_name(4200 + i) for i in range(50)]
    expect(page.locator(".pager")).to_contain_text("1\N{EN DASH}50 of 100")
    page.get_by_role("link", name="next").click()
    expect(page).to_have_url(re.compile(r"offset=50"))
    expect(page.locator(".pager")).to_contain_text("51\N{EN DASH}100 of 100")
    assert shown(page) == [watcher_name(4250 + i) for i in range(50)]
    expect(box).to_have_value("R-042")  # the search stays in the box
    page.get_by_role("link", name="previous").click()
    expect(page.locator(".pager")).to_contain_text("1\N{EN DASH}50 of 100")


def test_the_watchers_search_and_pager_work_without_javascript(browser: Browser,
                                                               base: str) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        search_and_page(context.new_page(), base)
    finally:
        context.close()


def test_the_live_refresh_keeps_the_searched_page(browser: Browser, base: str,
                                                  scale: Any) -> None:
    scale.heartbeat.beat()
    context = browser.new_context()
    try:
        page = context.new_page()
        search_and_page(page, base)
        page.get_by_role("link", name="next").click()
        page.wait_for_function(
            "() => +document.getElementById('live').dataset.refreshed >= 2")
        expect(page.locator(".pager")).to_contain_text("51\N{EN DASH}100 of 100")
        assert shown(page) == [watcher_name(4250 + i) for i in range(50)]
    finally:
        context.close()
