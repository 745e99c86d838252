#!/usr/bin/env python3
"""Runs deploy/clickhouse's SQL in chdb (ClickHouse embedded, PyPI `chdb`) on tokentap record files,
for tests/clickhouse.rs.

Reads one JSON object on stdin:

    {"schema": "deploy/clickhouse/schema.sql",
     "records": ["a.jsonl", "b.jsonl"],
     "queries": [{"file": "deploy/clickhouse/report.sql", "params": {"since": "...", "ttft": "inf"}}]}

creates the table and view of the schema in a fresh on-disk session, inserts every record file as a
user would (`INSERT INTO tokentap.requests FORMAT JSONEachRow`, the file's lines as they are), runs
each query with its parameters (as text, as clickhouse-client's --param_NAME passes them) and prints
one JSON array on stdout: for each query, the list of its rows (JSONEachRow).

`python3 chdb_queries.py --check` exits 0 when chdb imports, else prints why and exits 1.
"""

import json
import sys
import tempfile


def main() -> int:
    try:
        from chdb import session
    except ImportError as error:
        print(f"chdb is not installed: {error}", file=sys.stderr)
        return 1
    if sys.argv[1:] == ["--check"]:
        return 0
    spec = json.load(sys.stdin)
    with tempfile.TemporaryDirectory(prefix="tokentap-chdb-") as path:
        db = session.Session(path)
        with open(spec["schema"], encoding="utf-8") as schema:
            db.query(schema.read())
        for records in spec["records"]:
            with open(records, encoding="utf-8") as lines:
                db.query("INSERT INTO tokentap.requests FORMAT JSONEachRow\n" + lines.read())
        results = []
        for query in spec["queries"]:
            with open(query["file"], encoding="utf-8") as sql:
                text = str(db.query(sql.read(), "JSONEachRow", params=query.get("params", {})))
            results.append([json.loads(line) for line in text.splitlines() if line.strip()])
        db.close()
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
