-- What `tokentap report --format json` says of a window (docs/report.md), from the table of schema.sql:
-- for everything and per model, tenant and api, the request count, first start and duration, the
-- throughputs, goodput as the proxy recorded it and again with what-if ceilings, and the outcomes.
-- figures.sql has the latencies and their quantiles, attainment.sql each ceiling's attainment.
--
--   clickhouse-client --queries-file deploy/clickhouse/report.sql \
--     --param_since=2026-12-03T08:00:00Z --param_until=2026-12-03T09:00:00Z \
--     --param_ttft=0.3 --param_tpot=inf --param_itl=inf --param_e2e=inf --param_time_to_first_answer=inf \
--     --param_time_to_first_tool_call=inf
--
-- Parameters: `since` (kept when start >= since) and `until` (start < until), RFC 3339 or any time
-- ClickHouse reads best-effort; the what-if ceilings in seconds, `inf` for a ceiling not set (one set
-- for every model, like `tokentap report --slo`).
--
-- As in the report: the rates divide by the duration of the whole window (first start to last end of
-- every record kept), also in a group's row, so the groups' rates add up to the total's; a record
-- without a tenant is in tenant `-`. Unlike the report, no group cap (the report sums groups past
-- 1,000 under `other`).
WITH
    kept AS
    (
        SELECT
            *,
            toUnixTimestamp64Micro(start) / 1e6 AS start_s,
            start_s + greatest(e2e_s, 0) AS end_s,
            coalesce(input_tokens, 0) AS input_n,
            coalesce(output_tokens, 0) AS output_n,
            goodput AS recorded_good
        FROM tokentap.requests_judged
        WHERE start >= parseDateTime64BestEffort({since:String}, 6, 'UTC')
          AND start < parseDateTime64BestEffort({until:String}, 6, 'UTC')
    ),
    (SELECT max(end_s) - min(start_s) FROM kept) AS window_s
SELECT
    g.1 AS by,
    g.2 AS group,
    count() AS request_count,
    min(start) AS first_start,
    max(end_s) - min(start_s) AS duration_s,
    request_count / window_s AS request_throughput,
    sum(input_n) AS input_tokens,
    sum(output_n) AS output_tokens,
    input_tokens / window_s AS input_token_throughput,
    output_tokens / window_s AS output_token_throughput,
    -- As recorded: the proxy's own verdict (tokentap_goodput_requests_total).
    countIf(recorded_good) AS good_request_count,
    good_request_count / window_s AS goodput,
    -- What-if: ok, 2xx and every given ceiling met (a figure that does not apply meets its ceiling).
    countIf(
        succeeded
        AND NOT coalesce(judged_ttft_s > {ttft:Float64}, false)
        AND NOT coalesce(judged_tpot_s > {tpot:Float64}, false)
        AND NOT coalesce(judged_itl_s > {itl:Float64}, false)
        AND NOT coalesce(judged_e2e_s > {e2e:Float64}, false)
        AND NOT coalesce(judged_time_to_first_answer_s > {time_to_first_answer:Float64}, false)
        AND NOT coalesce(judged_time_to_first_tool_call_s > {time_to_first_tool_call:Float64}, false)
    ) AS good_request_count_what_if,
    good_request_count_what_if / window_s AS goodput_what_if,
    countIf(gaps > 0) AS requests_with_gaps,
    countIf(gaps > 0 AND length(gaps_s) = gaps) AS requests_with_every_gap,
    -- Requests by outcome and status (`none` when no head reached the client).
    sumMap(map(concat(outcome, ' ', coalesce(toString(status), 'none')), toUInt64(1))) AS outcomes
FROM kept
ARRAY JOIN [('all', ''), ('model', model), ('tenant', coalesce(tenant, '-')), ('api', api)] AS g
GROUP BY by, group
ORDER BY by, group;
