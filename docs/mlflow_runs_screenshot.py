"""The screenshot in docs/mlflow-runs-by-experiment.png: the runs page of `mascot-reward-model`, filtered to
one baseline commit's DVC experiments and grouped by `dvc_exp_name`, in a real browser (Debian's chromium
through Playwright; neither is a dependency of the project).

    dvc exp run -n rm-lr-1e-3 -S train_rm.learning_rate=1e-3 train_rm   # (on the tiny profile: minutes)
    dvc exp run -n rm-lr-5e-3 -S train_rm.learning_rate=5e-3 train_rm
    mlflow ui --backend-store-uri sqlite:///mlflow.db --port 5055 &
    python docs/mlflow_runs_screenshot.py http://127.0.0.1:5055 out.png <experiment id> <baseline commit>
"""
import sys
import urllib.parse
from playwright.sync_api import sync_playwright
base, out, experiment, baseline = sys.argv[1:5]
flt = f"tags.dvc_exp_baseline_rev = '{baseline}'"
with sync_playwright() as p:
    b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    page = b.new_page(viewport={"width": 1700, "height": 820})
    page.goto(base + f"/#/experiments/{experiment}/runs?searchFilter=" + urllib.parse.quote(flt))
    page.wait_for_timeout(5000)
    for text in ["Got it"]:
        try: page.get_by_text(text, exact=True).first.click(timeout=1500)
        except Exception as e: print("no", text)
    try:
        page.get_by_text("Model training", exact=True).first.click(timeout=2000); page.wait_for_timeout(2500)
    except Exception as e: print("no model training")
    try:
        page.locator("button[aria-label*='lose']").first.click(timeout=1500)
    except Exception as e: print("no close")
    page.wait_for_timeout(2000)
    page.get_by_text("Group by", exact=True).first.click(timeout=3000)
    page.wait_for_timeout(1500)
    page.screenshot(path=out.replace(".png", "_menu.png"))
    try:
        page.get_by_text("dvc_exp_name", exact=True).first.click(timeout=3000)
    except Exception as e:
        print("no dvc_exp_name item", e)
    page.wait_for_timeout(1500)
    page.keyboard.press("Escape")
    page.wait_for_timeout(1500)
    page.screenshot(path=out)
    print(page.url)
    b.close()
