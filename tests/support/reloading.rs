//! A test's tokentap started from a config file and reloaded from it, as the binary does on SIGHUP:
//! the reload suites' and the live page's (its ceilings follow a reload).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokentap::{Config, Reloaded, Running};

use super::Metrics;

/// The config file of a test's tokentap, in front of `upstream`: loopback ports, no model list, then
/// `extra`.
pub fn yaml(upstream: &str, extra: &str) -> String {
    format!(
        "listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\nupstream: {upstream}\nmodel_list: {{enabled: false}}\n{extra}"
    )
}

/// tokentap started from the file `path` holding `text`, reloading from that file as the binary does.
pub async fn start_from(path: &Path, text: &str) -> Running {
    std::fs::write(path, text).expect("write config");
    let config = Config::load(path).expect("test config");
    let running = tokentap::start(&config).await.expect("start tokentap");
    let file = path.to_owned();
    running.reload_from(Arc::new(move || {
        Config::load(&file).map_err(|e| e.to_string())
    }));
    running
}

/// Rewrites the file and reloads it, as an operator's edit and SIGHUP do.
pub async fn reload(running: &Running, path: &Path, text: &str) -> Reloaded {
    std::fs::write(path, text).expect("write config");
    running.reload().await
}

/// A config file of the temp dir named for `name` and this process, not there yet.
pub fn config_file(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "tokentap-reload-{name}-{}.yaml",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    path
}

/// The reloads counted with `result` (`success`, `failure`).
pub fn reloads(m: &Metrics, result: &str) -> f64 {
    m.get("tokentap_config_reloads_total", &[("result", result)])
}
