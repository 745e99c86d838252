-- The figures of `tokentap report` (docs/report.md, "The figures") from the table of schema.sql: for
-- everything and per model, tenant and api, each figure's count, avg, min, max and nearest-rank p50,
-- p90, p99 (the value at rank ceil(q·n), as the report defines them), one row a figure.
--
--   clickhouse-client --queries-file deploy/clickhouse/figures.sql \
--     --param_since=2026-12-03T08:00:00Z --param_until=2026-12-03T09:00:00Z
--
-- Which records each figure sees: the view's `figures` column (schema.sql).
--
-- The quantiles here are exact: each group's values are sorted in memory (8 bytes a value). The
-- report is exact up to 1,000 values a row and within 0.5 % past that (its bounded sketch), so the two
-- agree within that (tests/clickhouse.rs). For windows of billions of gaps, swap the three
-- `sorted[...]` lines for `quantileDD(0.005, q)(value)`, ClickHouse's own relative-error sketch.
WITH
    kept AS
    (
        SELECT *
        FROM tokentap.requests_judged
        WHERE start >= parseDateTime64BestEffort({since:String}, 6, 'UTC')
          AND start < parseDateTime64BestEffort({until:String}, 6, 'UTC')
    )
SELECT by, group, figure, unit, n, avg, min, max,
    sorted[toUInt64(greatest(1, ceil(0.5 * n)))] AS p50,
    sorted[toUInt64(greatest(1, ceil(0.9 * n)))] AS p90,
    sorted[toUInt64(greatest(1, ceil(0.99 * n)))] AS p99
FROM
(
    SELECT
        g.1 AS by,
        g.2 AS group,
        f.1 AS figure,
        any(f.2) AS unit,
        count() AS n,
        avg(f.3) AS avg,
        min(f.3) AS min,
        max(f.3) AS max,
        arraySort(groupArray(f.3)) AS sorted
    FROM kept
    ARRAY JOIN figures AS f
    ARRAY JOIN [('all', ''), ('model', model), ('tenant', coalesce(tenant, '-')), ('api', api)] AS g
    GROUP BY by, group, figure
)
ORDER BY by, group, figure;
