-- Before and after, as `tokentap report BEFORE --compare AFTER` shows them (docs/report.md,
-- "--compare"), from the table and view of schema.sql: two windows (the days before and after a
-- deploy, say), and for everything and per model and tenant, one row a figure and statistic with
-- both values and the change (after − before, and in % of before; NULL where before is 0 or a side
-- has no value).
--
--   clickhouse-client --queries-file deploy/clickhouse/compare.sql \
--     --param_before_since=2026-12-02 --param_before_until=2026-12-03 \
--     --param_after_since=2026-12-03 --param_after_until=2026-12-04
--
-- Statistics: `n`, `avg`, `p50`, `p90`, `p99` (nearest rank, exact, as in figures.sql), `max`. Besides
-- the report's figures (the view's `figures`), `goodput_ratio` and `attainment_<ceiling>` as the proxy
-- recorded them: their `avg` is the share of requests that were goodput, or met that ceiling, and `n`
-- the request count.
WITH
    kept AS
    (
        SELECT
            *,
            multiIf(
                start >= parseDateTime64BestEffort({before_since:String}, 6, 'UTC')
                    AND start < parseDateTime64BestEffort({before_until:String}, 6, 'UTC'), 'before',
                start >= parseDateTime64BestEffort({after_since:String}, 6, 'UTC')
                    AND start < parseDateTime64BestEffort({after_until:String}, 6, 'UTC'), 'after',
                '') AS side
        FROM tokentap.requests_judged
        WHERE side != ''
    ),
    sides AS
    (
        SELECT by, group, figure, unit, side, n, avg, max,
            sorted[toUInt64(greatest(1, ceil(0.5 * n)))] AS p50,
            sorted[toUInt64(greatest(1, ceil(0.9 * n)))] AS p90,
            sorted[toUInt64(greatest(1, ceil(0.99 * n)))] AS p99
        FROM
        (
            SELECT
                side,
                g.1 AS by,
                g.2 AS group,
                f.1 AS figure,
                any(f.2) AS unit,
                count() AS n,
                avg(f.3) AS avg,
                max(f.3) AS max,
                arraySort(groupArray(f.3)) AS sorted
            FROM kept
            ARRAY JOIN arrayConcat(
                figures,
                [('goodput_ratio', 'share', toFloat64(goodput))],
                arrayMap(k -> (concat('attainment_', k), 'share', toFloat64(NOT has(slo_missed, k))),
                         ['ttft', 'tpot', 'itl', 'e2e', 'time_to_first_answer',
                          'time_to_first_tool_call'])) AS f
            ARRAY JOIN [('all', ''), ('model', model), ('tenant', coalesce(tenant, '-'))] AS g
            GROUP BY side, by, group, figure
        )
    )
SELECT
    by,
    group,
    figure,
    unit,
    s.1 AS stat,
    maxIfOrNull(s.2, side = 'before') AS before,
    maxIfOrNull(s.2, side = 'after') AS after,
    after - before AS change,
    if(before = 0, NULL, 100 * change / before) AS change_pct
FROM sides
ARRAY JOIN
    [('n', toFloat64(n)), ('avg', avg), ('p50', p50), ('p90', p90), ('p99', p99), ('max', max)] AS s
WHERE unit != 'share' OR s.1 IN ('n', 'avg')
GROUP BY by, group, figure, unit, stat
ORDER BY by, group, figure, indexOf(['n', 'avg', 'p50', 'p90', 'p99', 'max'], stat);
