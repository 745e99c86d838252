//! `tokentap check-config` as a user runs it: every problem of a broken file, each with its line and key,
//! in words for someone who writes YAML; the verdict on the shipped example (quiet where there is no
//! model cache) and on a multi-LoRA `max_models`; the TLS pair, the tokenizers it finds, the tenant
//! hash key; the exit status.

use crate::support;

use support::{stdout_of, tokentap, Scratch};

/// `tokentap check-config FILE`, run to its end.
fn check_config(file: impl AsRef<std::ffi::OsStr>) -> std::process::Output {
    tokentap()
        .arg("check-config")
        .arg(file)
        .output()
        .expect("run")
}

#[test]
fn check_config_accepts_the_shipped_example() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/tokentap.yaml");
    assert!(stdout_of(tokentap().args(["check-config", example])).contains("ok"));
}

#[test]
fn check_config_rejects_bad_values_naming_key_and_value() {
    let cases = [
        ("slo:\n  ttft: fast\n", ["slo.ttft", "fast"]),
        (
            "slo:\n  models:\n    llama:\n      tpot: -5ms\n",
            ["slo.models.llama.tpot", "-5ms"],
        ),
        (
            "upstream: ftp://example.com\n",
            ["upstream", "ftp://example.com"],
        ),
        ("max_models: 0\n", ["max_models", "0"]),
    ];
    let scratch = Scratch::new("bad-values");
    for (i, (yaml, needles)) in cases.iter().enumerate() {
        let path = scratch.write(&format!("bad{i}.yaml"), yaml);
        let out = check_config(&path);
        assert!(!out.status.success(), "accepted {yaml:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "message for {yaml:?} lacks {needle:?}: {stderr}"
            );
        }
    }
}

/// Ten broken files, as people break them: every problem of each is reported (not only the first), each
/// as `file:line: key: …` in words for someone who writes YAML, and the exit status says it failed.
#[test]
fn check_config_reports_every_problem_of_ten_broken_files_with_key_and_line() {
    let cases: [(&str, &[&str]); 10] = [
        // Three value errors in one file: all three, in line order.
        (
            "max_models: -3\nshutdown_grace: 5\ntimeouts:\n  connect: 1x\n",
            &[
                ":1: max_models: must be a whole number (0 or more), not -3",
                ":2: shutdown_grace: invalid duration \"5\": expected a number followed by",
                ":4: timeouts.connect: invalid duration \"1x\"",
            ],
        ),
        // An indentation slip: said as one, not as a bad duration.
        (
            "slo:\n  ttft: 500ms\n   tpot: 50ms\n",
            &[":3: line 3 (`tpot: 50ms`) is indented further than `ttft` on line 2"],
        ),
        (
            "slo:\n  ttft: 500ms\n   tpot 50ms\n",
            &[":3: slo.ttft: line 3 (`tpot 50ms`) is indented further than `ttft` on line 2"],
        ),
        // A ceiling that lost its indentation, and a limit under the timeouts.
        (
            "slo:\n  ttft: 500ms\ntpot: 50ms\ntimeouts:\n  max_connections: 5\n",
            &[
                ":3: tpot: not a key at the top level (`tpot` is a key of `buckets:`, `slo:`: is it indented under one of them?)",
                ":5: timeouts.max_connections: not a key of `timeouts:` (`max_connections` is a key of `limits:`, `capture:`: is it indented under one of them?)",
            ],
        ),
        // Typos, with what was meant.
        (
            "lisen: 0.0.0.0:8080\nmetrics:\n  idle: 1h\n",
            &[
                ":1: lisen: not a key at the top level (did you mean `listen`?)",
                ":3: metrics.idle: not a key of `metrics:` (did you mean `model_idle`?)",
            ],
        ),
        // Wrong types in plain words.
        (
            "max_models: many\nui:\n  enabled: yes please\nbuckets:\n  itl: [0.1, fast]\n",
            &[
                ":1: max_models: must be a whole number (0 or more), not the text \"many\"",
                ":3: ui.enabled: must be true or false, not the text \"yes please\"",
                ":5: buckets.itl[1]: must be a number, not the text \"fast\"",
            ],
        ),
        // Checks across keys and of values, each on its line.
        (
            "listen: 0.0.0.0:8080\nmetrics_listen: 0.0.0.0:8080\nbuckets:\n  ttft: [0.1, 0.5, 0.5]\n",
            &[
                ":2: metrics_listen: invalid address \"0.0.0.0:8080\": must differ from listen",
                ":4: buckets.ttft[2]: invalid bucket boundary \"0.5\"",
            ],
        ),
        // A model's ceilings: a typo and a zero.
        (
            "slo:\n  models:\n    llama-3.1-70b:\n      ttf: 1s\n    qwen:\n      e2e: 0s\n",
            &[
                ":4: slo.models.llama-3.1-70b.ttf: not a key of `slo.models.llama-3.1-70b:` (did you mean `ttft`?)",
                ":6: slo.models.qwen.e2e: invalid duration \"0s\": must be greater than zero",
            ],
        ),
        // YAML itself refuses: a tab, and a key written twice.
        (
            "slo:\n\tttft: 1s\n",
            &[":2: the file is not valid YAML: ", "(YAML indents with spaces, never tabs)"],
        ),
        (
            "upstream: http://a:8000\nupstream: http://b:8000\n",
            &[":2: upstream: written twice (each key once per mapping)"],
        ),
    ];
    let scratch = Scratch::new("ten-broken");
    for (i, (yaml, said)) in cases.iter().enumerate() {
        let path = scratch.write(&format!("broken{i}.yaml"), yaml);
        let out = check_config(&path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{yaml:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{yaml:?}");
        for needle in *said {
            assert!(
                stderr.contains(needle),
                "{yaml:?}: no {needle:?} in\n{stderr}"
            );
        }
        assert!(
            !stderr.contains("usize") && !stderr.contains("invalid type"),
            "{stderr}"
        );
        let problems = stderr
            .lines()
            .filter(|l| {
                l.split(".yaml:")
                    .nth(1)
                    .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
            })
            .count();
        let lines = said.iter().filter(|s| s.starts_with(':')).count();
        assert_eq!(problems, lines, "{yaml:?}: one line a problem:\n{stderr}");
        if lines > 1 {
            let counted = format!("{}: {lines} problems", path.display());
            assert!(stderr.contains(&counted), "{stderr}");
        }
    }
}

#[test]
fn check_config_is_quiet_on_the_shipped_example_without_a_model_cache_and_takes_500_models() {
    let scratch = Scratch::new("quiet");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/tokentap.yaml");
    let out = tokentap()
        .args(["check-config", example])
        // A machine with no HuggingFace cache: the default search root does not exist.
        .env("HOME", &scratch.0)
        .env_remove("HF_HOME")
        .env_remove("HF_HUB_CACHE")
        .output()
        .expect("run");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "the log says more than stdout: {stderr}");
    // Without the `tokenizer` feature nothing is looked for, and it says so.
    let said = match cfg!(feature = "tokenizer") {
        true => "(the HuggingFace cache): none there yet",
        false => "tokenizer discovery by name: off",
    };
    assert!(stdout.contains(said), "{stdout}");
    let many = scratch.write("adapters.yaml", "max_models: 500\n");
    stdout_of(tokentap().arg("check-config").arg(&many));
}

#[test]
fn check_config_reads_the_listen_tls_pair_and_names_what_is_wrong_with_it() {
    let tls = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");
    let scratch = Scratch::new("listen-tls");
    let pair =
        |key: &str| format!("listen_tls: {{cert_file: {tls}/server.pem, key_file: {tls}/{key}}}\n");
    let good = scratch.write("good.yaml", &pair("server.key"));
    let out = check_config(&good);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("listen_tls: ") && stdout.contains("(1 certificate(s) in the chain)"),
        "{stdout}"
    );
    let bad = scratch.write("bad.yaml", &pair("rotated.key"));
    let out = check_config(&bad);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let said = format!("listen_tls.key_file: {tls}/rotated.key: is not the key of the certificate in {tls}/server.pem");
    assert!(stderr.contains(&said), "{stderr}");
}

#[test]
fn check_config_checks_tokenizers_as_this_binary_can_use_them() {
    let words = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tokenizer/words.json"
    );
    let not_json = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let scratch = Scratch::new("tokenizers");
    let run = |name: &str, path: &str| {
        let config = scratch.write(name, &format!("tokenizers:\n  my-model: {path}\n"));
        let out = check_config(&config);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stderr)
    };
    let (ok, stderr) = run("tok-words.yaml", words);
    let (bad_ok, bad_stderr) = run("tok-bad.yaml", not_json);
    assert!(!bad_ok, "accepted a tokenizer that is not one");
    assert!(bad_stderr.contains("tokenizers.my-model"), "{bad_stderr}");
    if cfg!(feature = "tokenizer") {
        assert!(ok, "{stderr}");
    } else {
        assert!(!ok, "a binary without the feature accepted a tokenizer");
        assert!(
            stderr.contains("built without the `tokenizer` feature"),
            "{stderr}"
        );
    }
}

const FROM_ROOT_ON: &str = "tokenizer from the upstream's model list (a served model's root): on";

#[test]
fn check_config_lists_each_tokenizer_it_found_for_which_model_and_where_it_looks() {
    let words = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tokenizer/words.json"
    );
    let scratch = Scratch::new("discovery");
    let dir = scratch.0.join("discovery");
    let place = |relative: &str| {
        let path = dir.join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::copy(words, &path).expect("copy");
        path
    };
    let in_hub = place("hub/models--org--words/snapshots/abc/tokenizer.json");
    let in_dir = place("models/llama/tokenizer.json");
    let (hub, models) = (dir.join("hub"), dir.join("models"));
    let yaml = format!(
        "tokenizers:\n  m: {words}\ntokenizer_dirs: [{}, {}, /nonexistent/tokenizers]\n",
        hub.display(),
        models.display()
    );
    let run = |name: &str, yaml: &str| {
        let config = scratch.write(name, yaml);
        let out = check_config(&config);
        let (stdout, stderr) = (out.stdout, out.stderr);
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        (out.status.success(), text(stdout), text(stderr))
    };
    let (ok, stdout, stderr) = run("discovery.yaml", &yaml);
    if !cfg!(feature = "tokenizer") {
        assert!(!ok, "a binary without the feature accepted tokenizer_dirs");
        assert!(
            stderr.contains("built without the `tokenizer` feature"),
            "{stderr}"
        );
        return;
    }
    assert!(ok, "{stderr}");
    let expected = [
        format!("tokenizer for model `m`: {words} (configured)"),
        format!(
            "tokenizer discovery under {}: 1 model(s) found now (each loaded when its model is first served)",
            hub.display()
        ),
        format!("  tokenizer for model `org/words`: {}", in_hub.display()),
        format!(
            "tokenizer discovery under {}: 1 model(s) found now (each loaded when its model is first served)",
            models.display()
        ),
        format!("  tokenizer for model `llama`: {}", in_dir.display()),
        "tokenizer discovery under /nonexistent/tokenizers: not a directory (yet); looked in again for each new model".to_owned(),
        FROM_ROOT_ON.to_owned(),
    ];
    let bound = "series bound: at most 750000 series: ";
    assert!(
        stdout.lines().nth(1).is_some_and(|l| l.starts_with(bound)),
        "{stdout}"
    );
    let lines: Vec<&str> = stdout.lines().skip(2).collect();
    assert_eq!(lines, expected, "{stdout}");
    let (ok, stdout, stderr) = run("discovery-off.yaml", "tokenizer_dirs: []\n");
    assert!(ok, "{stderr}");
    let off = format!("\ntokenizer discovery by name: off\n{FROM_ROOT_ON}\n");
    assert!(stdout.ends_with(&off), "{stdout}");
    let yaml = "tokenizer_dirs: []\nmodel_list: {tokenizer_from_root: false}\n";
    let (ok, stdout, stderr) = run("from-root-off.yaml", yaml);
    assert!(ok, "{stderr}");
    let off = "\ntokenizer from the upstream's model list (a served model's root): off\n";
    assert!(stdout.ends_with(off), "{stdout}");
}

#[test]
fn check_config_refuses_a_short_or_documented_hash_key_and_says_how_to_make_one() {
    // With a key anyone can read (the one the example showed), a six-digit token was found again
    // from its tenant tag in 1.4 s.
    let scratch = Scratch::new("hash-key");
    for key in ["at least 16 bytes", "0123456789abcdef0123"] {
        let yaml = format!("tenants: {{bearer_hash: true, hash_key: \"{key}\"}}\n");
        let path = scratch.write("hash-key.yaml", &yaml);
        let out = check_config(&path);
        assert!(!out.status.success(), "accepted {key:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("tenants.hash_key"), "{stderr}");
        assert!(
            stderr.contains("head -c 32 /dev/urandom | base64"),
            "{stderr}"
        );
        assert!(!stderr.contains(key), "the key is shown: {stderr}");
    }
}

#[test]
fn check_config_rejects_unknown_keys() {
    let scratch = Scratch::new("unknown-keys");
    let path = scratch.write("unknown.yaml", "slo:\n  ttft: 1s\n  tffts: 2s\n");
    let out = check_config(&path);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("tffts"));
}

/// What start refuses, check-config refuses in the same words, on the key's line (issue 51: one plan,
/// `src/app/plan.rs`): a request_log path whose directory does not exist (check-config said `ok`
/// before), a tokenizer file that is not one, a `listen_tls` pair that does not match.
#[test]
fn check_config_refuses_what_start_refuses_in_starts_words_on_the_keys_line() {
    let tls = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");
    let not_json = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let scratch = Scratch::new("one-plan");
    let head = "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nmodel_list: {enabled: false}\n";
    let cases = [
        (
            "request-log.yaml",
            "request_log:\n  path: /nonexistent/dir/records.jsonl\n".to_owned(),
            5,
        ),
        (
            "tokenizer.yaml",
            format!("tokenizers:\n  m: {not_json}\n"),
            5,
        ),
        (
            "tls.yaml",
            format!("listen_tls:\n  cert_file: {tls}/server.pem\n  key_file: {tls}/rotated.key\n"),
            6,
        ),
    ];
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    for (name, yaml, line) in cases {
        // Without the `tokenizer` feature a tokenizer file is refused as the file is read (the build has
        // no tokenizers: `check_config`'s other tests hold that), before the plan it is here to show.
        if name == "tokenizer.yaml" && cfg!(not(feature = "tokenizer")) {
            continue;
        }
        let path = scratch.write(name, &format!("{head}{yaml}"));
        let config = tokentap::Config::load(&path).expect("a valid file");
        let started = runtime.block_on(tokentap::start(&config));
        let Err(refused) = started else {
            panic!("start accepted {name}");
        };
        let words = refused.to_string();
        let out = check_config(&path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "check-config accepted {name}");
        let said = format!("{}:{line}: {words}", path.display());
        assert!(
            stderr.contains(&said),
            "{name}: wanted {said:?}, got {stderr}"
        );
    }
}
