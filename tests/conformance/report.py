"""Writes a conformance run's results.json as the Markdown table docs/accuracy.md shows.

    python report.py target/conformance/results.json > table.md
"""

import json
import sys


def cell(x):
    return str(x).replace("|", "\\|")


def main(path):
    with open(path) as f:
        run = json.load(f)
    print(f"Run of {run['date']}: " + ", ".join(f"{k} {v}" for k, v in run["versions"].items()) + ".")
    print()
    print("| group | check | tokentap | reference | result |")
    print("|---|---|---|---|---|")
    group = None
    for row in run["rows"]:
        shown = row["group"] if row["group"] != group else ""
        group = row["group"]
        check = row["check"] + (f" ({row['note']})" if row.get("note") else "")
        result = "pass" if row["ok"] else "**FAIL**"
        print(f"| {cell(shown)} | {cell(check)} | {cell(row['tokentap'])} | {cell(row['reference'])} | {result} |")
    failed = sum(not r["ok"] for r in run["rows"])
    print()
    print(f"{len(run['rows']) - failed} passed, {failed} failed.")


if __name__ == "__main__":
    main(sys.argv[1])
