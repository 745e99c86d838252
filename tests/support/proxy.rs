//! tokentap started in-process on loopback ports, and what a test reads of the process it runs in:
//! requests in flight, open descriptors, resident memory.

use tokentap::{Config, Running};

use tokentap::scripted::ms;

/// Starts tokentap in-process in front of `upstream_url`, both ports on 127.0.0.1:0, with extra YAML.
/// The upstream's model list is not fetched unless `extra_yaml` has a `model_list:` of its own: the
/// scripted upstreams answer every request with their script, and count them.
pub async fn proxy(upstream_url: &str, extra_yaml: &str) -> Running {
    let yaml = format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {upstream_url}\n{}{extra_yaml}",
        without_model_list(extra_yaml)
    );
    let config = Config::from_yaml_str(&yaml).expect("test config");
    tokentap::start(&config).await.expect("start tokentap")
}
/// `model_list: {enabled: false}` unless `yaml` says otherwise.
pub fn without_model_list(yaml: &str) -> &'static str {
    match yaml.contains("model_list:") {
        true => "",
        false => "model_list: {enabled: false}\n",
    }
}

/// Waits (bounded) until the proxy has no request in flight.
pub async fn settle(proxy: &Running) {
    for _ in 0..200 {
        if proxy.in_flight() == 0 {
            return;
        }
        tokio::time::sleep(ms(10)).await;
    }
}
/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Resident set size of this process in KiB.
pub fn rss_kib() -> u64 {
    rss_kib_of(std::process::id())
}

/// Resident set size of process `pid` in KiB (0 if it cannot be read).
pub fn rss_kib_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
