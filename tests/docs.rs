//! The documentation's links lead somewhere. Every relative link in README.md and docs/**/*.md (inline,
//! image or reference definition, outside code) names a file or folder that exists, and a `#anchor` into
//! a Markdown page names one of its headings (as GitHub spells heading anchors) or an `<a id>`. The
//! README, the landing page, links every page under docs/. Pages move; these checks make their links
//! follow them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// README.md and every Markdown page under docs/, as paths relative to the repository root.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(Path::new(ROOT).join(dir))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().file_name())
            .collect();
        entries.sort();
        for name in entries {
            let path = dir.join(name);
            if Path::new(ROOT).join(&path).is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = vec![PathBuf::from("README.md")];
    walk(Path::new("docs"), &mut pages);
    pages
}

/// The text with fenced code blocks and inline code spans blanked out (newlines kept, so offsets and line
/// numbers still match the file): what is left is prose, headings and links.
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fence: Option<String> = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        let opens = marker.len() >= 3 && marker.chars().all(|c| c == marker.as_bytes()[0] as char);
        let in_code = match &fence {
            Some(open) => {
                if opens
                    && marker.starts_with(open.as_str())
                    && trimmed[marker.len()..].trim().is_empty()
                {
                    fence = None;
                }
                true
            }
            None if opens => {
                fence = Some(marker);
                true
            }
            None => false,
        };
        if in_code {
            out.extend(line.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        } else {
            out.push_str(line);
        }
    }
    blank_code_spans(&out)
}

/// A run of n backticks opens a code span that the next run of exactly n backticks closes; an unclosed
/// run is literal text.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let run = |at: usize| chars[at..].iter().take_while(|&&c| c == '`').count();
    let mut out = chars.clone();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let n = run(i);
        let mut j = i + n;
        let close = loop {
            match chars[j..].iter().position(|&c| c == '`') {
                None => break None,
                Some(k) => {
                    let m = run(j + k);
                    if m == n {
                        break Some(j + k);
                    }
                    j += k + m;
                }
            }
        };
        match close {
            Some(close) => {
                for c in &mut out[i..close + n] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = close + n;
            }
            None => i += n,
        }
    }
    out.into_iter().collect()
}

/// Every link target in the prose, with its line number: `[text](target)`, `![alt](target)` and
/// reference definitions `[name]: target`.
fn links(prose: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (index, line) in prose.lines().enumerate() {
        let number = index + 1;
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            if let Some(end) = trimmed.find("]:") {
                if let Some(target) = trimmed[end + 2..].split_whitespace().next() {
                    found.push((number, target.to_string()));
                    continue;
                }
            }
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let mut depth = 0;
            let end = after
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    _ => false,
                })
                .map(|(i, _)| i)
                .unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            found.push((number, target.to_string()));
            rest = &after[end.min(after.len())..];
        }
    }
    found
}

/// A heading's anchor as GitHub makes it: lowercase, letters, digits, `-` and `_` kept, spaces become
/// `-`, everything else dropped (so `` `tokentap top --prometheus` `` gives `tokentap-top---prometheus`).
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a page offers: its headings' slugs (a repeated one gets `-1`, `-2`, … as on GitHub) and
/// every `<a id="…">` or `name="…"`. Headings are read from the raw text outside fences, since a heading's
/// code spans are part of its anchor.
fn anchors(text: &str) -> BTreeSet<String> {
    let prose_text = prose(text);
    let mut seen = BTreeSet::new();
    for (raw, masked) in text.lines().zip(prose_text.lines()) {
        let masked = masked.trim_start();
        let level = masked.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&level) && masked[level..].starts_with(' ') {
            let heading = raw.trim_start()[level..].trim().trim_end_matches('#');
            let base = slug(heading);
            let mut anchor = base.clone();
            let mut n = 0;
            while seen.contains(&anchor) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
            seen.insert(anchor);
        }
    }
    for key in ["id=\"", "name=\""] {
        for (at, _) in text.match_indices(key) {
            let value = &text[at + key.len()..];
            if let Some(end) = value.find('"') {
                seen.insert(value[..end].to_string());
            }
        }
    }
    seen
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `base/../x/./y` → `x/y`, without touching the file system (a target may not exist).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Where a relative link of `page` leads (repository-relative), and its anchor; `None` for a link that
/// leaves the repository (a URL, `mailto:`).
fn resolve(page: &Path, target: &str) -> Option<(PathBuf, Option<String>)> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor.to_string())),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        normalise(&page.parent().unwrap_or(Path::new("")).join(path))
    };
    Some((file, anchor))
}

#[test]
fn every_relative_link_in_the_docs_leads_to_a_file_and_heading_that_exist() {
    let mut dead = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        for (line, target) in links(&prose(&text)) {
            let Some((file, anchor)) = resolve(&page, &target) else {
                continue;
            };
            checked += 1;
            let at = format!("{}:{line}: ({target})", page.display());
            if target.is_empty() {
                dead.push(format!("{at} is an empty link"));
                continue;
            }
            if !Path::new(ROOT).join(&file).exists() {
                dead.push(format!("{at}: {} does not exist", file.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if file.extension().is_some_and(|ext| ext == "md")
                && !anchors(&read(&file)).contains(&anchor)
            {
                dead.push(format!("{at}: {} has no heading #{anchor}", file.display()));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} links found: is the link reader broken?"
    );
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

#[test]
fn the_readme_links_every_docs_page() {
    let readme = Path::new("README.md");
    let linked: BTreeSet<PathBuf> = links(&prose(&read(readme)))
        .into_iter()
        .filter_map(|(_, target)| resolve(readme, &target).map(|(file, _)| file))
        .collect();
    let missing: Vec<String> = pages()
        .into_iter()
        .filter(|page| page != readme && !linked.contains(page))
        .map(|page| page.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "pages the README's documentation index does not link: {missing:?}"
    );
}

#[test]
fn the_link_reader_sees_what_github_renders() {
    let page = "# Title\n\n## The fleet: `tokentap top --prometheus`\n\n## Several choices (`n` > 1)\n\n\
                ## Title\n\nSee [a](b.md#x), ![img](c.png), `[not](code.md)` and\n\n```sh\n[not](fenced.md)\n# not a heading\n```\n\n\
                [ref]: ../d.rs\n<a id=\"kept\"></a>\n";
    let found: Vec<String> = links(&prose(page)).into_iter().map(|(_, t)| t).collect();
    assert_eq!(found, ["b.md#x", "c.png", "../d.rs"]);
    let anchors = anchors(page);
    for anchor in [
        "title",
        "title-1",
        "the-fleet-tokentap-top---prometheus",
        "several-choices-n--1",
        "kept",
    ] {
        assert!(anchors.contains(anchor), "{anchor} not in {anchors:?}");
    }
    assert!(!anchors.contains("not-a-heading"));
    assert_eq!(
        resolve(Path::new("docs/lab/x.md"), "../../README.md#top"),
        Some((PathBuf::from("README.md"), Some("top".to_string())))
    );
}

/// `n` as the docs write a count: thousands separated by commas.
fn grouped(n: i64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The series bound's figures docs/metrics.md (and docs/deploy.md) state are the ones tokentap computes:
/// what the defaults count up front, what a pair and a name's first pair cost, the limit for `max_models:
/// 10`, and the 500-adapter page `tests/lora.rs` measures; a family that moves them fails here until the
/// pages say the new figures.
#[test]
fn the_pages_that_state_the_series_bound_state_the_computed_one() {
    let bound = |yaml: &str| {
        let config = tokentap::Config::from_yaml_str(yaml).expect("config");
        let metrics = tokentap::record::metrics::Metrics::new(&config).expect("metrics");
        metrics.bound()
    };
    let (default, ten) = (bound(""), bound("max_models: 10\n"));
    let chat = default.costs.per_api[tokentap::record::api::Api::Chat as usize];
    let words = |page: &str| {
        let text = read(Path::new(page));
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let (metrics_md, deploy_md) = (words("docs/metrics.md"), words("docs/deploy.md"));
    let lora = crate::lora::MEASURED;
    let mib = format!("{:.1} MiB", lora.page_mib);
    for (page, text, want) in [
        (
            "metrics.md",
            &metrics_md,
            format!(
                "with the defaults they are **{}** series",
                grouped(default.reserved as i64)
            ),
        ),
        (
            "metrics.md",
            &metrics_md,
            format!(
                "the rest of the budget ({} with the defaults)",
                grouped(default.budget() as i64)
            ),
        ),
        (
            "metrics.md",
            &metrics_md,
            format!("**{chat}** for an API with a dialect"),
        ),
        (
            "metrics.md",
            &metrics_md,
            format!(
                "plus, on the name's first pair, the **{}** of",
                default.costs.per_name
            ),
        ),
        (
            "metrics.md",
            &metrics_md,
            format!(
                "With the defaults `V` is {} series and the limit is the budget itself, **{}**;",
                grouped(default.costs.of(u16::MAX) as i64),
                grouped(default.total)
            ),
        ),
        (
            "metrics.md",
            &metrics_md,
            format!("with `max_models: 10`, {} (", grouped(ten.total)),
        ),
        (
            "metrics.md",
            &metrics_md,
            format!(
                "**{}** series, {} an adapter, a **{mib}** page",
                grouped(lora.series as i64),
                (lora.series + 250) / 500
            ),
        ),
        (
            "deploy.md",
            &deploy_md,
            format!(
                "`tokentap_metrics_series_limit`: {} with the defaults",
                grouped(default.total)
            ),
        ),
        (
            "deploy.md",
            &deploy_md,
            format!(
                "{} and a {mib} page for a vLLM with 500 LoRA adapters",
                grouped(lora.series as i64)
            ),
        ),
    ] {
        assert!(text.contains(&want), "docs/{page} does not say: {want}");
    }
}

/// Every page of more than 200 lines, the README included, opens with a contents list (a `Contents:`
/// line before its first `##` heading, then one link a line) that links each of its `##` headings.
#[test]
fn every_long_page_opens_with_a_contents_list_of_its_sections() {
    let mut missing = Vec::new();
    for page in pages() {
        let text = read(&page);
        if text.lines().count() <= 200 {
            continue;
        }
        let masked = prose(&text);
        let first_section = masked.lines().position(|l| l.starts_with("## "));
        let contents = text.lines().position(|l| l.trim() == "Contents:");
        let (Some(contents), Some(first_section)) = (contents, first_section) else {
            missing.push(format!("{}: no `Contents:` list", page.display()));
            continue;
        };
        if contents > first_section {
            missing.push(format!(
                "{}: its contents come after its first section",
                page.display()
            ));
            continue;
        }
        let listed: BTreeSet<String> = links(
            &text
                .lines()
                .skip(contents + 1)
                .take_while(|l| l.is_empty() || l.trim_start().starts_with("- "))
                .collect::<Vec<_>>()
                .join("\n"),
        )
        .into_iter()
        .filter_map(|(_, target)| target.strip_prefix('#').map(str::to_owned))
        .collect();
        for (raw, masked) in text.lines().zip(masked.lines()) {
            if masked.starts_with("## ") && !listed.contains(&slug(&raw[3..])) {
                missing.push(format!("{}: the contents lack `{raw}`", page.display()));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The docs speak to users: no internal specification names (`SPEC §10`) that a reader cannot open.
#[test]
fn no_page_cites_an_internal_spec() {
    let cited: Vec<String> = pages()
        .into_iter()
        .flat_map(|page| {
            let text = read(&page);
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.contains("SPEC §") || l.contains("SPEC.md"))
                .map(|(n, _)| format!("{}:{}", page.display(), n + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(cited.is_empty(), "internal spec cited at {cited:?}");
}

/// The rules in deploy/prometheus/rules/, counted from the files (each `- record:` or `- alert:`).
fn rules_in_the_files() -> usize {
    let dir = Path::new(ROOT).join("deploy/prometheus/rules");
    let mut rules = 0;
    for entry in std::fs::read_dir(&dir).expect("rules dir") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("rules file");
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("yaml");
        for group in doc["groups"].as_sequence().into_iter().flatten() {
            rules += group["rules"].as_sequence().map_or(0, Vec::len);
        }
    }
    rules
}

/// The numbers the docs quote about the repository are what the tools say: the count of Prometheus rules
/// (as promtool counts them, where it is installed, and as the files hold them) and the count of
/// integration suites (the modules of tests/it.rs and tests/heavy.rs and the binaries of their own), each of which
/// docs/testing.md's table describes.
#[test]
fn the_counts_the_docs_quote_are_what_the_tools_say() {
    let rules = rules_in_the_files();
    if let Ok(out) = std::process::Command::new("promtool")
        .arg("check")
        .arg("rules")
        .args(
            ["tokentap-alerts.yml", "tokentap-recording.yml"]
                .map(|f| Path::new(ROOT).join("deploy/prometheus/rules").join(f)),
        )
        .output()
    {
        let said = String::from_utf8_lossy(&out.stdout);
        let counted: usize = said
            .lines()
            .filter_map(|l| {
                l.trim()
                    .strip_prefix("SUCCESS: ")?
                    .strip_suffix(" rules found")?
                    .parse::<usize>()
                    .ok()
            })
            .sum();
        assert_eq!(counted, rules, "promtool: {said}");
    }
    let deploy = read(Path::new("docs/deploy.md"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let want = format!("all {rules} rules healthy");
    assert!(
        deploy.contains(&want),
        "docs/deploy.md does not say: {want}"
    );
    let crates = ["it", "heavy"];
    let mut suites: Vec<String> = crates
        .iter()
        .flat_map(|c| {
            read(Path::new(&format!("tests/{c}.rs")))
                .lines()
                .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
                .filter(|m| *m != "support")
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let cargo = read(Path::new("Cargo.toml"));
    suites.extend(
        cargo
            .lines()
            .filter_map(|l| l.strip_prefix("path = \"tests/")?.strip_suffix(".rs\""))
            .filter(|s| !crates.contains(s))
            .map(str::to_owned),
    );
    let testing = read(Path::new("docs/testing.md"));
    let words = testing.split_whitespace().collect::<Vec<_>>().join(" ");
    let want = format!("{} suites", suites.len());
    assert!(
        words.contains(&want),
        "docs/testing.md does not say: {want}"
    );
    let unlisted: Vec<&String> = suites
        .iter()
        .filter(|s| !testing.contains(&format!("`tests/{s}.rs`")))
        .collect();
    assert!(
        unlisted.is_empty(),
        "docs/testing.md's table lacks {unlisted:?}"
    );
}
