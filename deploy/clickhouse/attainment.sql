-- Each SLO ceiling's attainment, as `tokentap report` computes it (docs/report.md, "SLOs: as recorded,
-- or what-if"), from the table and view of schema.sql: for everything and per model, tenant and api,
-- one row a ceiling with the requests that missed it and the share that met it (met / all requests,
-- failures included), both as the proxy recorded it and judged again with a what-if ceiling.
--
--   clickhouse-client --queries-file deploy/clickhouse/attainment.sql \
--     --param_since=2026-12-03T08:00:00Z --param_until=2026-12-03T09:00:00Z \
--     --param_ttft=0.3 --param_tpot=0.04 --param_itl=inf --param_e2e=inf --param_time_to_first_answer=inf \
--     --param_time_to_first_tool_call=inf
--
-- A what-if ceiling of `inf` is not set: no request misses it (the report leaves such a ceiling out,
-- and shows, as recorded, only the ceilings some request missed). Judged on the figures the proxy
-- judges (the `judged_*` columns of the view): a value equal to its ceiling meets it, a figure a
-- request does not have meets it, ITL is judged on the longest gap.
WITH
    kept AS
    (
        SELECT *
        FROM tokentap.requests_judged
        WHERE start >= parseDateTime64BestEffort({since:String}, 6, 'UTC')
          AND start < parseDateTime64BestEffort({until:String}, 6, 'UTC')
    )
SELECT
    g.1 AS by,
    g.2 AS group,
    c.1 AS ceiling,
    if(isInfinite(any(c.2)), NULL, any(c.2)) AS limit_s,
    count() AS requests,
    countIf(c.4) AS missed_recorded,
    (requests - missed_recorded) / requests AS share_recorded,
    countIf(coalesce(c.3 > c.2, false)) AS missed_what_if,
    (requests - missed_what_if) / requests AS share_what_if
FROM kept
ARRAY JOIN
    -- (ceiling, what-if limit, the figure judged, missed as recorded)
    [('ttft', {ttft:Float64}, judged_ttft_s, has(slo_missed, 'ttft')),
     ('tpot', {tpot:Float64}, judged_tpot_s, has(slo_missed, 'tpot')),
     ('itl', {itl:Float64}, judged_itl_s, has(slo_missed, 'itl')),
     ('e2e', {e2e:Float64}, toNullable(judged_e2e_s), has(slo_missed, 'e2e')),
     ('time_to_first_answer', {time_to_first_answer:Float64}, judged_time_to_first_answer_s,
      has(slo_missed, 'time_to_first_answer')),
     ('time_to_first_tool_call', {time_to_first_tool_call:Float64}, judged_time_to_first_tool_call_s,
      has(slo_missed, 'time_to_first_tool_call'))] AS c
ARRAY JOIN [('all', ''), ('model', model), ('tenant', coalesce(tenant, '-')), ('api', api)] AS g
GROUP BY by, group, ceiling
ORDER BY by, group, indexOf(['ttft', 'tpot', 'itl', 'e2e', 'time_to_first_answer', 'time_to_first_tool_call'], ceiling);
