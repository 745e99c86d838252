//! The keys that bound what hostile clients can do: the metrics port's connections, timers and
//! allowed hosts, which model names may take a label (`model_list`), the tenant allowlist and the
//! bearer-hash key. Each default, and each bad value's error naming the key.

use super::*;

#[test]
fn the_metrics_port_keys_have_their_defaults_and_checked_bounds() {
    let d = Config::default();
    assert_eq!(d.timeouts.metrics_send, Duration::from_secs(60));
    assert_eq!(d.timeouts.metrics_header_read, Duration::from_secs(5));
    assert_eq!(d.timeouts.metrics_idle, Duration::from_secs(30));
    assert_eq!(d.limits.max_metrics_connections, 64);
    assert!(d.metrics.allowed_hosts.is_empty());
    let yaml = "timeouts: {metrics_send: 5s, metrics_header_read: 250ms, metrics_idle: 2m}\nlimits: {max_metrics_connections: 8}\nmetrics: {allowed_hosts: [LocalHost, 10.0.0.5, '[::1]', tokentap.example.com]}";
    let c = Config::from_yaml_str(yaml).unwrap();
    assert_eq!(c.timeouts.metrics_send, Duration::from_secs(5));
    assert_eq!(c.timeouts.metrics_header_read, Duration::from_millis(250));
    assert_eq!(c.timeouts.metrics_idle, Duration::from_secs(120));
    assert_eq!(c.limits.max_metrics_connections, 8);
    assert_eq!(
        c.metrics.allowed_hosts,
        ["localhost", "10.0.0.5", "[::1]", "tokentap.example.com"]
    );
    for (yaml, want) in [
        ("timeouts: {metrics_send: 0s}", "timeouts.metrics_send: invalid duration \"0s\": must be greater than zero"),
        ("timeouts: {metrics_header_read: 0s}", "timeouts.metrics_header_read: invalid duration \"0s\": must be greater than zero"),
        ("timeouts: {metrics_idle: 0ms}", "timeouts.metrics_idle: invalid duration \"0ms\": must be greater than zero"),
        ("limits: {max_metrics_connections: 0}", "limits.max_metrics_connections: invalid value \"0\": must be between 1 and 10000"),
        ("metrics: {allowed_hosts: ['localhost:9464']}", "metrics.allowed_hosts[0]: invalid host \"localhost:9464\": must be a host name or an IP address, without a port (e.g. localhost, 10.0.0.5, tokentap.example.com)"),
        ("metrics: {allowed_hosts: ['']}", "metrics.allowed_hosts[0]: invalid host \"\": must be a host name or an IP address, without a port (e.g. localhost, 10.0.0.5, tokentap.example.com)"),
    ] {
        assert_eq!(err(yaml), want, "{yaml}");
    }
}

#[test]
fn the_model_list_is_asked_for_by_default_and_its_keys_are_checked() {
    let d = Config::default().model_list;
    assert!(d.enabled && d.names.is_empty() && d.api_key_file.is_none());
    assert!(d.tokenizer_from_root);
    assert_eq!(d.refresh, Duration::from_secs(60));
    let yaml = "model_list: {enabled: false, refresh: 5m, names: [tgi, my-alias], tokenizer_from_root: false}";
    let c = Config::from_yaml_str(yaml).unwrap().model_list;
    assert!(!c.enabled && !c.tokenizer_from_root);
    assert_eq!(c.refresh, Duration::from_secs(300));
    assert_eq!(c.names, ["tgi", "my-alias"]);
    for (yaml, want) in [
        ("model_list: {refresh: 0s}", "model_list.refresh: invalid duration \"0s\": must be greater than zero"),
        ("model_list: {refresh: 500ms}", "model_list.refresh: invalid duration \"500ms\": must be between 1s and 24h"),
        ("model_list: {names: ['']}", "model_list.names[0]: invalid model name \"\": must be a model name: 1 to 200 bytes, no control characters"),
        ("model_list: {names: [\"a\\nb\"]}", "model_list.names[0]: invalid model name \"a\\nb\": must be a model name: 1 to 200 bytes, no control characters"),
        ("model_list: {api_key_file: /nonexistent/token}", "model_list.api_key_file: invalid path \"/nonexistent/token\": cannot read it: No such file or directory (os error 2)"),
        ("model_list: {url: x}", "model_list.url: not a key of `model_list:`; the keys there are: enabled, refresh, names, api_key_file, tokenizer_from_root"),
    ] {
        assert_eq!(err(yaml), want, "{yaml}");
    }
    let file = std::env::temp_dir().join(format!("tokentap-token-{}", std::process::id()));
    std::fs::write(&file, "\n  sk-token-1  \n").unwrap();
    let yaml = format!("model_list: {{api_key_file: {}}}", file.display());
    let c = Config::from_yaml_str(&yaml).unwrap().model_list;
    assert_eq!(c.api_key().unwrap().as_deref(), Some("sk-token-1"));
    std::fs::write(&file, "   \n").unwrap();
    assert!(c
        .api_key()
        .unwrap_err()
        .to_string()
        .contains("must hold the token on one line"));
    let _ = std::fs::remove_file(&file);
}

#[test]
fn a_hash_key_must_be_32_random_bytes_and_never_a_documented_example() {
    let good = "Yx3Qm0v8pH2wN5rT7sK9dL4fJ6gB1cZ+aE0uI2oR8yA=";
    let yaml = |key: &str| format!("tenants: {{bearer_hash: true, hash_key: \"{key}\"}}");
    assert!(Config::from_yaml_str(&yaml(good)).is_ok());
    let short = "must be at least 32 random bytes (44 characters of base64)";
    let how = "make one with `head -c 32 /dev/urandom | base64` (or `openssl rand -base64 32`)";
    for (key, why) in [
        (
            "at least 16 bytes",
            "is the documented example, which anyone can read",
        ),
        (
            "PASTE-THE-OUTPUT-OF: head -c 32 /dev/urandom | base64",
            "is the documented example, which anyone can read",
        ),
        (
            "a-key-of-sixteen-bytes",
            "is the documented example, which anyone can read",
        ),
        ("0123456789abcdef", short),
        ("short", short),
        // 24 random bytes in base64: 32 characters, 8 bytes short of the key the refusal asks for.
        ("q8Vx2LmR0tZ7bN4cW1yK9pHs3eJ6uGfA", short),
        (&"ab".repeat(24), "must be random bytes, not a pattern"),
    ] {
        let want = format!("tenants.hash_key: invalid key \"(not shown)\": {why}; {how}");
        assert_eq!(err(&yaml(key)), want, "{key}");
    }
    // The example file's line, uncommented as it stands, is refused too.
    let example = include_str!("../../../config/tokentap.yaml");
    let line = example
        .lines()
        .find_map(|l| l.trim_start_matches(['#', ' ']).strip_prefix("hash_key: "))
        .expect("the example shows hash_key");
    let shown = line.split("  #").next().unwrap().trim().trim_matches('"');
    assert!(
        err(&yaml(shown)).contains("is the documented example"),
        "{shown}"
    );
}

#[test]
fn a_tenant_allowlist_takes_values_and_with_the_bearer_hash_only_tags() {
    let c = Config::from_yaml_str("tenants: {header: x-tenant, allow: [acme, beta]}").unwrap();
    assert_eq!(c.tenants.unwrap().allow, ["acme", "beta"]);
    let yaml = "tenants: {bearer_hash: true, allow: [t-0123456789ab]}";
    assert_eq!(
        Config::from_yaml_str(yaml).unwrap().tenants.unwrap().allow,
        ["t-0123456789ab"]
    );
    for (yaml, want) in [
        ("tenants: {header: t, allow: ['']}", "tenants.allow[0]: invalid tenant \"\": must be a tenant value: 1 to 200 bytes, no control characters"),
        ("tenants: {bearer_hash: true, allow: [acme]}", "tenants.allow[0]: invalid tenant \"acme\": with bearer_hash, list tags as they appear in the records and on /metrics (`t-` and 12 hex digits); `tokentap tenant-tag --config FILE` prints a token's tag"),
        ("tenants: {bearer_hash: true, allow: [t-0123456789AB]}", "tenants.allow[0]: invalid tenant \"t-0123456789AB\": with bearer_hash, list tags as they appear in the records and on /metrics (`t-` and 12 hex digits); `tokentap tenant-tag --config FILE` prints a token's tag"),
    ] {
        assert_eq!(err(yaml), want, "{yaml}");
    }
}
