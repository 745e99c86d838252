-- tokentap's per-request records (docs/records.md, schema version 1) in ClickHouse: the table the
-- records land in (Vector's clickhouse sink, deploy/vector/clickhouse.yaml, or any JSONEachRow insert),
-- and a view that reads each record as the proxy judges it, for the SLO what-ifs of report.sql.
--
--   clickhouse-client --multiquery < deploy/clickhouse/schema.sql
--   clickhouse-client --query 'INSERT INTO tokentap.requests FORMAT JSONEachRow' < requests.jsonl
--
-- One column a record field, same name, same unit (seconds as Float64, like the records and
-- Prometheus). A field the record leaves out ("does not apply") is NULL, an empty array or an all-NULL
-- tuple: never 0, which would be a measurement. Fields a later tokentap adds are skipped on insert
-- (input_format_skip_unknown_fields, on by default; Vector's `skip_unknown_fields: true`) until a
-- column is added for them. Tested with chdb (ClickHouse 26.9) by tests/clickhouse.rs.
CREATE DATABASE IF NOT EXISTS tokentap;

CREATE TABLE IF NOT EXISTS tokentap.requests
(
    v UInt8,
    -- The arrival of the request head, UTC, microseconds (the record's RFC 3339 `start`).
    start DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    id String,
    client_request_id Nullable(String),
    -- Bounded label values (max_models, 8 APIs, tenants.max, 4 outcomes): LowCardinality.
    model LowCardinality(String),
    api LowCardinality(String),
    tenant LowCardinality(Nullable(String)),
    conversation Nullable(String),
    turn Nullable(UInt32),
    think_s Nullable(Float64),
    status Nullable(UInt16),
    outcome LowCardinality(String),
    stream Bool,
    e2e_s Float64,
    ttft_s Nullable(Float64),
    time_to_first_answer_s Nullable(Float64),
    time_to_first_tool_call_s Nullable(Float64),
    reasoning_s Nullable(Float64),
    tpot_s Nullable(Float64),
    generation_s Nullable(Float64),
    output_tokens_per_s Nullable(Float64),
    time_to_response_head_s Nullable(Float64),
    output_tokens Nullable(UInt64),
    output_tokens_source LowCardinality(Nullable(String)),
    input_tokens Nullable(UInt64),
    cached_input_tokens Nullable(UInt64),
    reasoning_tokens Nullable(UInt64),
    gaps UInt64,
    max_gap_s Nullable(Float64),
    itl_p50_s Nullable(Float64),
    itl_p99_s Nullable(Float64),
    goodput Bool,
    slo_missed Array(LowCardinality(String)),
    server Tuple(
        queue_s Nullable(Float64),
        ttft_s Nullable(Float64),
        prefill_s Nullable(Float64),
        generation_s Nullable(Float64)),
    ttft_outside_server_s Nullable(Float64),
    -- Every gap, with request_log.gaps: true (else empty).
    gaps_s Array(Float64) CODEC(ZSTD(1)),
    -- The request's span, when one was sampled (traces:): search the tracing backend by trace_id.
    trace_id Nullable(String),
    span_id Nullable(String)
)
ENGINE = MergeTree
-- A day a partition: old days are dropped whole (the TTL below), and a window of hours reads a
-- few partitions. Within one, a model's records lie together in time order, which is how every
-- query here reads them (a window, per model).
PARTITION BY toDate(start)
ORDER BY (model, start)
TTL toDateTime(start) + INTERVAL 90 DAY DELETE;

-- Each record with the figures the proxy judges SLO ceilings on (src/report/summary.rs `judged`, the
-- same rules as `tokentap report --slo`): the stream figures only for a stream; for a request that did
-- not end `ok`, no TPOT, and its E2E as a lower bound of a TTFT (and a time to first answer) it never
-- had. A NULL figure does not apply and meets its ceiling. `succeeded`: ok and 2xx, the other half of
-- goodput.
--
-- `figures`: the record's values of each figure of `tokentap report` (docs/report.md, "The figures"),
-- as (figure, unit, value), named as the report's JSON keys. Each figure sees the records its
-- Prometheus histogram sees, like the report: TTFT, time to first answer and ISL/OSL from every record
-- that has them (a cancelled stream's first token too); the figures of a whole request (E2E, TPOT,
-- tokens/s per user, the longest gap) only from requests that ended `ok`; every single gap (Inter
-- Chunk Latency) from records that list them all (`gaps_s`, request_log.gaps: true).
CREATE VIEW IF NOT EXISTS tokentap.requests_judged AS
SELECT
    *,
    outcome = 'ok' AS ok,
    ok AND coalesce(status BETWEEN 200 AND 299, false) AS succeeded,
    if(stream, if(ok, ttft_s, coalesce(ttft_s, e2e_s)), NULL) AS judged_ttft_s,
    if(stream, if(ok, time_to_first_answer_s, coalesce(time_to_first_answer_s, e2e_s)), NULL)
        AS judged_time_to_first_answer_s,
    -- Only a call that came is judged (a turn cut off before one is not taken to have waited for one).
    if(stream, time_to_first_tool_call_s, NULL) AS judged_time_to_first_tool_call_s,
    if(stream AND ok, tpot_s, NULL) AS judged_tpot_s,
    -- An `itl` ceiling is judged on the request's longest gap.
    if(stream, max_gap_s, NULL) AS judged_itl_s,
    e2e_s AS judged_e2e_s,
    arrayFilter(x -> x.3 >= 0 AND isFinite(x.3), arrayMap(x -> (x.1, x.2, assumeNotNull(x.3)),
        arrayFilter(x -> x.3 IS NOT NULL, arrayConcat(
            [('time_to_first_token', 's', ttft_s),
             ('time_to_first_output_token', 's', time_to_first_answer_s),
             ('time_to_first_tool_call', 's', time_to_first_tool_call_s),
             ('request_gap_p50', 's', if(gaps > 0, itl_p50_s, NULL)),
             ('request_gap_p99', 's', if(gaps > 0, itl_p99_s, NULL)),
             ('longest_gap', 's', if(ok, max_gap_s, NULL)),
             ('inter_token_latency', 's', if(ok, tpot_s, NULL)),
             ('request_latency', 's', if(ok, toNullable(e2e_s), NULL)),
             ('output_token_throughput_per_user', 'tokens/s', if(ok, output_tokens_per_s, NULL)),
             ('time_to_response_head', 's', time_to_response_head_s),
             ('input_sequence_length', 'tokens', toFloat64(input_tokens)),
             ('output_sequence_length', 'tokens', toFloat64(output_tokens))],
            arrayMap(gap -> ('inter_chunk_latency', 's', toNullable(gap)),
                     if(gaps > 0 AND length(gaps_s) = gaps, gaps_s, []))))))
        AS figures
FROM tokentap.requests;
