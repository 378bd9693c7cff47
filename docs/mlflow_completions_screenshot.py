"""The screenshots in docs/mlflow-completions-run.png and docs/mlflow-completions-compare.png: a GRPO run's page
with its watch table (every probe answer of every check), and the two `evaluate` runs' replies side by side in
the runs page's evaluation view, in a real browser (Debian's chromium through Playwright; neither is a dependency
of the project).

    mlflow ui --backend-store-uri sqlite:///mlflow.db --port 5055 &     # in a pipeline copy that has run
    python docs/mlflow_completions_screenshot.py http://127.0.0.1:5055 <experiment id> <grpo run id> docs/
"""
import sys
from playwright.sync_api import sync_playwright

base, experiment, run, out = sys.argv[1:5]


def quiet(page):
    """Dismiss the first-visit notice and the assistant panel, when they show."""
    for name in ("Got it",):
        try:
            page.get_by_text(name, exact=True).first.click(timeout=1500)
        except Exception:
            pass
    try:
        page.locator("button[aria-label*='lose']").last.click(timeout=1500)
    except Exception:
        pass
    page.wait_for_timeout(1000)


with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    page = browser.new_page(viewport={"width": 1700, "height": 820})
    page.goto(f"{base}/#/experiments/{experiment}/runs/{run}/artifacts")
    page.wait_for_timeout(6000)
    quiet(page)
    page.get_by_text("watch_completions.json", exact=True).first.click(timeout=5000)
    page.wait_for_timeout(4000)
    page.screenshot(path=f"{out}/mlflow-completions-run.png")
    page.goto(f"{base}/#/experiments/{experiment}/runs?compareRunsMode=ARTIFACT")
    page.wait_for_timeout(7000)
    quiet(page)
    try:  # compare the runs on their replies rather than the first column
        page.get_by_text("Compare:", exact=False).first.click(timeout=3000)
        page.wait_for_timeout(800)
        page.get_by_role("option", name="completion").first.click(timeout=3000)
    except Exception as exc:
        print("compare by completion:", exc)
    page.wait_for_timeout(3000)
    page.screenshot(path=f"{out}/mlflow-completions-compare.png")
    browser.close()
