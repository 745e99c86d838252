//! The SLO keys as a whole: defaults, per-model and per-tenant ceilings merged key by key, the
//! boundaries they add to the histograms, and the errors that name an SLO key.

use super::*;

#[test]
fn per_model_override_merges_field_by_field_over_the_default() {
    let slo = Config::from_yaml_str(FULL).unwrap().slo;
    let llama = slo.ceilings_for("llama-3.1-70b");
    assert_eq!(
        all(llama),
        [ms(1000), ms(50), ms(250), ms(60_000), None, None]
    );
    assert_eq!(slo.ceilings_for("some-other-model"), slo.default);
    let only_model = Config::from_yaml_str("slo: {models: {m: {itl: 1s}}}").unwrap();
    assert_eq!(
        all(only_model.slo.ceilings_for("m")),
        [None, None, ms(1000), None, None, None]
    );
    assert_eq!(only_model.slo.ceilings_for("x"), Ceilings::default());
    assert_eq!(
        SloKind::ALL.map(SloKind::as_str),
        [
            "ttft",
            "tpot",
            "itl",
            "e2e",
            "time_to_first_answer",
            "time_to_first_tool_call"
        ]
    );
}

#[test]
fn time_to_first_answer_is_a_ceiling_by_default_and_per_model_validated_like_the_others() {
    let yaml = "slo: {ttft: 500ms, time_to_first_answer: 8s, models: {r1: {time_to_first_answer: 30s}, small: {ttft: 1s}}}";
    let slo = Config::from_yaml_str(yaml).unwrap().slo;
    assert_eq!(slo.default[SloKind::TimeToFirstAnswer], ms(8_000));
    assert_eq!(
        slo.ceilings_for("r1")[SloKind::TimeToFirstAnswer],
        ms(30_000)
    );
    assert_eq!(slo.ceilings_for("r1")[SloKind::Ttft], ms(500));
    assert_eq!(
        slo.ceilings_for("small")[SloKind::TimeToFirstAnswer],
        ms(8_000)
    );
    assert_eq!(slo.boundaries(SloKind::TimeToFirstAnswer), [8.0, 30.0]);
    let bad = err("slo: {models: {r1: {time_to_first_answer: soon}}}");
    assert!(
        bad.starts_with("slo.models.r1.time_to_first_answer: invalid duration \"soon\""),
        "{bad}"
    );
    let zero = err("slo: {time_to_first_answer: 0s}");
    assert!(zero.starts_with("slo.time_to_first_answer: "), "{zero}");
    assert!(zero.contains("0s"), "{zero}");
    assert_eq!(
        Config::default().slo.default[SloKind::TimeToFirstAnswer],
        None
    );
}

#[test]
fn boundaries_collect_every_ceiling_sorted_and_deduplicated() {
    let yaml =
        "slo: {ttft: 500ms, models: {a: {ttft: 2s}, b: {ttft: 0.5s, e2e: 1m}, c: {ttft: 100ms}}}";
    let slo = Config::from_yaml_str(yaml).unwrap().slo;
    assert_eq!(slo.boundaries(SloKind::Ttft), [0.1, 0.5, 2.0]);
    assert_eq!(slo.boundaries(SloKind::E2e), [60.0]);
    assert!(slo.boundaries(SloKind::Itl).is_empty());
}

#[test]
fn a_tenants_ceiling_wins_over_its_models_which_wins_over_the_default() {
    let yaml = "slo: {ttft: 1s, e2e: 60s, models: {m: {ttft: 800ms, tpot: 50ms}}}\ntenants: {header: t, slo: {acme: {ttft: 300ms}}}";
    let slo = Config::from_yaml_str(yaml).unwrap().slo;
    assert_eq!(
        all(slo.ceilings_for_request("m", Some("acme"))),
        [ms(300), ms(50), None, ms(60_000), None, None]
    );
    assert_eq!(
        all(slo.ceilings_for_request("m", Some("other"))),
        [ms(800), ms(50), None, ms(60_000), None, None]
    );
    assert_eq!(
        all(slo.ceilings_for_request("x", None)),
        [ms(1000), None, None, ms(60_000), None, None]
    );
    assert_eq!(slo.boundaries(SloKind::Ttft), vec![0.3, 0.8, 1.0]);
}

#[test]
fn unknown_key_under_slo_is_named_with_its_path() {
    let want = "slo.p99: not a key of `slo:`; the keys there are: ttft, tpot, itl, e2e, time_to_first_answer, time_to_first_tool_call, models";
    assert_eq!(err("slo:\n  ttft: 1s\n  p99: 2s\n"), want);
}

#[test]
fn unknown_key_under_a_model_override_is_named_with_its_path() {
    let want = "slo.models.llama-3.1-70b.ttf: not a key of `slo.models.llama-3.1-70b:` (did you mean `ttft`?); the keys there are: ttft, tpot, itl, e2e, time_to_first_answer, time_to_first_tool_call";
    assert_eq!(
        err("slo:\n  models:\n    llama-3.1-70b:\n      ttf: 1s\n"),
        want
    );
}
